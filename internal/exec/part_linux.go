package exec

import (
	"fmt"
	"slices"
	"sync"
	"syscall"
)

// Part is part of a scope, a teardown.Scope of its own: every member but
// some kept processes and their descendants, and but some spared ones
// (without their descendants). A trial boundary that keeps processes
// settles the rest of a left scope as a Part, and a shell session's
// command is the Part of the session's scope that is not the shell's nor
// an earlier command's, so that teardown.Stop settles either as any scope
// (SIGTERM, grace, SIGKILL, two empty looks). Each of its processes is
// signalled on its own, through a pidfd opened once its start time named
// it, and a look finds it only while that pidfd says it runs. Its
// evidence is then that every process it signalled is gone and that a
// complete look of the scope finds nothing outside the kept subtrees.
type Part struct {
	scope Scope

	mu      sync.Mutex
	kept    map[int]uint64  // kept pids, with their descendants as found → start ticks
	targets map[int]*target // what is settled, by pid
	// spare are left alone without their descendants: a session's shell,
	// whose new children are its command's.
	spare map[int]uint64
}

type target struct {
	start uint64
	fd    pidfd // -1 once it is known gone
}

// maxDepth bounds the walk up a member's parents to a kept process.
const maxDepth = 64

// NewPart is the part of scope outside the subtrees of kept and but the
// processes spare, each named by its pid and start time (rule 6.13). A
// member is sorted (kept or a target) when a look first finds it:
// Members, or Sort for a look made already.
func NewPart(scope Scope, kept, spare []Member) *Part {
	p := &Part{scope: scope, kept: map[int]uint64{}, targets: map[int]*target{}, spare: map[int]uint64{}}
	for _, m := range kept {
		p.kept[m.PID] = m.Start
	}
	for _, m := range spare {
		p.spare[m.PID] = m.Start
	}
	return p
}

// Keeps reports whether the part leaves a kept process of the scope out.
func (p *Part) Keeps() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.kept) > 0
}

// Sort makes each member of a look of the scope kept (a kept pid, or a
// descendant of one) or a target, and returns the targets still running.
func (p *Part) Sort(members []Member) []Member {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sort(members)
}

// sort is Sort; p.mu is held.
func (p *Part) sort(members []Member) []Member {
	var out []Member
	buf := make([]byte, 1024)
	for _, m := range members {
		if t, ok := p.targets[m.PID]; ok {
			if t.running() {
				out = append(out, Member{PID: m.PID, Start: t.start})
			}
			continue
		}
		st, err := readStat("/proc", m.PID, buf)
		if err != nil {
			continue // gone since the look; the next look tells
		}
		if start, ok := p.spare[m.PID]; ok && start == st.start {
			continue
		}
		if p.isKept(m.PID, st, buf) {
			continue
		}
		if t := p.open(m.PID, st.start, buf); t != nil {
			out = append(out, Member{PID: m.PID, Start: t.start})
		}
	}
	// A target that a look missed is still one until its pidfd says it is gone.
	for pid, t := range p.targets {
		if !slices.ContainsFunc(out, func(m Member) bool { return m.PID == pid }) && t.running() {
			out = append(out, Member{PID: pid, Start: t.start})
		}
	}
	return out
}

// isKept reports whether pid (whose stat is st) is kept or descends from a
// kept process, and records a descendant as kept.
func (p *Part) isKept(pid int, st procEntry, buf []byte) bool {
	if start, ok := p.kept[pid]; ok && start == st.start {
		return true
	}
	var chain []int
	cur := st
	for depth := 0; depth < maxDepth && cur.ppid > 1; depth++ {
		parent := cur.ppid
		pst, err := readStat("/proc", parent, buf)
		if err != nil {
			return false
		}
		if start, ok := p.spare[parent]; ok && start == pst.start {
			return false
		}
		if start, ok := p.kept[parent]; ok && start == pst.start {
			p.kept[pid] = st.start
			for _, c := range chain {
				if cst, err := readStat("/proc", c, buf); err == nil {
					p.kept[c] = cst.start
				}
			}
			return true
		}
		chain = append(chain, parent)
		cur = pst
	}
	return false
}

// open makes pid a target: a pidfd, and its start time read again after
// it was opened, so that the pidfd names the process the look found.
func (p *Part) open(pid int, start uint64, buf []byte) *target {
	fd, err := openPidfd(pid)
	if err != nil {
		return nil // gone
	}
	if st, err := readStat("/proc", pid, buf); err != nil || st.start != start {
		fd.close()
		return nil // gone, and the pid reused
	}
	t := &target{start: start, fd: fd}
	p.targets[pid] = t
	return t
}

// running reports whether t's process still runs, and closes its pidfd
// once it does not.
func (t *target) running() bool {
	if t.fd < 0 {
		return false
	}
	if !t.fd.running() {
		t.fd.close()
		t.fd = -1
		return false
	}
	return true
}

// Members is one complete look of the scope, less the kept subtrees and
// the spared processes, plus every target still running.
func (p *Part) Members() ([]Member, error) {
	members, err := p.scope.Members()
	if err != nil {
		return nil, err
	}
	return p.Sort(members), nil
}

// Signal signals every target still running, after a look for new ones.
func (p *Part) Signal(sig syscall.Signal) error {
	members, err := p.Members()
	if err != nil {
		p.mu.Lock()
		members = nil
		for pid, t := range p.targets {
			members = append(members, Member{PID: pid, Start: t.start})
		}
		p.mu.Unlock()
	}
	if serr := p.SignalMembers(members, sig); serr != nil {
		return serr
	}
	return err
}

// SignalMembers signals the targets among members, each through its pidfd.
func (p *Part) SignalMembers(members []Member, sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var first error
	for _, m := range members {
		t, ok := p.targets[m.PID]
		if !ok || t.fd < 0 {
			continue
		}
		if err := t.fd.signal(sig); err != nil && first == nil {
			first = fmt.Errorf("exec: signal %d: %w", m.PID, err)
		}
	}
	return first
}

// Settled lists the pids of every target.
func (p *Part) Settled() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]int, 0, len(p.targets))
	for pid := range p.targets {
		out = append(out, pid)
	}
	return out
}

// Close closes the targets' pidfds.
func (p *Part) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, t := range p.targets {
		if t.fd >= 0 {
			t.fd.close()
			t.fd = -1
		}
	}
}
