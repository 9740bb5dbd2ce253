package e2e

import (
	"strconv"
	"strings"
	"testing"
)

// maxOutputBytes and outputKeep (docs/protocol.md 4.6): a harness picks how
// much of stdout and stderr comes back, within relayd's own limits, and
// which end (inspect_ai keeps the tail); a cut is flagged.
func TestOutputLimits(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech, args: []string{"--max-stdout-bytes", "1KiB", "--max-stderr-bytes", "1KiB"}})
		c := d.connect()
		script := "printf 0123456789abcdefghij; printf ERR-0123456789 >&2"
		for _, tc := range []struct {
			extra              msg
			stdout, stderr     string
			stdoutCut, errsCut bool
		}{
			{msg{}, "0123456789abcdefghij", "ERR-0123456789", false, false},
			{msg{"maxOutputBytes": 5}, "01234", "ERR-0", true, true},
			{msg{"maxOutputBytes": 5, "outputKeep": "head"}, "01234", "ERR-0", true, true},
			{msg{"maxOutputBytes": 5, "outputKeep": "tail"}, "fghij", "56789", true, true},
			{msg{"maxOutputBytes": 20, "outputKeep": "tail"}, "0123456789abcdefghij", "ERR-0123456789", false, false},
		} {
			tc.extra["captureStderr"] = true
			r := c.sh(script, tc.extra)
			if r["stdout"] != tc.stdout || r["stderr"] != tc.stderr || r["stdoutTruncated"] != tc.stdoutCut || r["stderrTruncated"] != tc.errsCut {
				t.Errorf("%v: stdout %q (cut %v), stderr %q (cut %v); want %q (%v), %q (%v)", tc.extra, r["stdout"], r["stdoutTruncated"],
					r["stderr"], r["stderrTruncated"], tc.stdout, tc.stdoutCut, tc.stderr, tc.errsCut)
			}
		}
		// Within relayd's limit: a larger maxOutputBytes is the daemon's 1 KiB.
		long := "seq 1 20000"
		var all strings.Builder
		for i := 1; i <= 20000; i++ {
			all.WriteString(strconv.Itoa(i) + "\n")
		}
		for keep, want := range map[string]string{"head": all.String()[:1024], "tail": all.String()[all.Len()-1024:]} {
			r := c.sh(long, msg{"maxOutputBytes": 1 << 20, "outputKeep": keep})
			if r["stdout"] != want || r["stdoutTruncated"] != true {
				t.Errorf("outputKeep %s past relayd's 1 KiB: got %d bytes (cut %v), ending %q; want relayd's 1024, ending %q",
					keep, len(r["stdout"].(string)), r["stdoutTruncated"], tail(r["stdout"].(string), 12), tail(want, 12))
			}
		}
		for _, bad := range []msg{{"maxOutputBytes": 0}, {"outputKeep": "middle"}} {
			bad["kind"], bad["command"] = "execute", "true"
			if e := c.request(bad); e["kind"] != "error" {
				t.Errorf("%v: got %v; want a bad-request", bad, e)
			}
		}
	})
}
