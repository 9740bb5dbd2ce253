package main

import (
	"context"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/relayd/relayd/internal/env"
	"github.com/relayd/relayd/internal/exec"
)

// recordEvery is how often, at most, the record of running process-group
// scopes is rewritten while it changes (protocol rule 6.10).
const recordEvery = 100 * time.Millisecond

// stateDirError is the one line for a --state-dir that cannot be used.
// Only a directory the operator named is refused: the default one, when it
// cannot be used, costs a warning (recordScopes).
func stateDirError(err error) error {
	return fmt.Errorf("--state-dir: %v (point --state-dir at a directory that relayd's user owns and no other user can write, e.g. mode 0700, or at a missing one whose parent relayd can write)", err)
}

// recordScopes makes the tracker record running process-group scopes in
// the state directory, or says in one line why it does not.
func recordScopes(ctx context.Context, o options, st *exec.State, stateErr error, mech exec.Mechanism, host env.Host, log zerolog.Logger) {
	pg, isPG := mech.(*exec.ProcessGroups)
	switch {
	case !isPG:
		// A cgroup leaf outlives relayd by itself: nothing to record.
	case host.PID1:
		log.Info().Msg("running scopes are not recorded: as PID 1, relayd's death ends every process of its namespace")
	case st == nil:
		log.Warn().Str("stateDir", o.stateDir).Str("why", stateErr.Error()).
			Msg("the state directory cannot be used: if relayd is killed, a relayd started after it cannot settle what it left running; set --state-dir")
	default:
		st.OnError = func(err error) {
			log.Warn().Err(err).Msg("cannot write the record of running scopes: a relayd started after this one is killed may not settle what it left running")
		}
		pg.Record(ctx, st, recordEvery)
		log.Info().Str("record", st.Path()).Msg("running process-group scopes are recorded for a relayd started after this one")
	}
}
