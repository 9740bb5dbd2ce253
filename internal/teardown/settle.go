// Package teardown settles scopes: SIGTERM to every member, a grace period,
// SIGKILL to what is left, until there is positive evidence that nothing of
// the scope remains, always within a deadline.
//
// It never decides whether a scope should be settled (that is internal/session's
// call, by the lifecycle rules) and it never reports a scope gone without
// evidence: a look that fails counts as a live scope.
package teardown

import (
	"context"
	"sync"
	"syscall"
	"time"
)

// Member is one live process of a scope. PID and Start (clock ticks since
// boot) together name it even after the PID is reused.
type Member struct {
	PID   int
	Start uint64
}

// Scope is what settling needs of a scope (internal/exec implements it):
// a complete look at its members, and a signal to each of them.
type Scope interface {
	Members() ([]Member, error)
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
	Remaining []Member
	// Err is the last failure to look at or signal the scope, if any.
	Err     error
	Elapsed time.Duration
}

// Options bound a settlement.
type Options struct {
	Grace    time.Duration // SIGTERM to SIGKILL
	Deadline time.Time     // the whole settlement ends by then, confirmed or not
	// NoTerm: the scope had its SIGTERM (a destroy after a settlement; a
	// shim's own settlement when relayd died settling), so SIGKILL alone
	// goes out, once Grace has passed: each process gets each signal of a
	// settlement once (rule 6.13), and a second SIGTERM is "quit now" to
	// many programs.
	NoTerm bool
	// First, when not 0, is sent instead of SIGTERM: SIGINT for a shell
	// session's command at its deadline, as Ctrl-C would (protocol 4.7).
	First syscall.Signal
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
	SignalMembers(members []Member, sig syscall.Signal) error
}

// Result is the whole story of stopping a scope, as a reply tells it.
type Result struct {
	// Confirmed: the settlement had its evidence ("settled"). Otherwise
	// Destroyed tells whether the destroy that followed confirmed the
	// scope empty ("destroyed") or not ("failed").
	Confirmed, Destroyed bool
	Outcome              Outcome // of the settlement
	DestroyErr           error   // what the destroy reported, if it ran
}

// Budget bounds stopping a scope: Grace from SIGTERM to SIGKILL, Timeout
// for the whole of it, destroy included.
type Budget struct {
	Grace   time.Duration
	Timeout time.Duration
	Destroy DestroyOptions
	// Destroying, when set, is called once the settlement has failed, just
	// before the destroy runs (for a log line).
	Destroying func(Outcome)
	// First is Options.First: the signal that opens the settlement.
	First syscall.Signal
}

// destroyReserve is the part of the teardown budget kept for a destroy: a
// fifth of it, at most 200 ms, or a full fifth when a destroy command must
// run in it too. killReserve is the part of a settlement's own window kept
// after its first SIGKILL to see the effect: a fifth, at most 100 ms.
// Together with the grace they are every constant of a settlement's time.
func destroyReserve(b Budget) time.Duration {
	if b.Destroy.Command != nil {
		return b.Timeout / 5
	}
	return min(b.Timeout/5, 200*time.Millisecond)
}

func killReserve(window time.Duration) time.Duration {
	return min(window/5, 100*time.Millisecond)
}

// Stop is the whole of stopping a scope (protocol rules 6.2, 6.5, 6.7 and
// section 8), bounded by b.Timeout from now: settle it (Settle) within the
// budget less the destroy reserve, and, if that brings no evidence, destroy
// (Destroy) with what is left. ctx ends the settlement early (a second
// shutdown signal): it goes straight to the destroy.
func Stop(ctx context.Context, scope Scope, b Budget) Result {
	by := time.Now().Add(b.Timeout)
	reserve := destroyReserve(b)
	out := Settle(ctx, scope, Options{Grace: b.Grace, Deadline: by.Add(-reserve), First: b.First})
	if out.Confirmed {
		return Result{Confirmed: true, Outcome: out}
	}
	if b.Destroying != nil {
		b.Destroying(out)
	}
	last := time.Now().Add(reserve)
	if last.After(by) {
		last = by
	}
	confirmed, err := Destroy(scope, b.Destroy, last)
	return Result{Destroyed: confirmed, Outcome: out, DestroyErr: err}
}

// Settle stops every process of scope: SIGTERM, up to opts.Grace for the
// scope to empty, then SIGKILL (again on every look, so that late forks die
// too) until the scope is confirmed empty or opts.Deadline passes. ctx ends
// it early (a second shutdown signal): what is confirmed by then is reported.
//
// The first SIGKILL goes out the moment the grace ends, even while a look
// is under way: a look of a large process-group scope, while hundreds of
// members die of SIGTERM, took 300 ms, and the SIGKILL used to wait for it.
// It goes to what the last look found; the look after it finds and kills
// whatever came since.
func Settle(ctx context.Context, scope Scope, opts Options) Outcome {
	began := time.Now()
	// SIGKILL always comes before the deadline, with a fifth of the window
	// (at most 100ms) left to see its effect, however long the grace.
	graceEnd := began.Add(opts.Grace)
	killBy := opts.Deadline.Add(-killReserve(opts.Deadline.Sub(began)))
	if graceEnd.After(killBy) {
		graceEnd = killBy
	}
	st := &settling{scope: scope}
	if !opts.NoTerm { // else SIGKILL from the first look on
		st.term(opts.First)
	}
	stop := make(chan struct{})
	killerDone := make(chan struct{})
	go st.killAt(graceEnd, stop, killerDone)
	finish := func(confirmed bool) Outcome {
		close(stop)
		<-killerDone
		st.mu.Lock()
		defer st.mu.Unlock()
		out := st.out
		out.Confirmed = confirmed
		if confirmed {
			out.Remaining = nil
		}
		out.Elapsed = time.Since(began)
		return out
	}

	empties := 0
	wait := pollFloor
	pastGrace := false
	for {
		members, err := scope.Members()
		switch {
		case err != nil:
			st.fail(err)
			empties = 0
		case len(members) == 0:
			empties++
			if empties >= 2 {
				return finish(true)
			}
			wait = pollFloor // the second look follows at once
		default:
			empties = 0
			st.mu.Lock()
			st.out.Remaining = members
			st.mu.Unlock()
		}
		now := time.Now()
		if !now.Before(opts.Deadline) {
			return finish(false)
		}
		st.note(members, empties == 0)
		if !now.Before(graceEnd) && !pastGrace {
			// SIGKILL (from the killer, or just below) acts at once: look
			// again soon.
			pastGrace = true
			wait = pollFloor
		}
		if !now.Before(graceEnd) && empties == 0 {
			// Survivors of the kill, late forks, or the first kill when the
			// killer has not run yet: what this look found.
			if err == nil {
				st.kill(members)
			} else {
				st.kill(nil)
			}
		}
		next := now.Add(wait)
		if now.Before(graceEnd) && next.After(graceEnd) {
			next = graceEnd
		}
		if next.After(opts.Deadline) {
			next = opts.Deadline
		}
		if !sleepUntil(ctx, next) {
			return finish(false)
		}
		wait = min(wait*2, pollCeil)
	}
}

// settling is the state a settlement shares with its grace-end killer.
type settling struct {
	scope   Scope
	mu      sync.Mutex
	out     Outcome  // Killed, Err and Remaining; the rest is filled in at the end
	seen    []Member // what the last look found; nil when it found nothing or failed
	looked  bool     // a look after SIGTERM has been made and the settlement goes on
	nonzero bool     // the last look found members, or failed
}

// note records a look of the settlement loop, which arms the killer: its
// members, and whether it found the scope alive (members, or a failed look).
func (st *settling) note(members []Member, alive bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.seen = nil
	if len(members) > 0 {
		st.seen = members
	}
	st.nonzero = alive
	st.looked = true
}

// term sends the settlement's one SIGTERM (or first, when not 0): to
// what one look found, or to the whole scope when it cannot signal
// members one by one or the look failed.
func (st *settling) term(first syscall.Signal) {
	sig := syscall.SIGTERM
	if first != 0 {
		sig = first
	}
	ms, ok := st.scope.(memberSignaller)
	if !ok {
		st.fail(st.scope.Signal(sig))
		return
	}
	members, err := st.scope.Members()
	if err == nil {
		err = ms.SignalMembers(members, sig)
	} else {
		err = st.scope.Signal(sig)
	}
	st.fail(err)
}

func (st *settling) fail(err error) {
	if err == nil {
		return
	}
	st.mu.Lock()
	st.out.Err = err
	st.mu.Unlock()
}

// kill sends SIGKILL to members, or to the whole scope when members is nil
// or the scope cannot signal members one by one.
func (st *settling) kill(members []Member) {
	st.mu.Lock()
	st.out.Killed = true
	st.mu.Unlock()
	var err error
	if ms, ok := st.scope.(memberSignaller); ok && members != nil {
		err = ms.SignalMembers(members, syscall.SIGKILL)
	} else {
		err = st.scope.Signal(syscall.SIGKILL)
	}
	st.fail(err)
}

// killAt sends the first SIGKILL when the grace ends, if the settlement has
// looked after its SIGTERM and its last look found the scope alive. It
// returns when stop is closed, and closes done.
func (st *settling) killAt(graceEnd time.Time, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTimer(time.Until(graceEnd))
	defer t.Stop()
	select {
	case <-stop:
		return
	case <-t.C:
	}
	st.mu.Lock()
	armed := st.looked && st.nonzero && !st.out.Killed
	members := st.seen
	st.mu.Unlock()
	if armed {
		st.kill(members)
	}
}

// sleepUntil waits until t, or reports false when ctx ends first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}
