// Package teardown settles scopes: SIGTERM to every member, a grace period,
// SIGKILL to what is left, until there is positive evidence that nothing of
// the scope remains, always within a deadline.
//
// It never decides whether a scope should be settled (that is the session's
// call, by the lifecycle rules) and it never reports a scope gone without
// evidence: a look that fails counts as a live scope.
package teardown

import (
	"context"
	"syscall"
	"time"

	"github.com/relayd/relayd/internal/exec"
)

// Scope is what settling needs of a scope (internal/exec implements it):
// a complete look at its members, and a signal to each of them.
type Scope interface {
	Members() ([]exec.Member, error)
	Signal(sig syscall.Signal) error
}

// Outcome is what a settlement achieved.
type Outcome struct {
	// Confirmed is true only when two consecutive complete looks found no
	// member: the evidence that the scope is empty.
	Confirmed bool
	// Killed is true when SIGKILL was needed after the grace period.
	Killed bool
	// Remaining are the members seen at the last complete look when not confirmed.
	Remaining []exec.Member
	// Err is the last failure to look at or signal the scope, if any.
	Err     error
	Elapsed time.Duration
}

// Options bound a settlement.
type Options struct {
	Grace    time.Duration // SIGTERM to SIGKILL
	Deadline time.Time     // the whole settlement ends by then, confirmed or not
}

// pollFloor and pollCeil bound the interval between looks: short at first,
// since most subjects die at once, then backing off.
const (
	pollFloor = time.Millisecond
	pollCeil  = 20 * time.Millisecond
)

// memberSignaller is a scope that can signal the members one look found,
// without looking again (the process-group mechanism, where a look reads
// /proc for every member). A scope without it is signalled whole.
type memberSignaller interface {
	SignalMembers(members []exec.Member, sig syscall.Signal) error
}

// Settle stops every process of scope: SIGTERM, up to opts.Grace for the
// scope to empty, then SIGKILL (again on every look, so that late forks die
// too) until the scope is confirmed empty or opts.Deadline passes. ctx ends
// it early (a second shutdown signal): what is confirmed by then is reported.
//
// SIGKILL goes out the moment the grace ends, before any further look: the
// last look before it found the scope alive, and a look of a large
// process-group scope takes as long as the kill itself.
func Settle(ctx context.Context, scope Scope, opts Options) Outcome {
	began := time.Now()
	out := Outcome{}
	// SIGKILL always comes before the deadline, with a fifth of the window
	// (at most 100ms) left to see its effect, however long the grace.
	graceEnd := began.Add(opts.Grace)
	killBy := opts.Deadline.Add(-min(opts.Deadline.Sub(began)/5, 100*time.Millisecond))
	if graceEnd.After(killBy) {
		graceEnd = killBy
	}
	if err := scope.Signal(syscall.SIGTERM); err != nil {
		out.Err = err
	}
	kill := func(members []exec.Member) {
		out.Killed = true
		var err error
		if ms, ok := scope.(memberSignaller); ok && members != nil {
			err = ms.SignalMembers(members, syscall.SIGKILL)
		} else {
			err = scope.Signal(syscall.SIGKILL)
		}
		if err != nil {
			out.Err = err
		}
	}
	empties, looks := 0, 0
	wait := pollFloor
	for {
		if !out.Killed && looks > 0 && empties == 0 && !time.Now().Before(graceEnd) {
			kill(nil)
			wait = pollFloor // SIGKILL acts at once: look again soon
		}
		members, err := scope.Members()
		looks++
		switch {
		case err != nil:
			out.Err = err
			empties = 0
		case len(members) == 0:
			empties++
			if empties >= 2 {
				out.Confirmed = true
				out.Remaining = nil
				out.Elapsed = time.Since(began)
				return out
			}
			wait = pollFloor // the second look follows at once
		default:
			empties = 0
			out.Remaining = members
		}
		now := time.Now()
		if !now.Before(opts.Deadline) {
			break
		}
		if out.Killed && empties == 0 {
			kill(members) // survivors of the kill, or late forks: what this look found
		}
		next := now.Add(wait)
		if now.Before(graceEnd) && next.After(graceEnd) {
			next = graceEnd
		}
		if next.After(opts.Deadline) {
			next = opts.Deadline
		}
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			out.Elapsed = time.Since(began)
			return out
		case <-t.C:
		}
		wait = min(wait*2, pollCeil)
	}
	out.Elapsed = time.Since(began)
	return out
}
