package exec

import (
	"errors"
	"syscall"
)

// ProcessGroup is the name of the process-group mechanism.
const ProcessGroup = "process-group"

// ProcessGroups is the mechanism that works everywhere: the scope is the
// subtree of the execution's shim, and nothing else. Each subject starts in
// a session of its own (a terminal-less process group). The members, the
// signals and the evidence are the shim's (shimproc_linux.go): no look at
// another execution's processes, no lock shared between executions, so a
// settlement costs the same whatever else runs.
type ProcessGroups struct {
	shims *Shims
	state *State // where running scopes are recorded, if anywhere
}

// NewProcessGroups is the process-group mechanism over shims.
func NewProcessGroups(shims *Shims) *ProcessGroups { return &ProcessGroups{shims: shims} }

func (m *ProcessGroups) Name() string { return ProcessGroup }

func (m *ProcessGroups) NewScope(name string) (Scope, error) {
	if err := faultScopeSetup(); err != nil {
		return nil, errors.Join(ErrScopeUnavailable, err)
	}
	return &pgScope{m: m, name: name}, nil
}

func (m *ProcessGroups) Release() {}

// pgScope is one execution's shim subtree.
type pgScope struct {
	m    *ProcessGroups
	name string
	run  *shimRun
}

func (s *pgScope) Mechanism() string { return ProcessGroup }

func (s *pgScope) enter() (int, []int, error) { return cgroupNone, nil, nil }

func (s *pgScope) started(run *shimRun) {
	s.run = run
	if st := s.m.state; st != nil {
		st.add(s)
	}
}

func (s *pgScope) Members() ([]Member, error) {
	if s.run == nil {
		return nil, nil
	}
	return s.run.members()
}

func (s *pgScope) Signal(sig syscall.Signal) error {
	if s.run == nil {
		return nil
	}
	return s.run.signal(sig)
}

// SignalMembers signals what a look of this scope found, without walking
// the subtree again (teardown's memberSignaller): a settlement of 1,000
// members walks once per look, not twice.
func (s *pgScope) SignalMembers(members []Member, sig syscall.Signal) error {
	if s.run == nil || len(members) == 0 {
		return nil
	}
	return s.run.signalSome(sig, members)
}

func (s *pgScope) LeaveAlone() {
	if s.run != nil {
		s.run.leaveAlone()
	}
	if st := s.m.state; st != nil {
		st.remove(s)
	}
}

func (s *pgScope) Close() {
	if s.run != nil {
		s.run.close()
	}
	if st := s.m.state; st != nil {
		st.forget(s)
	}
}
