package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Protocol section 4.8: what an execution used, why it ended, and limits.

// usageOf is the reply's usage, each figure a number.
func usageOf(t *testing.T, r msg) map[string]int64 {
	t.Helper()
	u, ok := r["usage"].(map[string]any)
	if !ok {
		t.Fatalf("usage = %v; want an object (reply %v)", r["usage"], r)
	}
	out := map[string]int64{}
	for _, k := range []string{"cpuUserMs", "cpuSystemMs", "maxRssBytes", "processes", "readBytes", "writeBytes"} {
		n, ok := u[k].(json.Number)
		if !ok {
			t.Fatalf("usage.%s = %v; want a number (usage %v)", k, u[k], u)
		}
		out[k], _ = n.Int64()
	}
	return out
}

// Subjects that burn CPU, touch memory, fork and write report figures
// within generous bounds, in both mechanisms.
func TestUsageFigures(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech})
		cl := d.connect()

		// At least a tenth of a second of CPU: a loop of the shell's own.
		r := cl.sh(`i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done`, nil)
		wantExit(t, r, "exited", 0)
		u := usageOf(t, r)
		if cpu := u["cpuUserMs"] + u["cpuSystemMs"]; cpu < 50 || cpu > 60_000 {
			t.Errorf("a CPU loop used %d ms of CPU; want from 50 ms to a minute (%v)", cpu, u)
		}
		if u["processes"] != 1 {
			t.Errorf("a shell that forks nothing: processes %d; want 1", u["processes"])
		}

		// 100 MiB touched, page by page.
		py := python3(t)
		r = cl.request(msg{"kind": "execute", "command": py, "args": []string{"-c",
			"b = bytearray(100 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1"}})
		wantExit(t, r, "exited", 0)
		if rss := usageOf(t, r)["maxRssBytes"]; rss < 100<<20 || rss > 1<<30 {
			t.Errorf("100 MiB touched: maxRssBytes %d; want from 100 MiB to 1 GiB", rss)
		}

		// 20 orphans, each reaped by the shim: the subject and them.
		r = cl.sh(`for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do (/bin/true &); done; sleep 0.3`, nil)
		wantExit(t, r, "exited", 0)
		if n := usageOf(t, r)["processes"]; n < 21 || n > 100 {
			t.Errorf("20 orphans: processes %d; want from 21 to 100", n)
		}

		// 8 MiB written to a file and synced: storage I/O.
		f := filepath.Join(d.workspace, "written")
		r = cl.sh(`dd if=/dev/zero of=`+q(f)+` bs=1M count=8 conv=fsync 2>/dev/null`, nil)
		wantExit(t, r, "exited", 0)
		if w := usageOf(t, r)["writeBytes"]; w < 8<<20 || w > 1<<30 {
			t.Errorf("8 MiB written: writeBytes %d; want from 8 MiB to 1 GiB", w)
		}
		d.stopClean()
	})
}

// Each resource limit reaches the subject, the reply echoes it, and a
// subject killed for exceeding cpuSeconds or fileBytes says so in cause.
func TestLimitsEnforced(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech})
		cl := d.connect()

		lim := msg{"nofile": 64, "processes": 5000, "stackBytes": 4 << 20, "addressSpaceBytes": 1 << 30,
			"cpuSeconds": 100, "fileBytes": 1 << 20}
		wantV := "1048576"
		if raceOK() {
			// A race-built shim cannot live under an address-space limit
			// (the race runtime maps terabytes of shadow memory), and it
			// holds the limit around its fork: the limit is checked with
			// relayd as shipped, RELAYD_E2E_NORACE=1, only.
			delete(lim, "addressSpaceBytes")
			wantV = "unlimited"
		}
		r := cl.sh(`ulimit -n; ulimit -p; ulimit -s; ulimit -v; ulimit -t; ulimit -f`, msg{"limits": lim})
		wantExit(t, r, "exited", 0)
		// ulimit -s and -v count KiB, -f 512-byte blocks (dash: -p is processes).
		if want := "64\n5000\n4096\n" + wantV + "\n100\n2048\n"; r["stdout"] != want {
			t.Errorf("the subject's limits:\n%v\nwant\n%v", r["stdout"], want)
		}
		echo, _ := r["limits"].(map[string]any)
		if len(echo) != len(lim) || fmt.Sprint(echo["nofile"]) != "64" || fmt.Sprint(echo["fileBytes"]) != strconv.Itoa(1<<20) {
			t.Errorf("limits echoed %v; want %v", r["limits"], lim)
		}
		if r["cause"] != nil {
			t.Errorf("cause %v of a subject no limit ended", r["cause"])
		}

		// The shim took its own limits back: the next subject has none of them.
		r = cl.sh(`ulimit -n; ulimit -t`, nil)
		if s, _ := r["stdout"].(string); strings.HasPrefix(s, "64\n") || strings.HasSuffix(s, "\n100\n") {
			t.Errorf("an execution without limits has %q", s)
		}

		r = cl.sh(`while :; do :; done`, msg{"limits": msg{"cpuSeconds": 1}, "timeoutMs": 30000})
		wantExit(t, r, "exited", 128+24)
		if r["cause"] != "limit" || r["limit"] != "cpuSeconds" {
			t.Errorf("SIGXCPU: cause %v limit %v; want limit cpuSeconds (reply %v)", r["cause"], r["limit"], r)
		}
		// A subject that ignores SIGXCPU dies of SIGKILL a second later.
		r = cl.sh(`trap '' XCPU; while :; do :; done`, msg{"limits": msg{"cpuSeconds": 1}, "timeoutMs": 30000})
		wantExit(t, r, "exited", 128+9)
		if r["cause"] != "limit" || r["limit"] != "cpuSeconds" {
			t.Errorf("past cpuSeconds' hard value: cause %v limit %v; want limit cpuSeconds (reply %v)", r["cause"], r["limit"], r)
		}

		f := filepath.Join(d.workspace, "big")
		r = cl.sh(`exec dd if=/dev/zero of=`+q(f)+` bs=64k count=64`, msg{"limits": msg{"fileBytes": 100000}})
		wantExit(t, r, "exited", 128+25)
		if r["cause"] != "limit" || r["limit"] != "fileBytes" {
			t.Errorf("SIGXFSZ: cause %v limit %v; want limit fileBytes (reply %v)", r["cause"], r["limit"], r)
		}
		d.stopClean()
	})
}

// --default-limits applies to every execution that names none; one that
// names its own gets those alone. A bad value stops relayd at start.
func TestDefaultLimits(t *testing.T) {
	d := startRelayd(t, opts{args: []string{"--default-limits", "nofile=100,cpuSeconds=500"}})
	cl := d.connect()
	r := cl.sh(`ulimit -n; ulimit -t`, nil)
	if r["stdout"] != "100\n500\n" {
		t.Errorf("with --default-limits: %q; want 100 and 500", r["stdout"])
	}
	r = cl.sh(`ulimit -n; ulimit -t`, msg{"limits": msg{"nofile": 70}})
	if s, _ := r["stdout"].(string); !strings.HasPrefix(s, "70\n") || s == "70\n500\n" {
		t.Errorf("with limits of its own: %q; want 70 and no cpu limit", s)
	}
	d.stopClean()

	bad := prepare(t, opts{args: []string{"--default-limits", "nofile=lots"}})
	bad.launch()
	if code := bad.wait(15 * time.Second); code != 2 {
		t.Fatalf("--default-limits nofile=lots: exit %d; want 2", code)
	}
}

// A subject killed with kill -9 is never reported as an OOM kill.
func TestKillNineIsNotOOM(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech})
		cl := d.connect()
		r := cl.sh(`kill -9 $$`, nil)
		wantExit(t, r, "exited", 137)
		if r["cause"] != nil {
			t.Errorf("kill -9: cause %v; want none", r["cause"])
		}
		if u := usageOf(t, r); u["processes"] != 1 {
			t.Errorf("kill -9: usage %v; want the subject counted", u)
		}
		d.stopClean()
	})
}

// memoryBytes and pids are refused, with the reason and what to do, where
// the mechanism cannot set them (here the cgroup v2 hierarchy has no memory
// controller): a cgroup2 relayd may write, or the rlimit that comes closest.
func TestCgroupLimitRefused(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		if mech == "cgroup" {
			if b, _ := os.ReadFile("/sys/fs/cgroup/unified/cgroup.controllers"); strings.Contains(string(b), "memory") {
				t.Skip("the cgroup v2 hierarchy offers the memory controller here")
			}
		}
		d := startRelayd(t, opts{scope: mech})
		cl := d.connect()
		r := cl.request(msg{"kind": "execute", "command": "/bin/true", "limits": msg{"memoryBytes": 1 << 30}})
		e, _ := r["error"].(map[string]any)
		says := "cgroup mechanism"
		if mech == "cgroup" {
			says = "memory controller"
		}
		if r["kind"] != "error" || e["category"] != "bad-request" || !strings.Contains(fmt.Sprint(e["message"]), says) {
			t.Errorf("memoryBytes: got %v; want a bad-request that says %q", r, says)
		}
		for name, rlimit := range map[string]string{"memoryBytes": "addressSpaceBytes", "pids": "processes"} {
			r := cl.request(msg{"kind": "execute", "command": "/bin/true", "limits": msg{name: 1 << 20}})
			e, _ := r["error"].(map[string]any)
			m := fmt.Sprint(e["message"])
			for _, what := range []string{"--scope=cgroup", "writable cgroup2", "the " + rlimit + " rlimit"} {
				if !strings.Contains(m, what) {
					t.Errorf("%s: the refusal %q does not say what to do: want %q in it", name, m, what)
				}
			}
		}
		d.stopClean()
	})
}

// An OOM kill under a real memory limit is reported as oom: relayd runs in
// a cgroup v1 memory cgroup with a small limit (this host's memory
// controller is on v1), and a subject allocates past it.
func TestOOMCause(t *testing.T) {
	const v1 = "/sys/fs/cgroup/memory"
	if _, err := os.Stat(filepath.Join(v1, "memory.oom_control")); err != nil {
		t.Skip("no cgroup v1 memory hierarchy")
	}
	eachScope(t, func(t *testing.T, mech string) {
		cg := filepath.Join(v1, fmt.Sprintf("relayd-e2e-oom-%d-%s", os.Getpid(), mech))
		if err := os.Mkdir(cg, 0o755); err != nil {
			t.Skipf("cannot make a memory cgroup: %v", err)
		}
		t.Cleanup(func() { removeCgroupV1(t, cg) })
		if err := os.WriteFile(filepath.Join(cg, "memory.limit_in_bytes"), []byte(strconv.Itoa(160<<20)), 0); err != nil {
			t.Fatal(err)
		}
		// relayd enters it before it starts anything: a wrapper moves
		// itself in, then becomes relayd.
		wrapper := filepath.Join(t.TempDir(), "in-cgroup")
		script := "#!/bin/sh\necho $$ > " + q(filepath.Join(cg, "cgroup.procs")) + " || exit 9\nexec " + q(relaydBin) + " \"$@\"\n"
		if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		d := startRelayd(t, opts{scope: mech, bin: wrapper})
		cl := d.connect()
		r := cl.request(msg{"kind": "execute", "command": python3(t), "args": []string{"-c",
			"b = []\nwhile True: b.append(bytearray(8 << 20))"}, "timeoutMs": 60000})
		wantExit(t, r, "exited", 137)
		if r["cause"] != "oom" {
			t.Errorf("a subject past the memory limit: cause %v; want oom (reply %v)", r["cause"], r)
		}
		// kill -9 in the same cgroup, with its OOM counter raised: not oom.
		r = cl.sh(`kill -9 $$`, nil)
		if r["cause"] != nil {
			t.Errorf("kill -9 after an OOM kill: cause %v; want none", r["cause"])
		}
		d.stopClean()
	})
}

// removeCgroupV1 removes a memory cgroup a test made, once the processes
// in it (relayd's shims, exiting after relayd) are gone.
func removeCgroupV1(t *testing.T, dir string) {
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := os.Remove(dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("cannot remove %s: %v", dir, err)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// survivorsUsageOf is the entry of execution in a status or verified
// reply's survivorsUsage; nil when there is none.
func survivorsUsageOf(t *testing.T, r msg, execution string) map[string]any {
	t.Helper()
	list, _ := r["survivorsUsage"].([]any)
	for _, e := range list {
		if m, _ := e.(map[string]any); m["execution"] == execution {
			return m
		}
	}
	return nil
}

// Survivors' usage: the executed reply counts what ended with the
// subject; what its survivors use is counted as they end, and status and
// the trial boundary report the execution's whole, complete once its
// scope is empty. The boundary reports a complete one once.
func TestUsageSurvivors(t *testing.T) {
	eachScope(t, func(t *testing.T, mech string) {
		d := startRelayd(t, opts{scope: mech})
		cl := d.connect()
		gate := filepath.Join(d.workspace, "gate")
		t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o644) }) // the survivor ends, whatever failed
		r := cl.sh(`(while [ ! -e `+q(gate)+` ]; do sleep 0.05; done; i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done) > /dev/null 2>&1 &`, nil)
		wantExit(t, r, "exited", 0)
		id, _ := r["execution"].(string)
		if len(survivorPids(t, r)) == 0 {
			t.Fatalf("survivors %v; want the subshell", r["survivors"])
		}
		at := usageOf(t, r)
		if at["processes"] != 1 {
			t.Errorf("the reply's usage %v; want the subject alone", at)
		}
		st := cl.request(msg{"kind": "status"})
		if e := survivorsUsageOf(t, st, id); e == nil || e["complete"] != false {
			t.Fatalf("status while the survivor runs: survivorsUsage %v; want %s not complete", st["survivorsUsage"], id)
		}
		if err := os.WriteFile(gate, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		var e map[string]any
		waitFor(t, 30*time.Second, "the survivor's usage, complete", func() bool {
			e = survivorsUsageOf(t, cl.request(msg{"kind": "status"}), id)
			return e != nil && e["complete"] == true
		})
		u := usageOf(t, msg{"usage": e["usage"]})
		if u["processes"] < 2 {
			t.Errorf("the whole usage %v; want the subject and its survivor", u)
		}
		if cpu := u["cpuUserMs"] + u["cpuSystemMs"]; cpu < at["cpuUserMs"]+at["cpuSystemMs"]+50 {
			t.Errorf("the whole usage's CPU %d ms; want at least 50 ms more than the reply's %v", cpu, at)
		}
		v := cl.request(msg{"kind": "verify", "all": true})
		if e := survivorsUsageOf(t, v, id); e == nil || e["complete"] != true {
			t.Errorf("the trial boundary's survivorsUsage %v; want %s complete", v["survivorsUsage"], id)
		}
		st = cl.request(msg{"kind": "status"})
		if e := survivorsUsageOf(t, st, id); e != nil {
			t.Errorf("after the boundary reported it complete: %v; want none", e)
		}
		d.stopClean()
	})
}
