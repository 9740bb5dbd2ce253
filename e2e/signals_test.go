package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relayd/relayd/internal/env"
)

// Protocol rule 6.13: each process gets each signal of a settlement once.
// Many programs take a second SIGTERM (or SIGINT) as "quit now, skip the
// clean-up", so a SIGTERM sent twice loses the grace.
//
// termCountPy is a subject tree that counts the SIGTERMs each of its
// processes takes: argv is the file each process appends its pid to on
// every SIGTERM, the file it appends its pid to once it catches SIGTERM,
// how many children the subject forks (the first one leaves the session)
// and "exit" when the subject itself exits once its children are ready,
// leaving them (else it stays, a member too), and optionally a
// cgroup.procs file the second child moves itself into (out of its leaf:
// it stays in its shim's subtree). A process lives on after
// SIGTERM, so that the whole grace counts, and dies of the SIGKILL at its
// end. Python runs a handler once per delivery that the kernel did not
// merge with a pending one: a second SIGTERM sent at once may be merged
// and go unseen, one sent a little later is counted.
const termCountPy = `import os, signal, sys, time
terms, ready, n, leave = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "exit"
move = sys.argv[5] if len(sys.argv) > 5 else ""
def rec(path):
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.write(fd, b"%d\n" % os.getpid())
    os.close(fd)
def member():
    signal.signal(signal.SIGTERM, lambda sig, frame: rec(terms))
    rec(ready)
    while True:
        time.sleep(1)
for i in range(n):
    if os.fork() == 0:
        if i == 0:
            os.setsid()
        if i == 1 and move:
            with open(move, "w") as f:
                f.write(str(os.getpid()))
        member()
if leave:
    while True:
        try:
            if len(open(ready).read().split()) >= n:
                break
        except FileNotFoundError:
            pass
        time.sleep(0.01)
    os._exit(0)
member()
`

// termTree is one counting subject: its files, and the pids that must
// each take SIGTERM once.
type termTree struct {
	terms, ready string
	want         int // processes that record themselves ready
}

func newTermTree(t *testing.T, d *daemon, name string, children int, leave bool) (*termTree, msg) {
	return newTermTreeIn(t, d, d.dir, name, children, leave)
}

// newTermTreeIn is newTermTree with its files in dir (one a subject of
// another user can write).
func newTermTreeIn(t *testing.T, d *daemon, dir, name string, children int, leave bool) (*termTree, msg) {
	t.Helper()
	ready := filepath.Join(dir, name+".ready")
	d.pidFiles = append(d.pidFiles, ready)
	tr := &termTree{terms: filepath.Join(dir, name+".terms"), ready: ready, want: children + 1}
	mode := "stay"
	if leave {
		mode, tr.want = "exit", children
	}
	return tr, msg{"kind": "execute", "command": python3(t),
		"args": []string{"-c", termCountPy, tr.terms, tr.ready, strconv.Itoa(children), mode}}
}

// pids waits until every process of the tree is ready, and returns them.
func (tr *termTree) pids(t *testing.T) []int {
	t.Helper()
	var pids []int
	waitFor(t, 15*time.Second, "the counting tree to be ready", func() bool {
		pids = readPids(tr.ready)
		return len(pids) >= tr.want
	})
	return pids
}

// check waits until every process of pids is gone and then asserts that
// each took SIGTERM exactly once.
func (tr *termTree) check(t *testing.T, pids []int) {
	t.Helper()
	waitFor(t, 10*time.Second, "the counting tree to be gone", func() bool {
		for _, pid := range pids {
			if alive(pid) {
				return false
			}
		}
		return true
	})
	got := map[int]int{}
	for _, pid := range readPids(tr.terms) {
		got[pid]++
	}
	var bad []string
	for _, pid := range pids {
		if got[pid] != 1 {
			bad = append(bad, strconv.Itoa(pid)+": "+strconv.Itoa(got[pid]))
		}
	}
	if len(bad) > 0 {
		t.Fatalf("SIGTERMs taken per process (pid: count) %s; want each of %v once", strings.Join(bad, ", "), pids)
	}
}

// TestSignalsOncePerSettlement runs a counting tree through every path
// that settles a scope, in both mechanisms.
func TestSignalsOncePerSettlement(t *testing.T) {
	paths := []struct {
		name  string
		leave bool // the subject exits by itself and leaves its children
		run   func(t *testing.T, d *daemon, c *client, ex msg) msg
	}{
		{"deadline", false, func(t *testing.T, d *daemon, c *client, ex msg) msg {
			ex["timeoutMs"] = 3000
			c.send(ex)
			return nil
		}},
		{"verify", false, func(t *testing.T, d *daemon, c *client, ex msg) msg {
			c.send(ex)
			return msg{"kind": "verify"}
		}},
		{"transport-loss", false, func(t *testing.T, d *daemon, c *client, ex msg) msg {
			c.send(ex)
			return msg{"close": true}
		}},
		{"shutdown", false, func(t *testing.T, d *daemon, c *client, ex msg) msg {
			c.send(ex)
			return msg{"signal": syscall.SIGTERM}
		}},
		{"relayd-killed", false, func(t *testing.T, d *daemon, c *client, ex msg) msg {
			c.send(ex)
			return msg{"signal": syscall.SIGKILL}
		}},
		{"on-exit-settle", true, func(t *testing.T, d *daemon, c *client, ex msg) msg {
			ex["onExit"] = "settle"
			c.send(ex)
			return nil
		}},
		{"trial-boundary", true, func(t *testing.T, d *daemon, c *client, ex msg) msg {
			if r := c.request(ex); r["kind"] != "executed" || r["settlement"] != "none" {
				t.Fatalf("got %v; want executed, left alone", r)
			}
			return msg{"kind": "verify", "all": true, "survivors": "settle"}
		}},
	}
	users := []string{""} // relayd's own user (root here)
	if os.Geteuid() == 0 {
		users = append(users, "nobody") // --subject-user: the subject cannot signal relayd's processes
	}
	for _, p := range paths {
		for _, user := range users {
			name := p.name
			if user != "" {
				name += "/" + user
			}
			t.Run(name, func(t *testing.T) {
				eachScope(t, func(t *testing.T, mech string) {
					o := opts{scope: mech}
					if p.name == "relayd-killed" {
						o = deathOpts(t, mech)
					}
					dir, uid := "", os.Geteuid()
					if user != "" {
						uid = 65534
						o.args = append(o.args, "--subject-user", user, "--workspace", "/")
						dir = sharedTempDir(t)
					}
					signalsOnce(t, p.name, p.leave, p.run, o, dir, uid)
				})
			})
		}
	}
}

// signalsOnce is one settling path of TestSignalsOncePerSettlement: a
// counting tree started with run, settled as then says, each process
// counted; dir, when set, holds the tree's files (else relayd's test
// directory), written by a subject of uid.
func signalsOnce(t *testing.T, path string, leave bool, run func(*testing.T, *daemon, *client, msg) msg, o opts, dir string, uid int) {
	t.Helper()
	d := startRelayd(t, o)
	c := d.connect()
	if dir == "" {
		dir = d.dir
	}
	tr, ex := newTermTreeIn(t, d, dir, "tree", 3, leave)
	then := run(t, d, c, ex)
	pids := tr.pids(t)
	if fi, err := os.Stat(tr.ready); err != nil || int(fi.Sys().(*syscall.Stat_t).Uid) != uid {
		t.Fatalf("the tree's file %s: %v; want it made by uid %d", tr.ready, err, uid)
	}
	switch {
	case then == nil: // the deadline, or the subject's own exit
	case then["close"] == true:
		c.c.Close()
	case then["signal"] != nil:
		d.signal(then["signal"].(syscall.Signal))
	default:
		c.send(then)
	}
	tr.check(t, pids)
	switch {
	case then["signal"] == syscall.SIGKILL:
		d.wait(10 * time.Second)
	case then["signal"] == syscall.SIGTERM:
		if r := c.read(10 * time.Second); r == nil || r["kind"] != "executed" || r["settlement"] != "settled" {
			t.Fatalf("got %v; want executed, settled", r)
		}
		c.c.Close() // no verify: relayd need not wait for one (rule 6.8)
		if code := d.wait(15 * time.Second); code != 0 {
			t.Fatalf("relayd exited %d after SIGTERM; want 0", code)
		}
	default:
		if then["close"] != true {
			r := c.read(10 * time.Second)
			if path == "trial-boundary" {
				if r == nil || r["kind"] != "verified" || r["quiescent"] != true {
					t.Fatalf("got %v; want verified, quiescent", r)
				}
			} else if r == nil || r["kind"] != "executed" || r["settlement"] != "settled" {
				t.Fatalf("got %v; want executed, settled", r)
			}
		}
		d.stopClean()
	}
}

// TestSignalsOnceMovedOutOfLeaf: in the cgroup mechanism a root subject
// can move a process out of its leaf (here into the root cgroup); it is
// still of its shim's subtree, and takes the settlement's SIGTERM once,
// as the processes left in the leaf do.
func TestSignalsOnceMovedOutOfLeaf(t *testing.T) {
	if cgroupSkip != "" {
		t.Skip(cgroupSkip)
	}
	if os.Geteuid() != 0 {
		t.Skip("moving a process into the root cgroup needs root")
	}
	cg, err := env.FindCgroup2("")
	if err != nil || cg.Outside {
		t.Skip("no cgroup2 root to move a process into:", err)
	}
	d := startRelayd(t, opts{scope: "cgroup"})
	c := d.connect()
	tr, ex := newTermTree(t, d, "tree", 3, false)
	ex["args"] = append(ex["args"].([]string), filepath.Join(cg.Mount, "cgroup.procs"))
	c.send(ex)
	pids := tr.pids(t)
	moved := 0
	for _, pid := range pids {
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup"); err == nil && slices.Contains(strings.Split(string(b), "\n"), "0::/") {
			moved++
		}
	}
	if moved != 1 {
		t.Fatalf("%d processes of the tree are in the root cgroup; want the one that moved there", moved)
	}
	c.send(msg{"kind": "verify"})
	tr.check(t, pids)
	if r := c.read(10 * time.Second); r == nil || r["kind"] != "executed" || r["settlement"] != "settled" {
		t.Fatalf("got %v; want executed, settled", r)
	}
	d.stopClean()
}

// TestSignalsOnceTrialKeep: a trial boundary that settles survivors but
// keeps one signals every other process of the scope one by one: each
// takes SIGTERM once, and the kept one none.
func TestSignalsOnceTrialKeep(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech})
		c := d.connect()
		tr, ex := newTermTree(t, d, "tree", 3, true)
		r := c.request(ex)
		if r["kind"] != "executed" || r["settlement"] != "none" {
			t.Fatalf("got %v; want executed, left alone", r)
		}
		pids := tr.pids(t)
		kept, rest := pids[0], pids[1:]
		v := boundary(t, c, msg{"survivors": "settle", "keep": []msg{keepEntry(t, r, kept)}})
		if v["quiescent"] != true {
			t.Fatalf("verified %v; want quiescent", v)
		}
		tr.check(t, rest)
		if !alive(kept) || readCount(tr.terms, kept) != 0 {
			t.Fatalf("kept %d: alive %v, SIGTERMs %d; want alive and never signalled", kept, alive(kept), readCount(tr.terms, kept))
		}
		killPid(kept)
		d.stopClean()
	})
}

// readCount is how many lines of path name pid.
func readCount(path string, pid int) int {
	n := 0
	for _, p := range readPids(path) {
		if p == pid {
			n++
		}
	}
	return n
}

// TestSignalsOnceRelaydDiesSettling: relayd is SIGKILLed during the grace
// of a settlement it began; the execution's shim settles its subtree by
// itself (rule 6.10) and sends no second SIGTERM: SIGKILL once the rest
// of the grace has passed.
func TestSignalsOnceRelaydDiesSettling(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		o := deathOpts(t, mech)
		o.args = append(o.args, "--term-grace", "2s", "--teardown-timeout", "6s")
		d := startRelayd(t, o)
		c := d.connect()
		tr, ex := newTermTree(t, d, "tree", 3, false)
		c.send(ex)
		pids := tr.pids(t)
		c.send(msg{"kind": "verify"})
		waitFor(t, 5*time.Second, "every process to take the settlement's SIGTERM", func() bool {
			for _, pid := range pids {
				if readCount(tr.terms, pid) == 0 {
					return false
				}
			}
			return true
		})
		d.signal(syscall.SIGKILL)
		d.wait(10 * time.Second)
		tr.check(t, pids)
	})
}

// sharedTempDir is a directory of the test's that a subject of another
// user can write into (t.TempDir's are 0700), removed at the end.
func sharedTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "relayd-signals-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}
