package exec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
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
// interval so that a double fork is usually seen while its parent is alive,
// and backs off while its looks find nothing new (see run).
type Tracker struct {
	mu         sync.Mutex
	procRoot   string // "/proc"; tests point it elsewhere to fault the evidence
	self       int
	reaper     *Reaper
	scopes     map[*pgScope]struct{}
	attributed map[Member]bool // adopted orphans already given to scopes
	walk       bool            // look by following the process tree, not by reading all of /proc
	kick       chan struct{}   // a subject started: rescan at the short interval again
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
		kick:       make(chan struct{}, 1),
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

// The back-off of the tracker's rescans while nothing changes: the wait
// doubles up to maxIdleInterval, and is at least idleCost times as long as
// the last look took, so that an idle tracker spends at most about 1/idleCost
// of a core (1%) however many processes a look walks.
const (
	maxIdleInterval = 2 * time.Second
	idleCost        = 100
)

// run rescans every interval while the looks find something new, and backs
// off while they do not: after a look that finds the same scopes with the
// same members as the one before, the wait doubles (see maxIdleInterval and
// idleCost); after a look that finds a change, or when a subject starts, it
// is interval again. A look costs in proportion to the processes it walks,
// which includes every survivor of every scope kept for verify: at a fixed
// 50 ms, an idle relayd with 1,000 such scopes spent about half a core
// (rule 6.11: what is kept is watched at a cost that does not grow with it).
// Backing off loses no evidence: Members and Signal look for themselves.
func (t *Tracker) run(ctx context.Context, interval time.Duration) {
	maxWait := max(interval, maxIdleInterval)
	wait := interval
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var last uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.kick:
			if wait > interval { // else the timer runs at interval already: resetting it could put looks off for good
				wait = interval
				timer.Reset(wait)
			}
			continue
		case <-timer.C:
		}
		t.mu.Lock()
		changed := false
		var took time.Duration
		if len(t.scopes) > 0 {
			began := time.Now()
			_ = t.refreshLocked() // a failed look changes nothing; Members reports it
			took = time.Since(began)
			sum := t.fingerprintLocked()
			changed = sum != last
			last = sum
		}
		t.mu.Unlock()
		if changed {
			wait = interval
		} else {
			wait = max(min(2*wait, maxWait), idleCost*took)
		}
		timer.Reset(wait)
	}
}

// fingerprintLocked sums up the live scopes and their members, so that run
// can tell whether a look found anything new. A collision only delays a
// look.
func (t *Tracker) fingerprintLocked() uint64 {
	sum := mix(uint64(len(t.scopes))) + mix(uint64(len(t.attributed))<<1)
	for s := range t.scopes {
		sum += mix(uint64(s.sid) << 1)
		for pid, start := range s.known {
			sum += mix(uint64(pid)<<40 ^ start)
		}
	}
	return sum
}

// mix is splitmix64's finalizer: a sum of mixed values changes when any
// one of them does.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// NewScope returns an empty process-group scope; the subject joins it when
// it starts. The name (an execution id) is not used by this mechanism.
func (t *Tracker) NewScope(name string) (Scope, error) {
	if err := faultScopeSetup(); err != nil {
		return nil, err
	}
	return &pgScope{t: t, known: make(map[int]uint64)}, nil
}

type pgScope struct {
	t     *Tracker
	sid   int            // the subject's pid, which is its session id
	start uint64         // a lower bound of the subject's start time, in ticks
	known map[int]uint64 // members at the last look: pid -> start
	live  bool           // registered with the tracker
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
	select {
	case s.t.kick <- struct{}{}:
	default: // a kick is already waiting
	}
}

// LeaveAlone keeps tracking: survivors' descendants stay members.
func (s *pgScope) LeaveAlone() {}

func (s *pgScope) Close() {
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
