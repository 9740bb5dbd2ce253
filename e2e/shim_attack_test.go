package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The attacks of issue 16 on the shims themselves: a subject that
// ptraces, signals or pidfd_getfd's its own shim or another execution's,
// or (cgroup mechanism) writes pids into another execution's leaf. Each
// runs in process-group, cgroup, and cgroup without clone3 (the helper
// path a seccomp filter like Docker's forces), and counts the outcomes in
// the log. RELAYD_SHIMATTACK_RUNS sets how often each attack is tried (1).

func shimAttackRuns() int {
	if n, err := strconv.Atoi(os.Getenv("RELAYD_SHIMATTACK_RUNS")); err == nil && n > 0 {
		return n
	}
	return 1
}

// attackMechs runs test once per mechanism, the cgroup ones skipped where
// cgroup v2 is unusable.
func attackMechs(t *testing.T, test func(t *testing.T, mech string, o opts)) {
	for _, m := range []struct {
		name string
		o    opts
	}{
		{"process-group", opts{scope: "process-group"}},
		{"cgroup", opts{scope: "cgroup"}},
		{"cgroup-without-clone3", opts{scope: "cgroup", bin: faultBin, env: []string{"RELAYD_FAULT_NO_CLONE3=1"}}},
	} {
		t.Run(m.name, func(t *testing.T) {
			if m.o.scope == "cgroup" && cgroupSkip != "" {
				t.Skip(cgroupSkip)
			}
			test(t, m.name, m.o)
		})
	}
}

// shimAttackPy is execution B's subject. argv: the results file, the file
// holding A's subject pid, the final attack (none, stop-A, kill-A,
// kill-own, or all: SIGSTOP and SIGKILL to A's shim and SIGKILL to its own,
// for a subject that may not signal them). It finds A's shim (the parent of A's subject) and its own
// (its parent), tries on each PTRACE_ATTACH, PTRACE_SEIZE, pidfd_getfd of
// descriptors 0 to 10, reads of /proc/<shim>/{fd,fd/N,fdinfo/N,mem,
// environ,maps}, and SIGTERM, SIGHUP, SIGINT and SIGUSR1; then the final
// attack. Each outcome is "ok" or the errno's name; the results are
// written (atomically) as JSON before the final attack and after it.
const shimAttackPy = `import ctypes, errno, json, os, signal, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
libc.ptrace.restype = ctypes.c_long
libc.syscall.restype = ctypes.c_long
out, victim, final = sys.argv[1], sys.argv[2], sys.argv[3]
def ename(e):
    return errno.errorcode.get(e, str(e))
def stat(pid):
    try:
        s = open("/proc/%d/stat" % pid).read()
    except OSError:
        return ["gone", "0"]
    return s[s.rindex(")") + 2:].split()
def ptrace(pid, req):
    ctypes.set_errno(0)
    if libc.ptrace(req, pid, None, None) == -1:
        return ename(ctypes.get_errno())
    if req == 0x4206:
        libc.ptrace(0x4207, pid, None, None)  # PTRACE_INTERRUPT
    try:
        os.waitpid(pid, 0x40000000)  # __WALL
    except OSError:
        pass
    libc.ptrace(17, pid, None, None)  # PTRACE_DETACH
    return "ok"
def getfd(pid):
    pfd = libc.syscall(434, pid, 0)
    if pfd < 0:
        return {"pidfd_open": ename(ctypes.get_errno())}
    res = {}
    for fd in range(11):
        r = libc.syscall(438, pfd, fd, 0)
        if r < 0:
            res[str(fd)] = ename(ctypes.get_errno())
            continue
        try:
            res[str(fd)] = "ok " + os.readlink("/proc/self/fd/%d" % r)
        except OSError:
            res[str(fd)] = "ok"
        os.close(r)
    os.close(pfd)
    return res
def proc(pid):
    res = {}
    try:
        res["fd"] = "ok %s" % sorted(os.listdir("/proc/%d/fd" % pid), key=int)
    except OSError as e:
        res["fd"] = ename(e.errno)
    for fd in range(5):
        try:
            res["fd/%d" % fd] = "ok " + os.readlink("/proc/%d/fd/%d" % (pid, fd))
        except OSError as e:
            res["fd/%d" % fd] = ename(e.errno)
        try:
            res["fdinfo/%d" % fd] = "ok " + open("/proc/%d/fdinfo/%d" % (pid, fd)).read().split("\n")[0]
        except OSError as e:
            res["fdinfo/%d" % fd] = ename(e.errno)
    for name in ("mem", "environ", "maps"):
        try:
            fd = os.open("/proc/%d/%s" % (pid, name), os.O_RDONLY)
            try:
                got = os.read(fd, 64)
                res[name] = "ok %d bytes" % len(got)
                if name == "environ" and got and all(e.startswith(b"RELAYD_FAULT_") for e in got.split(b"\0") if e):
                    res[name] = "ok only fault switches"
            except OSError as e:
                res[name] = "open ok, read " + ename(e.errno)
            os.close(fd)
        except OSError as e:
            res[name] = ename(e.errno)
    return res
def kill(pid, sig):
    try:
        os.kill(pid, sig)
        return "ok"
    except OSError as e:
        return ename(e.errno)
def write(r):
    with open(out + ".tmp", "w") as f:
        json.dump(r, f)
    os.rename(out + ".tmp", out)
capeff = 0
for line in open("/proc/self/status"):
    if line.startswith("CapEff:"):
        capeff = int(line.split()[1], 16)
apid = int(open(victim).read().split()[0])
shims = {"A": int(stat(apid)[1]), "own": os.getppid()}
r = {"self": os.getpid(), "uid": os.getuid(), "capSysPtrace": bool(capeff >> 19 & 1), "shims": shims, "attacks": {}}
for name, pid in shims.items():
    a = {"cmdline": open("/proc/%d/cmdline" % pid, "rb").read().split(b"\0")[0].decode()}
    a["attach"] = ptrace(pid, 16)
    a["seize"] = ptrace(pid, 0x4206)
    a["getfd"] = getfd(pid)
    a["proc"] = proc(pid)
    a["kill"] = {str(int(s)): kill(pid, s) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGUSR1)}
    r["attacks"][name] = a
time.sleep(0.5)
for name, pid in shims.items():
    r["attacks"][name]["stateAfterSignals"] = stat(pid)[0]
r["ownParentAfterSignals"] = os.getppid()
r["final"] = {"attack": final}
write(r)
if final == "none":
    sys.exit(0)
if final == "all":
    r["final"]["result"] = ",".join([kill(shims["A"], signal.SIGSTOP), kill(shims["A"], signal.SIGKILL), kill(shims["own"], signal.SIGKILL)])
    write(r)
    sys.exit(0)
target = shims["own"] if final == "kill-own" else shims["A"]
if final == "kill-own":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the result is written before a settlement's SIGKILL
r["final"]["result"] = kill(target, signal.SIGSTOP if final == "stop-A" else signal.SIGKILL)
write(r)
time.sleep(0.3)
r["final"]["state"] = stat(target)[0]
write(r)
if final == "kill-own":
    time.sleep(30)  # ended by its shim's settlement, if anything ends it
`

type shimAttackResult struct {
	Self         int
	UID          int
	CapSysPtrace bool
	Shims        map[string]int
	Attacks      map[string]struct {
		Cmdline           string
		Attach, Seize     string
		Getfd             map[string]string
		Proc              map[string]string
		Kill              map[string]string
		StateAfterSignals string
	}
	OwnParentAfterSignals int
	Final                 struct{ Attack, Result, State string }
}

func readAttackResult(t *testing.T, path string) shimAttackResult {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the attacker wrote no results: %v", err)
	}
	var r shimAttackResult
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("the attacker's results %q: %v", b, err)
	}
	return r
}

// attackFixture is relayd with execution A (a sleep: the victim) and C (a
// sleep: a bystander) running on connections of their own, all files in
// the workspace (which --subject-user nobody can write).
type attackFixture struct {
	d          *daemon
	a, c       *client
	aPid, cPid int
	aShim      int
	aPidFile   string
	script     string
}

func startAttackFixture(t *testing.T, o opts) *attackFixture {
	t.Helper()
	d := startRelayd(t, o)
	for _, dir := range []string{filepath.Dir(d.dir), d.dir} { // let nobody reach the workspace
		if err := os.Chmod(dir, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(d.workspace, 0o777); err != nil {
		t.Fatal(err)
	}
	f := &attackFixture{d: d, script: filepath.Join(d.workspace, "attack.py"), aPidFile: filepath.Join(d.workspace, "a.pid")}
	if err := os.WriteFile(f.script, []byte(shimAttackPy), 0o755); err != nil {
		t.Fatal(err)
	}
	cPidFile := filepath.Join(d.workspace, "c.pid")
	f.a, f.c = d.connect(), d.connect()
	f.a.send(msg{"kind": "execute", "command": "/bin/sh", "args": []string{"-c", "echo $$ > " + q(f.aPidFile) + "; exec sleep 600"}})
	f.c.send(msg{"kind": "execute", "command": "/bin/sh", "args": []string{"-c", "echo $$ > " + q(cPidFile) + "; exec sleep 600"}})
	f.aPid, f.cPid = waitPid(t, f.aPidFile), waitPid(t, cPidFile)
	waitFor(t, 5*time.Second, "A and C to exec sleep", func() bool {
		return cmdline(f.aPid) == "sleep 600" && cmdline(f.cPid) == "sleep 600"
	})
	f.aShim, _, _ = statOf(f.aPid)
	if got := cmdline(f.aShim); got != "relayd-shim" {
		t.Fatalf("A's subject's parent %d is %q; want relayd-shim", f.aShim, got)
	}
	t.Cleanup(func() {
		killIf(f.aPid, "sleep 600")
		killIf(f.cPid, "sleep 600")
	})
	return f
}

// killIf SIGKILLs pid if it still runs cmd: a process this test started.
func killIf(pid int, cmd string) {
	if pid > 1 && alive(pid) && cmdline(pid) == cmd {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// end sends verify and returns the executed reply of the running
// execution (nil if none came: it may have been answered before), after
// its verified.
func end(t *testing.T, cl *client) msg {
	t.Helper()
	cl.send(msg{"kind": "verify"})
	var executed msg
	for {
		r := cl.read(20 * time.Second)
		if r == nil {
			return executed
		}
		switch r["kind"] {
		case "executed":
			executed = r
		case "verified":
			return executed
		}
	}
}

func settlementOf(r msg) string {
	if r == nil {
		return "<no reply>"
	}
	return fmt.Sprint(r["settlement"])
}

// checkAttacks asserts that every attack of shimAttackPy on both shims
// failed, but for signals when sameUID (the shim catches them, and must
// live on).
func checkAttacks(t *testing.T, r shimAttackResult, aShim int, sameUID bool) {
	t.Helper()
	if r.CapSysPtrace {
		t.Fatal("the attacker holds CAP_SYS_PTRACE; the test must run it without")
	}
	if r.Shims["A"] != aShim {
		t.Errorf("the attacker took %d for A's shim; want %d", r.Shims["A"], aShim)
	}
	for name, a := range r.Attacks {
		if a.Cmdline != "relayd-shim" {
			t.Errorf("%s's shim %d is %q; want relayd-shim", name, r.Shims[name], a.Cmdline)
		}
		if a.Attach != "EPERM" || a.Seize != "EPERM" {
			t.Errorf("%s's shim: PTRACE_ATTACH %s, PTRACE_SEIZE %s; want EPERM", name, a.Attach, a.Seize)
		}
		for fd, res := range a.Getfd {
			if res != "EPERM" {
				t.Errorf("%s's shim: pidfd_getfd of %s: %s; want EPERM", name, fd, res)
			}
		}
		for what, res := range a.Proc {
			if !strings.HasPrefix(res, "ok") {
				continue
			}
			switch {
			case sameUID && (what == "fd" || what == "maps"):
				// The kernel here lets root without CAP_SYS_PTRACE (but
				// with its other capabilities) list the descriptors of a
				// non-dumpable process of its uid and read its maps: the
				// numbers and the layout, nothing to take.
			case sameUID && what == "environ" && (res == "ok 0 bytes" || res == "ok only fault switches"):
				// Readable the same way, and empty: relayd starts its shims
				// with no environment (the fault build passes its switch,
				// RELAYD_FAULT_NO_CLONE3=1, 25 bytes).
			default:
				t.Errorf("%s's shim: reading /proc/%d/%s: %s; want it refused", name, r.Shims[name], what, res)
			}
		}
		for sig, res := range a.Kill {
			want := "EPERM"
			if sameUID {
				want = "ok"
			}
			if res != want {
				t.Errorf("%s's shim: kill -%s: %s; want %s", name, sig, res, want)
			}
		}
		if s := a.StateAfterSignals; s != "S" && s != "R" {
			t.Errorf("%s's shim after the signals: state %s; want it alive and not stopped", name, s)
		}
	}
	if r.OwnParentAfterSignals != r.Shims["own"] {
		t.Errorf("the attacker's parent after the signals: %d; want its shim %d", r.OwnParentAfterSignals, r.Shims["own"])
	}
	t.Logf("the attacks' outcomes (uid %d): A's shim %+v; own shim %+v", r.UID, r.Attacks["A"], r.Attacks["own"])
}

// Same uid (relayd and subjects root, no --subject-user, relayd not PID 1,
// the subjects without CAP_SYS_PTRACE through --drop-capabilities):
// execution B attacks its own shim and A's. ptrace, pidfd_getfd and the
// /proc reads fail; the catchable signals are delivered and dropped. Then
// the final attack: nothing, SIGSTOP to A's shim, SIGKILL to A's shim, or
// SIGKILL to its own. The execution whose shim was stopped or killed
// ends destroyed or failed (never settled) when ended; B's reply (unless
// its own shim was the target) and C's are as without the attack.
func TestShimAttackSameUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the subjects run as relayd's user, root, with CAP_SYS_PTRACE dropped")
	}
	py := python3(t)
	attackMechs(t, func(t *testing.T, mech string, o opts) {
		for _, final := range []string{"none", "stop-A", "kill-A", "kill-own"} {
			t.Run(final, func(t *testing.T) {
				counts := map[string]map[string]int{"A": {}, "B": {}, "C": {}}
				var victimLived []string
				for i := 0; i < shimAttackRuns(); i++ {
					lived := sameUIDAttack(t, py, o, final, counts)
					victimLived = append(victimLived, lived...)
				}
				t.Logf("%s, %s, %d runs: A %v, B %v, C %v; left running after their reply: %v",
					mech, final, shimAttackRuns(), counts["A"], counts["B"], counts["C"], victimLived)
			})
		}
	})
}

// sameUIDAttack is one run; it counts each execution's settlement and
// returns what of the attacked execution still ran after its reply.
func sameUIDAttack(t *testing.T, py string, o opts, final string, counts map[string]map[string]int) (lived []string) {
	o.args = append(append([]string(nil), o.args...), "--drop-capabilities", "SYS_PTRACE")
	f := startAttackFixture(t, o)
	d := f.d
	out := filepath.Join(d.workspace, "attack.json")
	b := d.connect()
	b.send(msg{"kind": "execute", "command": py, "args": []string{f.script, out, f.aPidFile, final}})
	var bReply msg
	if final == "kill-own" {
		waitFor(t, 10*time.Second, "the attacker to kill its shim", func() bool {
			b, _ := os.ReadFile(out)
			return strings.Contains(string(b), `"result"`)
		})
	}
	bReply = b.read(30 * time.Second)
	res := readAttackResult(t, out)
	t.Cleanup(func() { killIf(res.Self, py+" "+f.script+" "+out+" "+f.aPidFile+" "+final) })
	checkAttacks(t, res, f.aShim, true)
	if bReply == nil || bReply["kind"] != "executed" {
		t.Fatalf("B's reply: %v; want executed", bReply)
	}
	counts["B"][settlementOf(bReply)]++

	switch final {
	case "none":
		wantExit(t, bReply, "exited", 0)
	case "stop-A", "kill-A":
		wantExit(t, bReply, "exited", 0)
		if res.Final.Result != "ok" {
			t.Fatalf("%s: kill gave %s; want ok (same uid)", final, res.Final.Result)
		}
		want := "T"
		if final == "kill-A" {
			want = "Z" // or gone: relayd reaps it
		}
		if s := res.Final.State; s != want && s != "gone" {
			t.Errorf("%s: A's shim is in state %s; want %s", final, s, want)
		}
	case "kill-own":
		if res.Final.Result != "ok" {
			t.Fatalf("kill-own: kill gave %s; want ok (same uid)", res.Final.Result)
		}
		if s := settlementOf(bReply); s == "settled" && alive(res.Self) {
			t.Errorf("B killed its own shim and was answered settled while it runs (pid %d): %v", res.Self, bReply)
		}
		if alive(res.Self) {
			lived = append(lived, fmt.Sprintf("B's subject %d after B's %s", res.Self, settlementOf(bReply)))
		}
		t.Logf("B's reply after it killed its own shim: %v", bReply)
	}

	aReply := end(t, f.a)
	counts["A"][settlementOf(aReply)]++
	aLived := alive(f.aPid)
	switch final {
	case "stop-A", "kill-A":
		// Without its shim relayd has no evidence of A's subtree in
		// process-group mode: destroyed or failed. The cgroup mechanism's
		// evidence is the leaf's, which does not need the shim: settled is
		// then the truth, as long as nothing of A lives.
		s := settlementOf(aReply)
		switch {
		case s == "settled" && aLived:
			t.Errorf("%s: A's reply %v while its subject %d runs; want destroyed or failed", final, aReply, f.aPid)
		case s == "settled" && o.scope == "process-group":
			t.Errorf("%s: A's reply %v; want destroyed or failed (its shim, its only evidence, was attacked)", final, aReply)
		case s != "settled" && s != "destroyed" && s != "failed":
			t.Errorf("%s: A's reply %v; want destroyed or failed", final, aReply)
		}
		if aLived {
			lived = append(lived, fmt.Sprintf("A's subject %d after A's %s", f.aPid, settlementOf(aReply)))
		}
	default:
		if s := settlementOf(aReply); s != "settled" || aLived {
			t.Errorf("%s: A's reply %v, its subject alive %v; want settled and gone", final, aReply, aLived)
		}
	}
	cReply := end(t, f.c)
	counts["C"][settlementOf(cReply)]++
	if s := settlementOf(cReply); s != "settled" || alive(f.cPid) {
		t.Errorf("%s: the bystander C's reply %v, its subject alive %v; want settled and gone", final, cReply, alive(f.cPid))
	}
	// relayd's SIGTERM. A stopped shim holds relayd's stderr, so the
	// harness sees relayd's end only once that shim has gone too: relayd's
	// own end is read from its process.
	d.signal(syscall.SIGTERM)
	exitedAlone := waitUntil(15*time.Second, func() bool { return !alive(d.cmd.Process.Pid) })
	if !exitedAlone {
		t.Errorf("%s: relayd still runs 15 s after SIGTERM", final)
	}
	if final == "stop-A" && cmdline(f.aShim) == "relayd-shim" {
		// What a stopped shim does once it runs again with relayd gone: it
		// must settle A's subject by itself.
		_ = syscall.Kill(f.aShim, syscall.SIGCONT)
		gone := waitUntil(5*time.Second, func() bool { return !alive(f.aPid) })
		t.Logf("stop-A: continued after relayd's exit, A's shim settled A's subject: %v", gone)
		if !gone {
			t.Errorf("stop-A: A's shim, continued after relayd's exit, left A's subject %d running", f.aPid)
		}
		if !waitUntil(5*time.Second, func() bool { return !alive(f.aShim) }) {
			t.Errorf("stop-A: A's shim %d runs on after relayd's exit", f.aShim)
			killIf(f.aShim, "relayd-shim")
		}
	}
	code := d.wait(15 * time.Second) // 1 is fine after a destroyed settlement
	if final == "none" && code != 0 {
		t.Errorf("relayd exited %d; want 0 when no shim was stopped or killed", code)
	}
	t.Logf("%s: A %s (%v), B %s, C %s; relayd exit %d", final, settlementOf(aReply), terminationOf(aReply),
		settlementOf(bReply), settlementOf(cReply), code)
	return lived
}

func terminationOf(r msg) string {
	if r == nil {
		return "<no reply>"
	}
	return fmt.Sprint(r["termination"])
}

// waitUntil polls cond until it holds (true) or timeout passes (false).
func waitUntil(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// With --subject-user nobody the shims run as root and the subjects as
// nobody: every attack fails outright, the signals and the final SIGSTOP
// and SIGKILLs too (EPERM), and every execution ends as it would without
// the attack.
func TestShimAttackSubjectUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch users")
	}
	py := python3(t)
	attackMechs(t, func(t *testing.T, mech string, o opts) {
		counts := map[string]map[string]int{"A": {}, "B": {}, "C": {}}
		for i := 0; i < shimAttackRuns(); i++ {
			o := o
			o.args = append(append([]string(nil), o.args...), "--subject-user", "nobody")
			f := startAttackFixture(t, o)
			out := filepath.Join(f.d.workspace, "attack.json")
			b := f.d.connect()
			bReply := b.request(msg{"kind": "execute", "command": py, "args": []string{f.script, out, f.aPidFile, "all"}})
			res := readAttackResult(t, out)
			if res.UID != 65534 {
				t.Fatalf("the attacker runs as uid %d; want nobody's, 65534", res.UID)
			}
			checkAttacks(t, res, f.aShim, false)
			if res.Final.Result != "EPERM,EPERM,EPERM" {
				t.Errorf("SIGSTOP and SIGKILL to A's shim, SIGKILL to its own: %s; want EPERM each", res.Final.Result)
			}
			wantExit(t, bReply, "exited", 0)
			counts["B"][settlementOf(bReply)]++
			if _, state, ok := statOf(f.aShim); !ok || (state != 'S' && state != 'R') {
				t.Errorf("A's shim %d after the attacks: state %c (exists %v); want it running", f.aShim, state, ok)
			}
			for name, cl := range map[string]*client{"A": f.a, "C": f.c} {
				r := end(t, cl)
				counts[name][settlementOf(r)]++
				if settlementOf(r) != "settled" {
					t.Errorf("%s's reply after the attacks: %v; want settled", name, r)
				}
			}
			if alive(f.aPid) || alive(f.cPid) {
				t.Errorf("A's subject alive %v, C's %v after their settled replies", alive(f.aPid), alive(f.cPid))
			}
			f.d.stopClean()
		}
		t.Logf("%s with --subject-user nobody, %d runs: A %v, B %v, C %v", mech, shimAttackRuns(), counts["A"], counts["B"], counts["C"])
	})
}

// cgroupIntruderPy is execution B's subject in the cgroup mechanism.
// argv: the results file, the file holding A's subject pid, the attack:
// self-into-A (write its own pid into A's leaf's cgroup.procs),
// self-to-root (into the root cgroup's: out of its own leaf), or
// relayd-into-A (relayd's pid, its shim's parent, into A's leaf). First it
// tries pidfd_getfd of descriptors 0 to 10 of A's shim and of its own,
// which in the clone3-less path held the leaves' cgroup.procs while it
// started a subject. It ignores SIGTERM and stays 30 s.
const cgroupIntruderPy = `import ctypes, errno, json, os, signal, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
out, victim, attack = sys.argv[1:4]
signal.signal(signal.SIGTERM, signal.SIG_IGN)
def ename(e):
    return errno.errorcode.get(e, str(e))
def ppid(pid):
    s = open("/proc/%d/stat" % pid).read()
    return int(s[s.rindex(")") + 2:].split()[1])
def cg(pid):
    try:
        for line in open("/proc/%d/cgroup" % pid):
            if line.startswith("0::"):
                return line[3:].strip()
    except OSError as e:
        return ename(e.errno)
def getfd(pid):
    pfd = libc.syscall(434, pid, 0)
    if pfd < 0:
        return {"pidfd_open": ename(ctypes.get_errno())}
    res = {}
    for fd in range(11):
        r = libc.syscall(438, pfd, fd, 0)
        if r < 0:
            res[str(fd)] = ename(ctypes.get_errno())
        else:
            res[str(fd)] = "ok " + os.readlink("/proc/self/fd/%d" % r)
            os.close(r)
    os.close(pfd)
    return res
mnt = None
for line in open("/proc/self/mountinfo"):
    left, right = line.split(" - ", 1)
    if right.split()[0] == "cgroup2":
        mnt = left.split()[4]
        break
apid = int(open(victim).read().split()[0])
ashim, own = ppid(apid), os.getppid()
relayd = ppid(own)
r = {"self": os.getpid(), "relayd": relayd, "aShim": ashim, "getfd": {"A": getfd(ashim), "own": getfd(own)},
     "leafA": cg(apid), "leafOwn": cg(os.getpid())}
pid = relayd if attack == "relayd-into-A" else os.getpid()
dest = mnt + ("/cgroup.procs" if attack == "self-to-root" else cg(apid) + "/cgroup.procs")
try:
    with open(dest, "w") as f:
        f.write(str(pid))
    r["write"] = "ok"
except OSError as e:
    r["write"] = ename(e.errno)
r["cgroupAfter"] = cg(pid)
with open(out + ".tmp", "w") as f:
    json.dump(r, f)
os.rename(out + ".tmp", out)
time.sleep(30)
`

type intruderResult struct {
	Self, Relayd, AShim                int
	Getfd                              map[string]map[string]string
	LeafA, LeafOwn, Write, CgroupAfter string
}

// The cgroup mechanism, through the clone3-less path (the shim moves into
// the leaf and back) and with clone3: a subject of relayd's uid (root)
// cannot take the leaves' descriptors from any shim, but may write
// cgroup.procs itself. Whatever it moves where, no execution may be
// answered settled while a process of its subtree runs.
func TestShimAttackCgroupLeaf(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the subjects run as relayd's user, root")
	}
	if cgroupSkip != "" {
		t.Skip(cgroupSkip)
	}
	py := python3(t)
	for _, m := range []struct {
		name string
		o    opts
	}{
		{"without-clone3", opts{scope: "cgroup", bin: faultBin, env: []string{"RELAYD_FAULT_NO_CLONE3=1"}}},
		{"clone3", opts{scope: "cgroup"}},
	} {
		t.Run(m.name, func(t *testing.T) {
			for _, attack := range []string{"self-into-A", "self-to-root", "relayd-into-A"} {
				t.Run(attack, func(t *testing.T) { cgroupLeafAttack(t, py, m.o, attack) })
			}
		})
	}
}

func cgroupLeafAttack(t *testing.T, py string, o opts, attack string) {
	o.args = append(append([]string(nil), o.args...), "--drop-capabilities", "SYS_PTRACE")
	f := startAttackFixture(t, o)
	d := f.d
	script := filepath.Join(d.workspace, "intruder.py")
	if err := os.WriteFile(script, []byte(cgroupIntruderPy), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(d.workspace, "intruder.json")
	b := d.connect()
	b.send(msg{"kind": "execute", "command": py, "args": []string{script, out, f.aPidFile, attack}})
	waitFor(t, 10*time.Second, "the intruder's results", func() bool { _, err := os.Stat(out); return err == nil })
	raw, _ := os.ReadFile(out)
	var res intruderResult
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("the intruder's results %q: %v", raw, err)
	}
	intruder := py + " " + script + " " + out + " " + f.aPidFile + " " + attack
	t.Cleanup(func() { killIf(res.Self, intruder) })
	for who, fds := range res.Getfd {
		for fd, r := range fds {
			if r != "EPERM" {
				t.Errorf("pidfd_getfd of %s's shim's descriptor %s: %s; want EPERM", who, fd, r)
			}
		}
	}
	t.Logf("%s: A's leaf %s, B's %s; the write: %s; the moved process's cgroup now %s", attack, res.LeafA, res.LeafOwn, res.Write, res.CgroupAfter)

	if attack == "relayd-into-A" {
		// relayd's pid in A's leaf: A's settlement signals relayd. The
		// subject of relayd's uid could have killed it outright (rule
		// 6.12's exception); what matters is that nothing runs on.
		f.a.send(msg{"kind": "verify"})
		aReply := f.a.read(20 * time.Second)
		gone := waitUntil(10*time.Second, func() bool { return !alive(d.cmd.Process.Pid) })
		t.Logf("relayd-into-A: A's reply %v; relayd ended: %v", aReply, gone)
		if aReply != nil && settlementOf(aReply) == "settled" && alive(d.cmd.Process.Pid) {
			t.Logf("relayd-into-A: A settled while relayd, a process of its leaf, lives")
		}
		if gone {
			left := waitUntil(5*time.Second, func() bool { return !alive(f.aPid) && !alive(f.cPid) && !alive(res.Self) })
			t.Logf("relayd-into-A: relayd's exit %d; every subject gone within 5 s after: %v", d.exitCode(), left)
			if !left {
				t.Errorf("relayd-into-A: after relayd's death, A alive %v, C %v, B %v", alive(f.aPid), alive(f.cPid), alive(res.Self))
			}
		} else {
			code := d.stop()
			t.Logf("relayd-into-A: relayd lived on; exit %d at SIGTERM", code)
		}
		return
	}

	// B's own end: its leaf may be empty now, its shim still has it.
	bReply := end(t, b)
	bLived := alive(res.Self)
	t.Logf("%s: B's reply %v/%v; the intruder alive right after it: %v", attack, terminationOf(bReply), settlementOf(bReply), bLived)
	falseSettled := settlementOf(bReply) == "settled" && bLived
	aReply := end(t, f.a)
	t.Logf("%s: A's reply %v/%v; the intruder alive after it: %v", attack, terminationOf(aReply), settlementOf(aReply), alive(res.Self))
	if settlementOf(aReply) == "settled" && alive(f.aPid) {
		t.Errorf("%s: A answered settled while its subject %d runs", attack, f.aPid)
	}
	cReply := end(t, f.c)
	if settlementOf(cReply) != "settled" || alive(f.cPid) {
		t.Errorf("%s: the bystander C's reply %v, its subject alive %v; want settled and gone", attack, cReply, alive(f.cPid))
	}
	gone := waitUntil(5*time.Second, func() bool { return !alive(res.Self) })
	t.Logf("%s: the intruder gone within 5 s after the replies: %v", attack, gone)
	d.signal(syscall.SIGTERM)
	if !waitUntil(15*time.Second, func() bool { return !alive(d.cmd.Process.Pid) }) {
		t.Errorf("%s: relayd still runs 15 s after SIGTERM", attack)
	}
	killIf(res.Self, intruder)
	t.Logf("%s: relayd exit %d", attack, d.wait(15*time.Second))
	if falseSettled {
		// The cgroup scope's evidence is its leaf alone, not the shim's
		// subtree: a subject that can write cgroup.procs (root, relayd's
		// uid) leaves its leaf and is answered settled while it runs; its
		// shim settles it only afterwards, when relayd retires it.
		t.Errorf("%s: B answered settled while its subject %d (moved to %s) runs", attack, res.Self, res.CgroupAfter)
	}
}
