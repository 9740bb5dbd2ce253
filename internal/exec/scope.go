package exec

import (
	"errors"
	"syscall"
)

// Scope is the tracked set of processes of one execution: the subject and
// every descendant it creates, including those that leave its process group
// or session. Two mechanisms implement it: a process-group scope (a session
// per subject plus a walk of the process tree, works everywhere) and, where
// the host allows it, a cgroup scope.
type Scope interface {
	// Mechanism names the mechanism, as reported in replies: "process-group" or "cgroup".
	Mechanism() string
	// Members lists the live processes of the scope from one complete look.
	// An error means the look was not complete: it is no evidence of anything.
	Members() ([]Member, error)
	// Signal sends sig to every live member, never to a process outside the scope.
	Signal(sig syscall.Signal) error
	// LeaveAlone says the subject exited and what remains is left alone
	// (protocol rule 6.1): the mechanism frees what it holds once the scope
	// is empty, and Members reports an empty scope from then on.
	LeaveAlone()
	// Close stops tracking. It signals nothing.
	Close()

	// prepare sets up the spawn so that the subject is born inside the scope.
	prepare(attr *syscall.SysProcAttr) error
	// started records the subject once it runs.
	started(pid int)
}

// Member is one live process of a scope. PID and Start (clock ticks since
// boot) together name it even after the PID is reused.
type Member struct {
	PID   int
	Start uint64
	// Unclaimed marks a process that came to relayd after the scope began
	// and that could come from another scope too, one kept for its
	// survivors (process-group mechanism): it counts for the evidence, and
	// is listed, but a settlement does not signal it; a destroy does.
	Unclaimed bool
}

// ErrScopeUnavailable means a scope could not be set up: nothing ran.
var ErrScopeUnavailable = errors.New("exec: execution scope unavailable")
