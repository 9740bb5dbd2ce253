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

	measure := func(name string, agents int) {
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
						"args": []string{"-c", fmt.Sprintf(daemonize, q(pids))}, "timeoutMs": 300})
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
	measure("one agent beside a quiet kept service", 1)
	measure("four agents at once beside a quiet kept service", 4)
	for _, pid := range readPids(svcPids) {
		if !alive(pid) {
			t.Errorf("the kept service %d was killed by another scope's settlement", pid)
		}
	}
	time.Sleep(10 * time.Millisecond)
}
