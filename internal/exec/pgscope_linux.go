package exec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ProcessGroup is the name of the process-group mechanism.
const ProcessGroup = "process-group"

// Tracker follows process-group scopes through the process tree. Each
// subject starts in a session of its own; a scope's members are the
// processes of that session, the processes seen in the scope before
// (identified by pid and start time, so a reused pid is not a member), every
// descendant of a member, and orphans adopted by relayd (a child subreaper or
// PID 1) that were born while the scope was live. It rescans on a short
// interval so that a double fork is usually seen while its parent is alive.
type Tracker struct {
	mu         sync.Mutex
	procRoot   string // "/proc"; tests point it elsewhere to fault the evidence
	self       int
	reaper     *Reaper
	scopes     map[*pgScope]struct{}
	attributed map[Member]bool // adopted orphans already given to scopes
	walk       bool            // look by following the process tree, not by reading all of /proc

	state atomic.Pointer[State] // where running scopes are recorded (state_linux.go), if anywhere
}

// NewTracker starts a tracker that rescans every interval while scopes are
// live, until ctx ends.
func NewTracker(ctx context.Context, reaper *Reaper, interval time.Duration) *Tracker {
	t := &Tracker{
		procRoot:   "/proc",
		self:       unix.Getpid(),
		reaper:     reaper,
		scopes:     make(map[*pgScope]struct{}),
		attributed: make(map[Member]bool),
	}
	if root := faultProcRoot(); root != "" {
		t.procRoot = root
	}
	// Following the tree is enough only where orphans come to relayd.
	var isReaper int32
	_ = unix.Prctl(unix.PR_GET_CHILD_SUBREAPER, uintptr(unsafe.Pointer(&isReaper)), 0, 0, 0)
	t.walk = (isReaper != 0 || t.self == 1) && canWalk(t.procRoot, t.self)
	go t.run(ctx, interval)
	return t
}

func (t *Tracker) run(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		t.mu.Lock()
		if len(t.scopes) > 0 {
			_ = t.refreshLocked() // a failed look changes nothing; Members reports it
		}
		t.mu.Unlock()
	}
}

// NewScope returns an empty process-group scope; the subject joins it when
// it starts. The name (an execution id) names it in the state record.
func (t *Tracker) NewScope(name string) (Scope, error) {
	if err := faultScopeSetup(); err != nil {
		return nil, err
	}
	return &pgScope{t: t, name: name, known: make(map[int]uint64)}, nil
}

type pgScope struct {
	t     *Tracker
	name  string
	sid   int            // the subject's pid, which is its session id
	start uint64         // a lower bound of the subject's start time, in ticks
	known map[int]uint64 // members at the last look: pid -> start
	live  bool           // registered with the tracker
	left  bool           // left alone (rule 6.1): no longer in the state record
}

func (s *pgScope) Mechanism() string { return ProcessGroup }

func (s *pgScope) prepare(attr *syscall.SysProcAttr) error {
	attr.Setsid = true
	s.start = nowTicks()
	return nil
}

func (s *pgScope) started(pid int) {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	s.sid = pid
	// The start time is filled in by the next look: until then the pid
	// cannot name another process. It is relayd's child, so it is not
	// reused before the reaper collects it, and after that the kernel hands
	// out pids cyclically: reuse needs pid_max forks in between. Reading
	// /proc/PID/stat here, while the subject is still in execve, cost a
	// twentieth of relayd's time per execute.
	s.known[pid] = 0
	s.live = true
	s.t.scopes[s] = struct{}{}
}

// LeaveAlone keeps tracking: survivors' descendants stay members. The
// scope leaves the state record: a successor leaves its survivors alone too.
func (s *pgScope) LeaveAlone() { s.t.leaveAlone(s) }

func (s *pgScope) Close() {
	defer s.t.unrecord(s) // state_linux.go: once unlocked
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	delete(s.t.scopes, s)
	s.live = false
}

func (s *pgScope) Members() ([]Member, error) {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	if err := s.t.refreshLocked(); err != nil {
		return nil, err
	}
	if !s.live {
		if err := s.t.lookLocked(s); err != nil {
			return nil, err
		}
	}
	out := make([]Member, 0, len(s.known))
	for pid, start := range s.known {
		out = append(out, Member{PID: pid, Start: start})
	}
	return out, nil
}

func (s *pgScope) Signal(sig syscall.Signal) error {
	members, err := s.Members()
	if err != nil {
		return err
	}
	return s.SignalMembers(members, sig)
}

// SignalMembers signals the members a look has just found, without looking
// again (settling calls it with what its own look saw). Each is checked by
// its start time, as in Signal.
func (s *pgScope) SignalMembers(members []Member, sig syscall.Signal) error {
	var first error
	for _, m := range members {
		if err := signalMember(s.t.procRoot, m, sig); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// refreshLocked looks at the process table once and updates every live scope.
func (t *Tracker) refreshLocked() error {
	scopes := make([]*pgScope, 0, len(t.scopes))
	for s := range t.scopes {
		scopes = append(scopes, s)
	}
	table, err := t.lookAt(scopes)
	if err != nil {
		return err
	}
	t.attributeOrphans(table)
	return nil
}

// lookLocked updates one scope that is no longer registered (closed), for a
// last look at what is left of it.
func (t *Tracker) lookLocked(s *pgScope) error {
	_, err := t.lookAt([]*pgScope{s})
	return err
}

// lookAt reads the process table (the part reachable from the scopes'
// members and from relayd's children where the tree can be followed, else
// all of it) and updates the scopes from it.
func (t *Tracker) lookAt(scopes []*pgScope) (map[int]procEntry, error) {
	var table map[int]procEntry
	var err error
	var roots []int
	if t.walk {
		for _, s := range scopes {
			for pid := range s.known {
				roots = append(roots, pid)
			}
		}
	}
	if t.walk && !scanIsCheaper(t.procRoot, len(roots)) {
		table, err = walkTable(t.procRoot, t.self, roots)
	} else {
		table, err = procTable(t.procRoot)
	}
	if err != nil {
		return nil, err
	}
	children := make(map[int][]int, len(table))
	for pid, e := range table {
		children[e.ppid] = append(children[e.ppid], pid)
	}
	for _, s := range scopes {
		s.update(table, children)
	}
	return table, nil
}

// scanIsCheaper reports whether reading every process of /proc costs less
// than following the tree from members roots: the walk reads two files per
// member (stat and children), the scan one per process. With most of the
// machine's processes in scopes (a large tree being settled), the scan
// halves the cost of a look. The count of processes is bounded by the
// count of threads in /proc/loadavg.
func scanIsCheaper(procRoot string, members int) bool {
	if members < 64 {
		return false
	}
	b, err := readSmall(procRoot+"/loadavg", make([]byte, 128))
	if err != nil {
		return false
	}
	f := bytes.Fields(b)
	if len(f) < 4 {
		return false
	}
	_, total, ok := bytes.Cut(f[3], []byte("/"))
	if !ok {
		return false
	}
	threads, err := strconv.Atoi(string(total))
	return err == nil && 2*members > threads
}

// attributeOrphans gives each newly adopted orphan that no scope already
// holds to every live scope it could have come from: those started before it.
func (t *Tracker) attributeOrphans(table map[int]procEntry) {
	for m := range t.attributed {
		if e, ok := table[m.PID]; !ok || e.start != m.Start {
			delete(t.attributed, m)
		}
	}
	for pid, e := range table {
		if e.ppid != t.self || e.dead() {
			continue
		}
		m := Member{PID: pid, Start: e.start}
		if t.attributed[m] || (t.reaper != nil && t.reaper.IsChild(pid)) {
			continue
		}
		t.attributed[m] = true
		held := false
		for s := range t.scopes {
			if start, ok := s.known[pid]; ok && start == e.start {
				held = true
			}
		}
		if held {
			continue
		}
		for s := range t.scopes {
			if s.start <= e.start {
				s.known[pid] = e.start
			}
		}
	}
}

// update recomputes the scope's members from one process table.
func (s *pgScope) update(table map[int]procEntry, children map[int][]int) {
	members := make(map[int]uint64, len(s.known))
	var queue []int
	add := func(e procEntry) {
		if e.dead() {
			return
		}
		if _, ok := members[e.pid]; ok {
			return
		}
		members[e.pid] = e.start
		queue = append(queue, e.pid)
	}
	for pid, start := range s.known {
		if e, ok := table[pid]; ok && (start == 0 || e.start == start) {
			add(e)
		}
	}
	if s.sid > 0 {
		for _, e := range table {
			if e.sid == s.sid && e.start >= s.start {
				add(e)
			}
		}
	}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			if e := table[c]; e.start >= members[pid] {
				add(e)
			}
		}
	}
	s.known = members
}

// signalMember signals one process only if it is still the one that was
// seen: the pidfd pins the process, and its start time proves that the pid
// was not reused in between.
func signalMember(procRoot string, m Member, sig syscall.Signal) error {
	fd, err := unix.PidfdOpen(m.PID, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil
		}
		return fmt.Errorf("exec.signalMember %d: pidfd_open: %w", m.PID, err)
	}
	defer unix.Close(fd)
	e, err := readStat(procRoot, m.PID, make([]byte, 1024))
	if err != nil || e.start != m.Start {
		return nil // ended, or the pid now names another process
	}
	if err := unix.PidfdSendSignal(fd, sig, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("exec.signalMember %d: %w", m.PID, err)
	}
	return nil
}

// nowTicks is the current time in the unit of /proc/PID/stat's start time:
// clock ticks (USER_HZ, 100 on Linux) since boot.
func nowTicks() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	return uint64(ts.Nano() / int64(time.Second/userHZ))
}

const userHZ = 100
