package e2e

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// relayctl shell as a person uses it, in a tmux pane of the test's own
// (tmux -S, never a user's server): a pty session attached to the pane,
// its size followed, the detach key leaving it running, and relayctl
// shell --session coming back to it until exit ends it.
func TestSessionRelayctlShellInTmux(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux not installed (apt-get install tmux; .ci/run installs it)")
	}
	d := startRelayd(t, opts{})
	defer d.stopClean()
	bin := relayctl(t)
	sock := filepath.Join(t.TempDir(), "tmux.sock")
	tmux := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("tmux", append([]string{"-S", sock}, args...)...)
		cmd.Env = append(cleanEnv(), "TMUX=", "RELAYD_TOKEN="+d.token, "RELAYCTL_ADDR="+d.addr)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %v: %v: %s", args, err, out)
		}
		return string(out)
	}
	t.Cleanup(func() {
		out, _ := exec.Command("tmux", "-S", sock, "display-message", "-p", "#{pid}").Output()
		if pid, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil {
			killPid(pid)
		}
	})
	script := q(bin) + ` shell; echo "first-exit=$?"; ` + q(bin) + ` shell --session s-1; echo "second-exit=$?"; sleep 600`
	tmux("new-session", "-d", "-s", "person", "-x", "100", "-y", "30", "sh", "-c", script)
	pane := func(want string) {
		t.Helper()
		var screen string
		waitFor(t, 20*time.Second, "the pane to show "+strconv.Quote(want), func() bool {
			screen = tmux("capture-pane", "-p", "-J", "-S", "-200", "-t", "person")
			return strings.Contains(screen, want)
		})
	}
	pane("ctrl-] detaches")
	pane("bash-")
	tmux("send-keys", "-t", "person", "echo $((6*7))-$(stty size)", "Enter")
	pane("42-30 100")
	tmux("resize-window", "-t", "person", "-x", "120", "-y", "40")
	tmux("send-keys", "-t", "person", "echo now-$(stty size)", "Enter")
	pane("now-40 120")
	tmux("send-keys", "-t", "person", "C-]")
	pane("first-exit=0")
	pane("detached; session s-1 runs on")
	pane("ctrl-] detaches") // the second relayctl shell
	tmux("send-keys", "-t", "person", "echo back-$((1+1))", "Enter")
	pane("back-2")
	tmux("send-keys", "-t", "person", "exit", "Enter")
	pane("second-exit=0")
	pane("session s-1 ended")
}
