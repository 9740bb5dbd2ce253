package e2e

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

// daemonize is an agent that starts a daemon the way nginx does (the
// launcher forks, the child calls setsid, the launcher exits at once), then
// works until the framework ends it. The daemon ignores SIGTERM.
const daemonize = `( setsid sh -c 'trap "" TERM; echo $$ >> %[1]s; exec sleep 300' & ); echo $$ >> %[1]s; exec sleep 300`

// daemonizeDetached is daemonize with the daemon's output on /dev/null, as
// real daemons do: it no longer holds the agent's stdout pipe.
const daemonizeDetached = `( setsid sh -c 'trap "" TERM; echo $$ >> %[1]s; exec sleep 300' >/dev/null 2>&1 & ); echo $$ >> %[1]s; exec sleep 300`

// TestFalseDestroyedUnderLoad measures how often a settlement that could be
// confirmed ends in destroy instead, because an orphan could not be
// attributed to one scope: every process in these runs belongs to a scope
// relayd knows, so every destroyed here is a false one. It logs the rates;
// RELAYD_ATTRIBUTION_RUNS sets the runs (default 4).
func TestFalseDestroyedUnderLoad(t *testing.T) {
	runs := 4
	if n, err := strconv.Atoi(os.Getenv("RELAYD_ATTRIBUTION_RUNS")); err == nil && n > 0 {
		runs = n
	}
	d := startRelayd(t, opts{scope: "process-group", args: []string{"--term-grace", "200ms", "--teardown-timeout", "2s"}})
	// A service left running by an earlier execution, on a connection that
	// stays open: its scope is kept, quiet.
	svc := d.connect()
	svcPids := d.pidFile("service.pids")
	r := svc.sh(fmt.Sprintf(`setsid sh -c 'echo $$ >> %s; exec sleep 600' & sleep 0.2; exit 0`, q(svcPids)), nil)
	wantExit(t, r, "exited", 0)

	measure := func(name string, agents int, script string) {
		counts := map[string]int{}
		for i := 0; i < runs; i++ {
			var wg sync.WaitGroup
			var mu sync.Mutex
			for a := 0; a < agents; a++ {
				wg.Add(1)
				pids := d.pidFile(fmt.Sprintf("agent-%d-%d-%d.pids", agents, i, a))
				go func() {
					defer wg.Done()
					c := d.connect()
					defer c.c.Close()
					r := c.request(msg{"kind": "execute", "command": "/bin/sh",
						"args": []string{"-c", fmt.Sprintf(script, q(pids))}, "timeoutMs": 300})
					mu.Lock()
					counts[fmt.Sprint(r["settlement"])]++
					mu.Unlock()
					if r["settlement"] == "settled" {
						for _, pid := range readPids(pids) {
							if alive(pid) {
								t.Errorf("%s: settled while %d (%s) lives", name, pid, cmdline(pid))
							}
						}
					}
				}()
			}
			wg.Wait()
		}
		total := runs * agents
		t.Logf("%s: %d settlements: settled %d, destroyed %d, failed %d: false destroyed %.0f%%",
			name, total, counts["settled"], counts["destroyed"], counts["failed"],
			100*float64(counts["destroyed"]+counts["failed"])/float64(total))
	}
	measure("one agent beside a quiet kept service", 1, daemonize)
	measure("four agents at once beside a quiet kept service", 4, daemonize)
	measure("one agent, daemon detached from its output, beside a quiet kept service", 1, daemonizeDetached)
	measure("four agents at once, daemons detached, beside a quiet kept service", 4, daemonizeDetached)
	// A busy service: it runs every 10 ms, so it could have made any new
	// orphan. A daemon detached from the agent's output is then unclaimed,
	// and the agent's settlement ends in a destroy: the honest answer.
	busy := d.connect()
	busyPids := d.pidFile("busy.pids")
	r = busy.sh(fmt.Sprintf(`setsid sh -c 'echo $$ >> %s; while :; do sleep 0.01; done' & sleep 0.2; exit 0`, q(busyPids)), nil)
	wantExit(t, r, "exited", 0)
	measure("one agent, daemon detached, beside a busy kept service", 1, daemonizeDetached)
	measure("one agent, daemon keeps the agent's stdout, beside a busy kept service", 1, daemonize)
	for _, pid := range readPids(busyPids) {
		if !alive(pid) {
			t.Errorf("the busy kept service %d was killed by another scope's settlement", pid)
		}
		killPid(pid)
	}
	for _, pid := range readPids(svcPids) {
		if !alive(pid) {
			t.Errorf("the kept service %d was killed by another scope's settlement", pid)
		}
	}
	time.Sleep(10 * time.Millisecond)
}
