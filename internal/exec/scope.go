package exec

import (
	"errors"
	"syscall"

	"github.com/relayd/relayd/internal/teardown"
)

// Mechanism is one way of keeping scopes, chosen once at startup
// (cmd/relayd/scope.go): the process-group mechanism (ProcessGroups) or
// the cgroup v2 one (Cgroups). Adding a mechanism is a type that
// implements it, and one case where relayd chooses.
type Mechanism interface {
	// Name is the mechanism as replies report it: "process-group" or "cgroup".
	Name() string
	// NewScope makes the scope of one execution, named after it. An error
	// wraps ErrScopeUnavailable: nothing ran.
	NewScope(name string) (Scope, error)
	// Release gives back what the mechanism holds (relayd is exiting).
	Release()
}

// Scope is the tracked set of processes of one execution: the subject and
// every descendant it creates, including those that leave its process group
// or session. Every scope's subject is started by a shim of its own
// (shimproc_linux.go), whose subtree is the scope whatever the mechanism; the
// cgroup mechanism adds its leaf, which the subject is born in.
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
	// Close stops tracking. It signals nothing; a scope that is neither
	// empty nor left alone (a settlement that was not confirmed) retires
	// its shim, which goes on settling what it holds by itself.
	Close()

	// enter says how the subject is born inside the scope: the cgroup mode
	// of the shim's start and its descriptors, which the caller closes.
	enter() (mode int, fds []int, err error)
	// started binds the scope to the shim run of its subject.
	started(run *shimRun)
}

// Member is one live process of a scope: teardown's, so that a scope is
// what a settlement takes.
type Member = teardown.Member

// ErrScopeUnavailable means a scope could not be set up: nothing ran.
var ErrScopeUnavailable = errors.New("exec: execution scope unavailable")
