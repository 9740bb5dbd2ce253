package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// Where a seccomp filter refuses clone3 (Docker's default profile), the
// cgroup mechanism starts each subject through relayd's helper, which moves
// itself into the leaf and then execs the subject (the relayd_faults build
// refuses clone3 on request). The startup log says so; a forking escapee is
// settled as with clone3; and the subject sees what it would have seen
// born in its leaf: the same argv[0], environment, descriptors and
// working directory, and the same reply for a program that cannot run.
func TestCgroupWithoutClone3(t *testing.T) {
	if cgroupSkip != "" {
		t.Skip(cgroupSkip)
	}
	helper := opts{scope: "cgroup", bin: faultBin, env: []string{"RELAYD_FAULT_NO_CLONE3=1"}}
	t.Run("escapee", func(t *testing.T) { forkingEscapee(t, helper) })
	t.Run("subject-user", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root to switch users")
		}
		o := helper
		o.args = []string{"--subject-user", "nobody", "--workspace", "/"}
		d := startRelayd(t, o)
		r := d.connect().sh(`id -u; grep -c '^0::.*/relayd-[0-9]*/x-1$' /proc/$$/cgroup`, nil)
		if r["stdout"] != "65534\n1\n" {
			t.Fatalf("got %v; want nobody's uid (65534) and the leaf x-1 in its /proc/self/cgroup", r)
		}
		d.stopClean()
	})
	t.Run("same-as-born-in-the-leaf", func(t *testing.T) {
		born := startRelayd(t, opts{scope: "cgroup", bin: faultBin})
		entered := startRelayd(t, helper)
		if strings.Contains(born.logs.String(), "clone3 is refused") {
			t.Fatal("relayd without the fault says clone3 is refused")
		}
		if !strings.Contains(entered.logs.String(), "clone3 is refused here") {
			t.Fatal("the startup log does not say that clone3 is refused")
		}
		requests := []msg{
			{"command": "/bin/sh", "args": []string{"-c", `echo "$0"; ls /proc/$$/fd; basename "$PWD"; env | grep -v '^PWD=' | sort`}},
			{"command": "/bin/sh", "args": []string{"-c", `grep -c '^0::.*/relayd-[0-9]*/x-2$' /proc/$$/cgroup; exit 3`}, "environment": map[string]string{"A": "b"}},
			// Meant for the subject, fatal to a Go program such as the helper.
			{"command": "/bin/sh", "args": []string{"-c", `echo "$GOMEMLIMIT"`}, "environment": map[string]string{"GOMEMLIMIT": "bad"}},
			{"command": "no-such-program-here"},
			{"command": "/etc/passwd"},
			{"command": "/bin/true", "cwd": "no-such-directory"},
		}
		cb, ce := born.connect(), entered.connect()
		for i, req := range requests {
			req["kind"] = "execute"
			got, want := ce.request(copyMsg(req)), cb.request(copyMsg(req))
			if i == 1 && got["stdout"] != "1\n" {
				t.Errorf("the subject's /proc/self/cgroup does not name its leaf x-2: stdout %q", got["stdout"])
			}
			for _, k := range []string{"kind", "termination", "exitCode", "stdout", "diagnostic", "category", "message", "settlement"} {
				if g, w := stringOf(got[k]), stringOf(want[k]); g != w {
					t.Errorf("%v: %s = %s through the helper; want %s as born in the leaf", req["args"], k, g, w)
				}
			}
		}
		born.stopClean()
		entered.stopClean()
	})
}

func copyMsg(m msg) msg {
	out := msg{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

func stringOf(v any) string {
	if v == nil {
		return "<none>"
	}
	return strings.ReplaceAll(strings.TrimSpace(fmt.Sprint(v)), "\n", `\n`)
}
