package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	d, bin, tmux, pane := tmuxPerson(t, opts{})
	defer d.stopClean()
	script := q(bin) + ` shell; echo "first-exit=$?"; ` + q(bin) + ` shell --session s-1; echo "second-exit=$?"; sleep 600`
	tmux("new-session", "-d", "-s", "person", "-x", "100", "-y", "30", "sh", "-c", script)
	pane("ctrl-] detaches")
	pane("bash-")
	tmux("send-keys", "-t", "person", "echo $((6*7))-$(stty size)", "Enter")
	pane("42-30 100")
	tmux("resize-window", "-t", "person", "-x", "120", "-y", "40")
	// relayctl learns the new size from SIGWINCH and sends resize while
	// tmux types on: a line typed before relayd resized the terminal
	// shows the old size, so the line is typed again until it shows the
	// new one, as a person would.
	for i := 0; ; i++ {
		tmux("send-keys", "-t", "person", fmt.Sprintf(`echo "now""%d"-$(stty size)`, i), "Enter")
		if screen := pane(fmt.Sprintf("now%d-", i)); strings.Contains(screen, fmt.Sprintf("now%d-40 120", i)) {
			break
		} else if i == 20 {
			t.Fatalf("the terminal was not resized to 40x120: %s", screen)
		}
		time.Sleep(100 * time.Millisecond)
	}
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

// tmuxPerson starts relayd and a tmux server of the test's own (tmux -S,
// never a user's), and returns relayd (started with o), relayctl, a way to run tmux
// commands (relayctl in them finds relayd through RELAYD_TOKEN and
// RELAYCTL_ADDR) and one to wait until the pane "person" shows a text
// (it returns the screen).
func tmuxPerson(t *testing.T, o opts) (d *daemon, bin string, tmux func(args ...string) string, pane func(want string) string) {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux not installed (apt-get install tmux; .ci/run installs it)")
	}
	d = startRelayd(t, o)
	bin = relayctl(t)
	sock := filepath.Join(t.TempDir(), "tmux.sock")
	tmux = func(args ...string) string {
		t.Helper()
		cmd := exec.Command("tmux", append([]string{"-S", sock}, args...)...)
		cmd.Env = append(cleanEnv(), "TMUX=", "RELAYD_TOKEN="+d.token, "RELAYCTL_ADDR="+d.addr,
			"PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"))
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
	pane = func(want string) string {
		t.Helper()
		var screen string
		waitFor(t, 20*time.Second, "the pane to show "+strconv.Quote(want), func() bool {
			screen = tmux("capture-pane", "-p", "-J", "-S", "-200", "-t", "person")
			return strings.Contains(screen, want)
		})
		return screen
	}
	return d, bin, tmux, pane
}

// The README's relayctl shell example, as printed, typed into a tmux pane
// by a person: its command run, each line after a prompt typed (^] as the
// detach key), and every other line of it seen on the screen, in turn.
func TestReadmeRelayctlShell(t *testing.T) {
	section := readmeSection(t, "### relayctl")
	i := strings.Index(section, "\n    $ relayctl shell\n")
	if i < 0 {
		t.Fatal("README.md's relayctl section has no `$ relayctl shell` example")
	}
	var block []string
	for _, line := range strings.Split(section[i+1:], "\n") {
		l, ok := strings.CutPrefix(line, "    ")
		if !ok {
			break
		}
		block = append(block, l)
	}
	d, _, tmux, pane := tmuxPerson(t, opts{})
	defer d.stopClean()
	prompt := regexp.MustCompile(`^\S+\$ (.*)$`)
	typed := 0
	for n, l := range block {
		switch m := prompt.FindStringSubmatch(l); {
		case n == 0:
			command := strings.TrimPrefix(l, "$ ")
			tmux("new-session", "-d", "-s", "person", "-x", "100", "-y", "30", "sh", "-c", command+"; sleep 600")
		case m != nil && m[1] == "^]":
			tmux("send-keys", "-t", "person", "C-]")
			typed++
		case m != nil:
			waitFor(t, 20*time.Second, "the shell's prompt", func() bool {
				screen := strings.TrimRight(tmux("capture-pane", "-p", "-J", "-t", "person"), "\n ")
				return strings.HasSuffix(screen, "$") || strings.HasSuffix(screen, "#") // root's prompt here
			})
			tmux("send-keys", "-t", "person", m[1], "Enter")
			typed++
		default:
			pane(l)
		}
	}
	if typed < 2 {
		t.Fatalf("the README's relayctl shell example types %d lines; want a command and the detach key", typed)
	}
}

// Reattaching to a shell session replays its screen, and what vim, a
// pager and python printed there holds terminal queries (vim asks where
// the cursor is, ESC[6n, what the terminal is, ESC[>c, its colours,
// ESC]11;?): the local terminal answers what it is shown, and relayctl
// shell must not type those answers into the shell. In a tmux pane of the
// test's own: vi, :q, less, q, python3, exit(), detach, reattach, pwd,
// and the line after pwd is the working directory, no command not found.
func TestSessionRelayctlReattachAfterVim(t *testing.T) {
	if _, err := exec.LookPath("vi"); err != nil {
		t.Skip("vi not installed (apt-get install vim-tiny)")
	}
	for _, p := range []string{"less", "python3"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("%s not installed", p)
		}
	}
	d, bin, tmux, pane := tmuxPerson(t, opts{})
	defer d.stopClean()
	// TERM=xterm-256color: vim then asks the most of the terminal.
	script := `export TERM=xterm-256color; ` + q(bin) + ` shell; echo "first-exit=$?"; ` + q(bin) + ` shell --session s-1; echo "second-exit=$?"; sleep 600`
	tmux("new-session", "-d", "-s", "person", "-x", "100", "-y", "30", "sh", "-c", script)
	pane("ctrl-] detaches")
	pane("bash-")
	// screen waits until the pane shows want, and says what it showed.
	screen := func(want string) string {
		t.Helper()
		var s string
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			s = tmux("capture-pane", "-p", "-J", "-S", "-2000", "-t", "person")
			if strings.Contains(s, want) {
				return s
			} else if time.Now().After(deadline) {
				t.Fatalf("timed out after 20s waiting for the pane to show %q; it shows:\n%s", want, s)
			}
		}
	}
	// prompt waits for the shell's prompt on the last line, below the line
	// that typed cmd: keys typed while a program still ends can be lost to
	// it (vim drops what was typed ahead), so a person waits for it.
	prompt := func(cmd string) {
		t.Helper()
		waitFor(t, 20*time.Second, "the shell's prompt after "+cmd, func() bool {
			s := strings.TrimRight(tmux("capture-pane", "-p", "-J", "-S", "-2000", "-t", "person"), "\n ")
			i := strings.LastIndex(s, "# "+cmd+"\n")
			return i >= 0 && (strings.HasSuffix(s, "$") || strings.HasSuffix(s, "#")) // root's prompt here
		})
	}
	marker := func(name string) { // the shell's prompt back: a line only the shell's output shows
		t.Helper()
		tmux("send-keys", "-t", "person", "echo "+name+"-$((40+2))", "Enter")
		screen(name + "-42")
	}
	tmux("send-keys", "-t", "person", "vi", "Enter")
	screen("VIM - Vi IMproved")
	tmux("send-keys", "-t", "person", ":q", "Enter")
	prompt("vi")
	marker("after-vi")
	tmux("send-keys", "-t", "person", "seq 1 500 | less", "Enter")
	screen("\n20\n")
	tmux("send-keys", "-t", "person", "q")
	prompt("seq 1 500 | less")
	marker("after-less")
	tmux("send-keys", "-t", "person", "python3", "Enter")
	screen(">>> ")
	tmux("send-keys", "-t", "person", "exit()", "Enter")
	prompt("python3")
	marker("after-python")
	tmux("send-keys", "-t", "person", "C-]")
	pane("first-exit=0")
	waitFor(t, 20*time.Second, "the second relayctl shell", func() bool {
		return strings.Count(tmux("capture-pane", "-p", "-J", "-S", "-2000", "-t", "person"), "ctrl-] detaches") >= 2
	})
	marker("reattached")
	tmux("send-keys", "-t", "person", "pwd", "Enter")
	marker("after-pwd")
	shown := screen("after-pwd-42")
	if strings.Contains(shown, "command not found") {
		t.Fatalf("the terminal's answers to the replayed queries reached the shell as typed input:\n%s", shown)
	}
	lines := strings.Split(shown, "\n")
	found := false
	for i, l := range lines {
		if strings.HasSuffix(l, "# pwd") || strings.HasSuffix(l, "$ pwd") {
			if i+1 < len(lines) && strings.HasPrefix(lines[i+1], "/") {
				found = true
			}
		}
	}
	if !found {
		t.Fatalf("pwd after reattaching did not show the working directory:\n%s", shown)
	}
	tmux("send-keys", "-t", "person", "exit", "Enter")
	pane("second-exit=0")
}
