package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// relayctl exec -t as a person uses it, in a tmux pane of the test's own
// (tmux -S, never a user's server): python3's REPL on a terminal of its
// own that takes the pane's size and follows its resize, evaluates what
// is typed, is interrupted by Ctrl-C, and exit(3) is relayctl's status,
// with the pane's terminal mode restored.
func TestPtyRelayctlInTmux(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d, bin, tmux, pane := tmuxPerson(t, opts{scope: mech})
		defer d.stopClean()
		modes := `stty -a | tr ' ;' '\n\n' | grep -x -e icanon -e echo -e -icanon -e -echo | tr '\n' ' '`
		script := modes + `; echo; ` + q(bin) + ` exec -t -- /usr/bin/python3 -q; echo "relayctl-exit=$?"; ` + modes + `; echo; sleep 600`
		tmux("new-session", "-d", "-s", "person", "-x", "100", "-y", "30", "sh", "-c", script)
		pane(">>> ")
		tmux("send-keys", "-t", "person", "import os, shutil, time; print(shutil.get_terminal_size(), os.isatty(0), os.environ['TERM'])", "Enter")
		pane("os.terminal_size(columns=100, lines=30) True tmux")
		tmux("resize-window", "-t", "person", "-x", "120", "-y", "40")
		// relayctl sends resize on SIGWINCH while tmux types on: a line
		// that ran before relayd resized the terminal shows the old size,
		// so it is typed again until the new one shows.
		for i := 0; ; i++ {
			tmux("send-keys", "-t", "person", fmt.Sprintf("print('now'+'%d', shutil.get_terminal_size())", i), "Enter")
			if screen := pane(fmt.Sprintf("now%d os.", i)); strings.Contains(screen, fmt.Sprintf("now%d os.terminal_size(columns=120, lines=40)", i)) {
				break
			} else if i == 20 {
				t.Fatalf("the terminal was not resized to 40x120: %s", screen)
			}
			time.Sleep(100 * time.Millisecond)
		}
		tmux("send-keys", "-t", "person", "time.sleep(60)", "Enter")
		time.Sleep(300 * time.Millisecond) // the sleep begins
		tmux("send-keys", "-t", "person", "C-c")
		pane("KeyboardInterrupt")
		tmux("send-keys", "-t", "person", "exit(3)", "Enter")
		pane("relayctl-exit=3")
		var screen string
		waitFor(t, 20*time.Second, "the pane's mode after relayctl", func() bool {
			screen = tmux("capture-pane", "-p", "-J", "-S", "-200", "-t", "person")
			return strings.Count(screen, "icanon") >= 2 // restored or not: the line is there
		})
		t.Logf("the pane:\n%s", screen)
		before, after, _ := strings.Cut(screen, "relayctl-exit=3")
		if first := strings.SplitN(before, "\n", 2)[0]; !strings.Contains(first, "icanon") || !strings.Contains(first, "echo") ||
			!strings.Contains(after, first) {
			t.Fatalf("the pane's mode before relayctl %q, after it: %q; want icanon and echo, the same after", first, after)
		}
	})
}

// The README's relayctl exec -t example is typed into a tmux pane as
// printed (what follows each ">>> " is typed), and the pane must show
// the README's lines.
func TestReadmeRelayctlTerminal(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux not installed (apt-get install tmux; .ci/run installs it)")
	}
	var command string
	var want []string
	for _, line := range strings.Split(readmeSection(t, "### relayctl"), "\n") {
		l, indented := strings.CutPrefix(line, "    ")
		switch {
		case indented && strings.HasPrefix(l, "$ relayctl exec -t "):
			command = strings.TrimPrefix(l, "$ ")
		case indented && command != "":
			want = append(want, l)
		case command != "":
		}
		if command != "" && !indented && len(want) > 0 {
			break
		}
	}
	if command == "" || len(want) < 2 {
		t.Fatalf("the README shows no relayctl exec -t example (%q, %q)", command, want)
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
	tmux("new-session", "-d", "-s", "readme", "-x", "200", "-y", "30", "sh", "-c",
		"PATH="+q(filepath.Dir(bin))+":$PATH; "+command+"; echo done; sleep 600")
	var screen string
	show := func(n int, want string) {
		t.Helper()
		waitFor(t, 20*time.Second, "the pane to show "+strconv.Quote(want), func() bool {
			screen = tmux("capture-pane", "-p", "-J", "-t", "readme")
			return strings.Count(screen, want) >= n
		})
	}
	prompts := 0
	for _, l := range want {
		if typed, ok := strings.CutPrefix(l, ">>> "); ok {
			prompts++
			show(prompts, ">>> ")
			tmux("send-keys", "-t", "readme", typed, "Enter")
		}
	}
	show(1, "\ndone\n")
	got := strings.Split(strings.TrimRight(screen[:strings.Index(screen, "\ndone\n")], "\n"), "\n")
	if g, w := readmeNormal(got), readmeNormal(want); !slices.Equal(g, w) {
		t.Errorf("the README's relayctl exec -t printed\n%s\nwant (README.md)\n%s", strings.Join(g, "\n"), strings.Join(w, "\n"))
	}
}

// relayctl exec -t with a stdin that is no terminal still runs the
// command on a pty, 24x80 as docker exec -t gives it, with relayctl's
// stdin only with -i, and exits with the command's status (124 at its
// --timeout).
func TestPtyRelayctlNoTerminal(t *testing.T) {
	d := startRelayd(t, opts{})
	defer d.stopClean()
	bin := relayctl(t)
	run := func(stdin string, args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(cleanEnv(), "RELAYD_TOKEN="+d.token, "RELAYCTL_ADDR="+d.addr, "TERM=vt220")
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.Output()
		if err != nil && cmd.ProcessState == nil {
			t.Fatal(err)
		}
		return string(out), cmd.ProcessState.ExitCode()
	}
	if out, code := run("", "exec", "-t", "--", "sh", "-c", `tty >/dev/null && stty size && echo "$TERM" && exit 5`); out != "24 80\r\nvt220\r\n" || code != 5 {
		t.Fatalf("exec -t without a terminal: %q, exit %d; want 24 80, vt220, exit 5", out, code)
	}
	if out, code := run("typed\r", "exec", "-t", "-i", "--", "sh", "-c", `read l; echo "got $l"`); !strings.Contains(out, "got typed\r\n") || code != 0 {
		t.Fatalf("exec -t -i: %q, exit %d; want the line typed", out, code)
	}
	if _, code := run("", "exec", "-t", "--timeout", "500ms", "--", "sleep", "30"); code != 124 {
		t.Fatalf("exec -t --timeout: exit %d; want 124", code)
	}
	if _, code := run("", "exec", "-t", "--stderr", "--", "true"); code != 125 {
		t.Fatalf("exec -t --stderr: exit %d; want 125 (refused)", code)
	}
}
