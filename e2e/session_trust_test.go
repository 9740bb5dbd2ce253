package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// What a session's earlier commands can and cannot do to a later one's
// reply (protocol 4.7, issue 40): its status comes through a channel no
// definition, alias, trap or option left in the shell can fake, or the
// reply is a clear error; a session in use is not idle; and every
// command's executed carries usage (4.8).

// hijacks are earlier commands that try to make a later `false` report 0,
// each through the shell's own process: a function named like what a
// status line calls, an alias, a DEBUG trap with extdebug (which skips
// the next command), enable -n, a readonly variable. sh names the
// attacks that apply to a POSIX sh session too.
var hijacks = []struct {
	name, script string
	sh           bool
}{
	{"function builtin", `builtin() { if [ "$1" = printf ]; then command printf '%s 0\n' "${2%% *}"; elif [ "$1" = read ]; then shift; command builtin read "$@"; else command builtin "$@"; fi; }`, false},
	{"function printf", `printf() { command printf '%s 0\n' "${1%% *}"; }`, true},
	{"function command", `command() { if [ "$1" = eval ]; then true; return; fi; "$@"; }`, true},
	{"function eval", `eval() { return 0; }`, true},
	{"alias of a reserved word", `shopt -s expand_aliases 2>/dev/null; alias '{'='true || {'`, false},
	{"alias of eval", `alias eval='true ||' command='true ||'`, true},
	{"DEBUG trap with extdebug", `shopt -s extdebug; trap '[[ $BASH_COMMAND != *false* ]]' DEBUG`, false},
	{"DEBUG trap that forges", `q="'"; trap 'case $BASH_COMMAND in *">&3"*) n=${BASH_COMMAND#*$q}; command printf "%s 0\n" "${n%% *}" >&3;; esac' DEBUG`, false},
	{"enable -n", `enable -n printf read`, false},
	{"readonly", `readonly __relayd_e=0 __relayd_k=0 POSIXLY_CORRECT`, false},
	// xtrace: PS4's command substitutions run before each traced command
	// of a subshell that holds descriptor 3, and see its variables and
	// (bash) the command about to run, the nonce in both.
	{"xtrace with a PS4 that reads BASH_COMMAND", `exec 7>/dev/null; BASH_XTRACEFD=7; q="'"; __i=0; ` +
		`PS4='${__c[__i+=1]=$BASH_COMMAND}$(x=${__c[__i]}; case $x in *__relayd_*) n=${x#*__relayd_}; n=${n:0:32}; ` +
		`command printf "trap -- %s USR2\n" "${q}$n c${q}" "${q}$n 0${q}" >&3;; esac)'; set -x`, false},
	{"xtrace with a PS4 that reads the variables", `PS4='$(for n in $(set | sed -n "s/^__relayd_\([0-9a-f]*\)=.*/\1/p"); ` +
		`do printf "trap -- %s USR2\n" "'"'"'$n 0'"'"'" >&3; done)+ '; set -x`, true},
}

// wantNoForgedStatus: false's reply is its own status, 1, or a clear
// error; never 0.
func wantNoForgedStatus(t *testing.T, cl *client, name, attack string) {
	t.Helper()
	r := cl.request(msg{"kind": "execute", "id": "f", "session": name, "script": "false", "timeoutMs": 10000})
	switch {
	case r["kind"] == "error":
		e, _ := r["error"].(map[string]any)
		if m, _ := e["message"].(string); !strings.Contains(m, "earlier command") {
			t.Fatalf("%s: false got %v; want exit 1 or an error that says an earlier command's state is why", attack, r)
		}
	case r["kind"] == "executed" && r["termination"] == "exited" && num(t, r, "exitCode") == 1:
	default:
		t.Fatalf("%s: false got %v; want exit 1 or a clear error", attack, r)
	}
}

func TestSessionStatusHijack(t *testing.T) {
	eachScopeParallel(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech})
		cl := d.connect()
		for _, shell := range []string{"bash", "sh"} {
			for _, pty := range []bool{false, true} {
				for _, h := range hijacks {
					if shell == "sh" && !h.sh {
						continue
					}
					attack := fmt.Sprintf("%s (%s, pty %v)", h.name, shell, pty)
					open := msg{"shell": shell}
					if pty {
						open["pty"] = msg{"rows": 24, "cols": 80}
					}
					name := openSession(t, cl, open)
					r := cl.request(msg{"kind": "execute", "id": "h", "session": name, "script": h.script, "timeoutMs": 10000})
					if r["kind"] != "executed" && r["kind"] != "error" {
						t.Fatalf("%s: %v", attack, r)
					}
					wantNoForgedStatus(t, cl, name, attack)
					cl.request(msg{"kind": "close", "session": name})
				}
			}
		}
	})
}

// TestSessionStatusHijackTypedAtPrompt: a job an earlier command left in
// a pty session types a definition at the prompt (TIOCSTI) between
// commands; the next false still does not report 0.
func TestSessionStatusHijackTypedAtPrompt(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech})
		cl := d.connect()
		dir := t.TempDir()
		def := `builtin() { if [ "$1" = printf ]; then command printf '%s 0\n' "${2%% *}"; else command builtin "$@"; fi; }; shopt -s extdebug; trap '[[ $BASH_COMMAND != *false* ]]' DEBUG; echo typed-$((6*7))` + "\n"
		// TIOCSTI is 0x5412: each byte pushed into the terminal's input.
		prog := `open(my $t, '+<', '/dev/tty') or die; open(my $f, '<', 'typed.txt') or die; local $/; my $s = <$f>;
ioctl($t, 0x5412, $_) or die "TIOCSTI: $!" for split //, $s; print "done\n";
`
		for f, b := range map[string]string{"typed.txt": def, "typer.pl": prog} {
			if err := os.WriteFile(filepath.Join(dir, f), []byte(b), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		name := openSession(t, cl, msg{"cwd": dir, "pty": msg{"rows": 24, "cols": 80}})
		s := &term{t: t, cl: cl, name: name}
		r := cl.run(name, "(sleep 1; perl typer.pl > typer.out 2>&1) &", nil)
		wantExit(t, r, "exited", 0)
		s.until("typed-42")
		// perl says done after its last ioctl, which the shell may read
		// and run before perl writes: done is waited for, within a bound.
		var b []byte
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			b, _ = os.ReadFile(filepath.Join(dir, "typer.out"))
			if strings.Contains(string(b), "done") {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("the job could not type: %q", b)
			}
		}
		waitFor(t, 10*time.Second, "the prompt", func() bool {
			e := cl.request(msg{"kind": "execute", "session": name, "script": "false"})
			if e["kind"] == "error" {
				if m, _ := e["error"].(map[string]any)["message"].(string); strings.Contains(m, "foreground") {
					return false
				}
			}
			return true
		})
		wantNoForgedStatus(t, cl, name, "a definition typed at the prompt")
	})
}

// TestSessionIdleCountsUse: typing into a pty session and reading its
// screen is use: such a session outlives --session-idle-timeout; an unused
// one is closed.
func TestSessionIdleCountsUse(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech, args: []string{"--session-idle-timeout", "2s"}})
		cl := d.connect()
		name := openSession(t, cl, msg{"pty": msg{"rows": 24, "cols": 80}})
		open := func() bool {
			st := cl.request(msg{"kind": "status"})
			list, _ := st["sessions"].([]any)
			for _, s := range list {
				if s.(map[string]any)["session"] == name {
					return true
				}
			}
			return false
		}
		var next int64
		for end := time.Now().Add(6 * time.Second); time.Now().Before(end); {
			cl.send(msg{"kind": "stdin", "session": name, "data": "\x15"}) // Ctrl-U: kills the typed line
			time.Sleep(350 * time.Millisecond)
			r := cl.request(msg{"kind": "read", "session": name, "from": next})
			if r["kind"] != "terminal" {
				t.Fatalf("read of a session in use: %v", r)
			}
			next = num(t, r, "next")
			time.Sleep(350 * time.Millisecond)
		}
		if !open() {
			t.Fatalf("a session typed into and read every 0.7 s was closed by a 2 s idle timeout")
		}
		waitFor(t, 15*time.Second, "the unused session to be closed", func() bool { return !open() })
	})
}

// TestSessionCommandUsage: a session command's executed carries usage, the
// CPU its processes used among it.
func TestSessionCommandUsage(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech})
		cl := d.connect()
		for _, pty := range []bool{false, true} {
			open := msg{}
			if pty {
				open["pty"] = msg{"rows": 24, "cols": 80}
			}
			name := openSession(t, cl, open)
			r := cl.run(name, "true", nil)
			if _, ok := r["usage"].(map[string]any); !ok {
				t.Fatalf("pty %v: true's executed has no usage: %v", pty, r)
			}
			r = cl.run(name, `perl -e '1 while (times)[0] < 0.5'`, nil)
			wantExit(t, r, "exited", 0)
			u, ok := r["usage"].(map[string]any)
			if !ok {
				t.Fatalf("pty %v: a command that burnt 0.5 s of CPU has no usage: %v", pty, r)
			}
			if cpu := num(t, u, "cpuUserMs") + num(t, u, "cpuSystemMs"); cpu < 300 {
				t.Fatalf("pty %v: usage %v; want at least 300 ms of CPU", pty, u)
			}
			// A builtin loop runs in the shell itself: counted too.
			r = cl.run(name, `i=0; while [ $i -lt 500000 ]; do i=$((i+1)); done`, nil)
			u, _ = r["usage"].(map[string]any)
			if u == nil || num(t, u, "cpuUserMs")+num(t, u, "cpuSystemMs") < 100 {
				t.Fatalf("pty %v: a builtin loop of a second: usage %v", pty, r["usage"])
			}
			cl.request(msg{"kind": "close", "session": name})
		}
	})
}
