package env

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseCapabilities(t *testing.T) {
	tests := []struct {
		list string
		want []int
		err  string // a substring of the error; "" for valid
	}{
		{"NET_RAW", []int{13}, ""},
		{"cap_net_admin,NET_RAW", []int{12, 13}, ""},
		{" Net_Raw , CAP_NET_RAW,net_raw", []int{13}, ""},
		{"CHOWN,CHECKPOINT_RESTORE", []int{0, 40}, ""},
		{"NET_RAW,NET_ROW", nil, `"NET_ROW"`},
		{"CAP_", nil, `"CAP_"`},
		{"ALL", nil, `"ALL"`},
		{"NET_RAW,", nil, "empty"},
		{"", nil, "empty"},
	}
	for _, tt := range tests {
		got, err := ParseCapabilities(tt.list)
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("ParseCapabilities(%q) = %v; want %v", tt.list, err, tt.want)
		case tt.err == "" && !slices.Equal(got, tt.want):
			t.Errorf("ParseCapabilities(%q) = %v; want %v", tt.list, got, tt.want)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("ParseCapabilities(%q) = %v, %v; want an error with %q", tt.list, got, err, tt.err)
		}
	}
	for n := range capNames {
		if capNames[n] == "" {
			t.Errorf("capability %d has no name", n)
		}
	}
}

// heldCapabilities counts every set, as Maka's relay does: a capability in
// the ambient or inheritable set alone counts.
func TestHeldCapabilities(t *testing.T) {
	const none = "0000000000000000"
	status := func(inh, prm, eff, bnd, amb string) string {
		s := "Name:\trelayd\nCapInh:\t" + inh + "\nCapPrm:\t" + prm + "\nCapEff:\t" + eff + "\nCapBnd:\t" + bnd + "\n"
		if amb != "" {
			s += "CapAmb:\t" + amb + "\n"
		}
		return s
	}
	tests := []struct {
		name, status string
		held         []string
		where        string
		err          string
	}{
		{"root", status(none, "000001ffffffffff", "000001ffffffffff", "000001ffffffffff", none), []string{"NET_ADMIN", "NET_RAW"}, "CapPrm CapEff CapBnd", ""},
		{"none", status(none, none, none, "000001ffffffcfff", none), nil, "", ""},
		{"bounding only", status(none, none, none, "0000000000002000", none), []string{"NET_RAW"}, "CapBnd", ""},
		{"ambient only", status(none, none, none, none, "0000000000001000"), []string{"NET_ADMIN"}, "CapAmb", ""},
		{"inheritable only", status("0000000000003000", none, none, none, none), []string{"NET_ADMIN", "NET_RAW"}, "CapInh", ""},
		{"no ambient line", status(none, none, none, "0000000000002000", ""), []string{"NET_RAW"}, "CapBnd", ""},
		{"no bounding line", "CapInh:\t0\nCapPrm:\t0\nCapEff:\t0\n", nil, "", "no CapBnd line"},
		{"bad value", status(none, "zz", none, none, none), nil, "", "CapPrm"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "status")
			if err := os.WriteFile(path, []byte(tt.status), 0o600); err != nil {
				t.Fatal(err)
			}
			held, where, err := heldCapabilities(path, EgressBypass)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("heldCapabilities = %v, %q, %v; want an error with %q", held, where, err, tt.err)
				}
				return
			}
			if err != nil || !slices.Equal(held, tt.held) || where != tt.where {
				t.Fatalf("heldCapabilities = %v, %q, %v; want %v, %q", held, where, err, tt.held, tt.where)
			}
		})
	}
}
