package main

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/relayd/relayd/internal/env"
	"github.com/relayd/relayd/internal/exec"
	"github.com/relayd/relayd/internal/teardown"
)

// settleLeftovers settles what relayds that no longer run left running
// (protocol rule 6.10) before this relayd serves: the process-group scopes
// recorded in the state directory, and, unless --scope is process-group,
// the populated cgroup leaves of dead relayds. Each is settled as a scope
// of this relayd would be (SIGTERM, --term-grace, SIGKILL, evidence), all
// at once, within one --teardown-timeout, and each is logged.
func settleLeftovers(o options, state *exec.State, log zerolog.Logger) {
	var found []*exec.Leftover
	var notes []string
	if state != nil {
		f, n := state.Leftovers()
		found, notes = append(found, f...), append(notes, n...)
	}
	if o.scope != "process-group" {
		if cg, err := env.FindCgroup2(o.cgroupRoot); err == nil {
			f, n := exec.CgroupLeftovers(cg.Base)
			found, notes = append(found, f...), append(notes, n...)
		}
	}
	for _, n := range notes {
		log.Info().Str("what", n).Msg("left by an earlier relayd; not settled")
	}
	deadline := time.Now().Add(o.teardownTimeout)
	var wg sync.WaitGroup
	for _, l := range found {
		wg.Add(1)
		go func() {
			defer wg.Done()
			settleLeftover(l, o.termGrace, deadline, log)
		}()
	}
	wg.Wait()
}

// maxLoggedPids bounds the pids a leftover's log line lists.
const maxLoggedPids = 20

func settleLeftover(l *exec.Leftover, grace time.Duration, deadline time.Time, log zerolog.Logger) {
	members, lookErr := l.Members()
	out := teardown.Settle(context.Background(), l, teardown.Options{Grace: grace, Deadline: deadline})
	pids := make([]int, 0, min(len(members), maxLoggedPids))
	for _, m := range members[:min(len(members), maxLoggedPids)] {
		pids = append(pids, m.PID)
	}
	ev, msg := log.Warn(), "settled a scope that a relayd which no longer runs left running"
	switch {
	case !out.Confirmed:
		ev, msg = log.Error(), "could not settle a scope that a relayd which no longer runs left running; the next start tries again"
		if out.Err != nil {
			ev = ev.AnErr("lastError", out.Err)
		}
	case lookErr == nil && len(members) == 0:
		ev, msg = log.Info(), "nothing runs of a scope that a relayd which no longer runs recorded"
	}
	outcome := "settled"
	if !out.Confirmed {
		outcome = "unconfirmed"
	}
	if err := l.Finish(out.Confirmed); err != nil {
		ev = ev.AnErr("finishError", err)
	}
	ev.Str("execution", l.Name).Str("mechanism", l.Mechanism).Int("relayd", l.Relayd).Str("where", l.Where).
		Int("members", len(members)).Ints("pids", pids).Bool("killed", out.Killed).Str("outcome", outcome).
		Int("remaining", len(out.Remaining)).Dur("elapsed", out.Elapsed).Msg(msg)
}
