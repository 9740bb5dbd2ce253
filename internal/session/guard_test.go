package session

import "testing"

// TestGuardListing: what counts as a trap in a bash guard's listing
// (readStatus): anything but a line's own words in POSIX mode's form and
// an ignored signal's line.
func TestGuardListing(t *testing.T) {
	sh := &shell{}
	sh.expect.Store(&[4]string{"n1", "e1", "n0", "e0"})
	for _, c := range []struct {
		msg  string
		want bool // counted as a trap
	}{
		{"trap -- 'n1 c' USR2\n", false},
		{"trap -- 'n1 0' USR2\n", false},
		{"trap -- 'e1 e' USR2\n", false},
		{"trap -- 'e1 e' SIGUSR2\n", false}, // the end without POSIX mode
		{"trap -- 'n0 1' USR2\n", false},    // late, from the line before
		{"trap -- 'e0 e' USR2\n", false},
		{"trap -- 'n1 0' SIGUSR2\n", true}, // a USR2 trap the guard listed
		{"trap -- 'x 0' USR2\n", true},
		{"trap -- 'echo hi' SIGINT\n", true},
		{"trap -- '' SIGPIPE\n", false},
		{"trap -- '' DEBUG\n", false},
		{"trap -- ':' DEBUG\n", true},
		{"trap -- '' SIGPIPE\ntrap -- 'x' SIGINT\n", true},
		{"garbage", true},
	} {
		nonce, word, ok := parseStatus([]byte(c.msg))
		got := !(ok && sh.expected(nonce, word, []byte(c.msg))) && !ignoredTrap([]byte(c.msg))
		if got != c.want {
			t.Errorf("%q: counted %v, want %v", c.msg, got, c.want)
		}
	}
}
