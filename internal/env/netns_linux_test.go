package env

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseNetns(t *testing.T) {
	for _, ok := range []string{"/proc/1/ns/net", "/run/netns/egress", "net:[4026531840]"} {
		if n, err := ParseNetns(ok); err != nil || n.String() != ok {
			t.Errorf("ParseNetns(%q) = %v, %v; want it as given", ok, n, err)
		}
	}
	for _, bad := range []string{"", "ns/net", "net:4026531840", "net:[]", "net:[0]", "net:[x]", "net:[1", "mnt:[1]"} {
		if _, err := ParseNetns(bad); err == nil {
			t.Errorf("ParseNetns(%q) = nil error; want it refused", bad)
		}
	}
}

// relayd's own namespace passes in both forms; another inode, a file that
// is not a namespace, and a missing path fail, naming relayd's own.
func TestCheckNetns(t *testing.T) {
	own, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Skip(err)
	}
	plain := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		spec string
		want string // in the error; "" for none
	}{
		{"/proc/self/ns/net", ""},
		{own, ""},
		{"/proc/thread-self/ns/net", ""},
		{"net:[1]", "not in the required net:[1]"},
		{plain, "not a namespace file"},
		{"/proc/self/ns/uts", "not of a network namespace"},
		{filepath.Join(t.TempDir(), "missing"), "no such file"},
	} {
		n, err := ParseNetns(tt.spec)
		if err != nil {
			t.Fatal(err)
		}
		err = CheckNetns(n)
		if tt.want == "" {
			if err != nil {
				t.Errorf("CheckNetns(%s) = %v; want nil", tt.spec, err)
			}
			if err := RecheckNetns(n); err != nil {
				t.Errorf("RecheckNetns(%s) = %v; want nil", tt.spec, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), own) {
			t.Errorf("CheckNetns(%s) = %v; want an error with %q and relayd's own %s", tt.spec, err, tt.want, own)
		}
	}
}
