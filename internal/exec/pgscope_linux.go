package exec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
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
// subject starts in a session of its own. A scope's members are the
// processes seen in it before (identified by pid and start time, so a
// reused pid is not a member), every process of a session that a member
// made (the subject's own, and any a member made with setsid), every
// descendant of a member, and the orphans that come to relayd (a child
// subreaper, or PID 1) and can be attributed to it (attribute). It rescans
// on a short interval so that a double fork is usually seen while its parent
// is alive, and backs off while its looks find nothing new (see run).
//
// The evidence of a look (protocol rule 6.5) holds against a subject that
// hides:
//   - a process whose main thread has exited while other threads run is
//     alive (procEntry.dead), and the children of all its threads are read;
//   - relayd's own children are read from the threads that can have ones
//     of a scope: the main thread, which adopts orphans, and each thread
//     that forked a live subject, which gets its clone(CLONE_PARENT)
//     children;
//   - a look that found a scope empty reads relayd's children once more and
//     walks whatever came since, until nothing new comes (a fork-and-exit
//     chain never lets it settle: the look fails, which counts as alive);
//   - an orphan that came to relayd after a scope began and that cannot be
//     attributed to one scope counts for the evidence of every scope it
//     could come from (unclaimed): it is listed, and blocks their
//     settlement until it is gone; their settlements signal it unless one of
//     them is kept for its survivors (keptElsewhere, holdsPipe), and a
//     destroy always does.
type Tracker struct {
	mu       sync.Mutex
	procRoot string // "/proc"; tests point it elsewhere to fault the evidence
	self     int
	reaper   *Reaper
	scopes   map[*pgScope]struct{}
	// pending are the scopes whose subject is being forked (prepare, not
	// yet started): a look then can see the subject and what it made
	// already, before the scope is there to hold them. Such a look is not
	// remembered (an older complete look still is one), and its orphans
	// can be a pending scope's.
	pending map[*pgScope]struct{}
	walk    bool          // look by following the process tree, not by reading all of /proc
	kick    chan struct{} // a subject started: rescan at the short interval again

	// unclaimed are orphans that came to relayd and could come from more
	// than one scope: each maps to the scopes it could come from.
	unclaimed map[Member][]*pgScope
	// seen is what the last complete look found, and for each process the
	// scope it belonged to (nil for none); seenTick is when that look began.
	// An orphan that was seen is not attributed anew, and one that existed
	// then without being seen came from outside relayd's care.
	seen        map[Member]*pgScope
	foreignSids map[int]bool // sessions of the processes of no scope at that look
	seenTick    uint64
	// seenWhole: that look saw every process then in relayd's care (a
	// scan of all of /proc, or a walk that read relayd's children again at
	// its end and found nothing new): only then did a process that existed
	// and was not seen come from outside.
	seenWhole bool
	looks     uint64 // complete looks begun (refreshLocked), for pgScope.sids

	// ran is how long each member and each unclaimed process had run
	// (nanoseconds, every thread) when the last complete look began, before
	// it walked, kept while more than one scope is live or one is kept. A
	// process must run to fork: a scope none of whose processes ran, ended
	// or appeared since then cannot have made a process that look did not
	// see.
	ran map[Member]uint64

	state atomic.Pointer[State] // where running scopes are recorded (state_linux.go), if anywhere
}

// maxLookRounds bounds how often a look reads relayd's children again
// because new ones came while it walked.
const maxLookRounds = 16

// errUnstable means new children kept coming to relayd while a look
// walked: the look is not complete and proves nothing.
var errUnstable = errors.New("exec: processes kept coming to relayd during the look (a fork-and-exit chain?)")

// NewTracker starts a tracker that rescans every interval while scopes are
// live, until ctx ends.
func NewTracker(ctx context.Context, reaper *Reaper, interval time.Duration) *Tracker {
	t := &Tracker{
		procRoot:  "/proc",
		self:      unix.Getpid(),
		reaper:    reaper,
		scopes:    make(map[*pgScope]struct{}),
		pending:   make(map[*pgScope]struct{}),
		unclaimed: make(map[Member][]*pgScope),
		kick:      make(chan struct{}, 1),
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
			for s := range t.scopes {
				// A running subject is watched at the short interval: the
				// back-off is for scopes kept for their survivors, and
				// seeing a double fork while its parent lives is what
				// attributes it.
				changed = changed || !s.left
			}
		}
		t.mu.Unlock()
		if changed {
			// Never more than about 1% of a core, however large the tree
			// (a running subject beside 1,000 kept scopes): a look that
			// took long is followed by a longer wait.
			wait = max(interval, idleCost*took)
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
	sum := mix(uint64(len(t.scopes))) + mix(uint64(len(t.unclaimed))<<1)
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
	// sids are the sessions members made, each with the look that last
	// saw a member in it. One is kept for a look after its last member
	// was seen (sidGrace): a subject that starts a service and exits at
	// once can be gone at a look that does not see the service yet (it
	// came to relayd after the look read relayd's children), and the
	// session is then what says whose the service is. While a process is
	// in session S the kernel does not hand out pid S, so the session
	// cannot name another one meanwhile.
	sids   map[int]uint64
	live   bool   // registered with the tracker
	left   bool   // the subject exited: what remains is left alone (kept)
	looked bool   // the last complete look (Tracker.seen) included this scope
	pipe   uint64 // inode of the subject's stdout pipe, which its descendants inherit
	tid    int    // the relayd thread that forked the subject
}

func (s *pgScope) forked(tid int, pipe uint64) {
	s.t.mu.Lock()
	s.tid, s.pipe = tid, pipe
	s.t.mu.Unlock()
}

func (s *pgScope) Mechanism() string { return ProcessGroup }

func (s *pgScope) prepare(attr *syscall.SysProcAttr) error {
	attr.Setsid = true
	s.t.mu.Lock()
	s.start = nowTicks()
	s.t.pending[s] = struct{}{}
	s.t.mu.Unlock()
	return nil
}

// aborted says the fork that prepare prepared for failed: nothing runs.
func (s *pgScope) aborted() {
	s.t.mu.Lock()
	delete(s.t.pending, s)
	s.t.mu.Unlock()
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
	s.sids = map[int]uint64{pid: s.t.looks}
	// The kernel has just handed out pid: no session S=pid exists, so
	// another scope's memory of one (kept for sidGrace) is stale.
	for o := range s.t.scopes {
		delete(o.sids, pid)
	}
	s.live = true
	delete(s.t.pending, s)
	s.t.scopes[s] = struct{}{}
	select {
	case s.t.kick <- struct{}{}:
	default: // a kick is already waiting
	}
}

// LeaveAlone keeps tracking: survivors' descendants stay members. The
// scope leaves the state record: a successor leaves its survivors alone too.
func (s *pgScope) LeaveAlone() { s.t.leaveAlone(s) }

func (s *pgScope) Close() {
	defer s.t.unrecord(s) // state_linux.go: once unlocked
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	delete(s.t.scopes, s)
	delete(s.t.pending, s)
	s.live = false
	for m, from := range s.t.unclaimed {
		if rest := slices.DeleteFunc(slices.Clone(from), func(o *pgScope) bool { return o == s }); len(rest) > 0 {
			s.t.unclaimed[m] = rest
		} else {
			delete(s.t.unclaimed, m)
		}
	}
}

// Members lists the members of one look, and the unclaimed orphans that
// could be the scope's (Member.Unclaimed). An error means the look was not
// complete.
func (s *pgScope) Members() ([]Member, error) {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	if err := s.lookLocked(); err != nil {
		return nil, err
	}
	return s.membersLocked(), nil
}

func (s *pgScope) lookLocked() error {
	if s.live {
		return s.t.refreshLocked()
	}
	_, _, err := s.t.lookAt([]*pgScope{s}, false)
	return err
}

func (s *pgScope) membersLocked() []Member {
	out := make([]Member, 0, len(s.known))
	for pid, start := range s.known {
		out = append(out, Member{PID: pid, Start: start})
	}
	for m, from := range s.t.unclaimed {
		if slices.Contains(from, s) {
			out = append(out, Member{PID: m.PID, Start: m.Start,
				Unclaimed: keptElsewhere(from, s) && !holdsPipe(s.t.procRoot, m, s.pipe)})
		}
	}
	return out
}

// holdsPipe reports whether m has the pipe ino open (a process keeps the
// stdout its subject was given unless it closes or redirects it). It is
// used only to let a scope's settlement signal an orphan that is then also
// its own by this sign, never to take one out of any scope's evidence: a
// process can open another's pipe through /proc, but all it gains is to be
// stopped.
func holdsPipe(procRoot string, m Member, ino uint64) bool {
	if ino == 0 {
		return false
	}
	dir := procRoot + "/" + strconv.Itoa(m.PID) + "/fd"
	d, err := os.Open(dir)
	if err != nil {
		return false
	}
	names, err := d.Readdirnames(256)
	d.Close()
	if err != nil && len(names) == 0 {
		return false
	}
	want := "pipe:[" + strconv.FormatUint(ino, 10) + "]"
	for _, n := range names {
		if link, err := os.Readlink(dir + "/" + n); err == nil && link == want {
			// The pid could have been reused since the look: check it is m.
			e, err := readStat(procRoot, m.PID, make([]byte, 1024))
			return err == nil && e.start == m.Start
		}
	}
	return false
}

// keptElsewhere reports whether a scope of from other than s is kept for
// its survivors. An orphan that could be s's or a kept scope's is not
// signalled by s's settlement: rule 6.1 protects what an exited subject
// left running, and a destroy says that the evidence could not be had. One
// that could be s's or another running scope's is: killing it can only
// take from an execution that is still running what its own settlement
// would take, and it spares both a destroy.
func keptElsewhere(from []*pgScope, s *pgScope) bool {
	for _, o := range from {
		if o != s && o.left {
			return true
		}
	}
	return false
}

// Signal signals every member a look finds, not the unclaimed orphans. A
// look that was not complete still signals what it found, and reports why
// it proves nothing.
func (s *pgScope) Signal(sig syscall.Signal) error {
	s.t.mu.Lock()
	err := s.lookLocked()
	members := s.membersLocked()
	s.t.mu.Unlock()
	if serr := s.SignalMembers(members, sig); err == nil {
		err = serr
	}
	return err
}

// SignalAll is Signal for a destroy: the unclaimed orphans that could be
// the scope's are signalled too.
func (s *pgScope) SignalAll(sig syscall.Signal) error {
	s.t.mu.Lock()
	err := s.lookLocked()
	members := s.membersLocked()
	s.t.mu.Unlock()
	for i := range members {
		members[i].Unclaimed = false
	}
	if serr := s.SignalMembers(members, sig); err == nil {
		err = serr
	}
	return err
}

// SignalMembers signals the members a look has just found, without looking
// again (settling calls it with what its own look saw). Each is checked by
// its start time, as in Signal; unclaimed orphans are left out.
func (s *pgScope) SignalMembers(members []Member, sig syscall.Signal) error {
	var first error
	for _, m := range members {
		if m.Unclaimed {
			continue
		}
		if err := signalMember(s.t.procRoot, m, sig); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// refreshLocked looks once and updates every live scope. A look that was
// not complete still updates them with what it found.
func (t *Tracker) refreshLocked() error {
	scopes := make([]*pgScope, 0, len(t.scopes))
	for s := range t.scopes {
		scopes = append(scopes, s)
	}
	t.looks++
	began := nowTicks()
	ran := t.runtimes(scopes)
	table, whole, err := t.lookAt(scopes, true)
	if table != nil && err == nil && len(t.pending) == 0 {
		t.remember(table, scopes, began, whole)
		t.ran = ran
	}
	return err
}

// lookAt reads the process table (the part reachable from the scopes'
// members and from relayd's children where the tree can be followed, else
// all of it), updates the scopes from it and attributes the orphans that
// came to relayd (only when scopes are every live scope: a last look at a
// closed scope attributes nothing). When a scope is then empty, or an
// orphan's origin can be in doubt, relayd's children are read again, and
// what came since is walked, until nothing new comes. whole reports whether
// the look saw every process then in relayd's care (Tracker.seenWhole).
func (t *Tracker) lookAt(scopes []*pgScope, all bool) (map[int]procEntry, bool, error) {
	var table map[int]procEntry
	var queue []int
	if t.walk {
		for _, s := range scopes {
			for pid := range s.known {
				queue = append(queue, pid)
			}
		}
		if all {
			for m := range t.unclaimed {
				queue = append(queue, m.PID)
			}
		}
	}
	if !t.walk || scanIsCheaper(t.procRoot, len(queue)) {
		var err error
		if table, err = procTable(t.procRoot); err != nil {
			return nil, false, err
		}
		queue = queue[:0]
	} else {
		table = make(map[int]procEntry, len(queue)+8)
	}
	if t.walk {
		kids, err := t.selfChildren(scopes)
		if err != nil {
			return nil, false, err
		}
		queue = append(queue, kids...)
	}
	buf := make([]byte, 1024)
	for round := 0; ; round++ {
		walkInto(t.procRoot, t.self, table, queue, buf)
		children := make(map[int][]int, len(table))
		for pid, e := range table {
			children[e.ppid] = append(children[e.ppid], pid)
		}
		for _, s := range scopes {
			s.update(table, children, t.looks)
		}
		if all {
			t.attribute(table, children, scopes)
		}
		if !t.walk || (!anyEmpty(scopes, t.unclaimed) && !(all && doubtful(scopes))) {
			return table, !t.walk, nil
		}
		again, err := t.selfChildren(scopes)
		if err != nil {
			return table, false, err
		}
		queue = queue[:0]
		for _, pid := range again {
			if _, ok := table[pid]; !ok {
				queue = append(queue, pid)
			}
		}
		if len(queue) == 0 {
			return table, true, nil
		}
		if round == maxLookRounds {
			return table, false, errUnstable
		}
	}
}

// doubtful reports whether an orphan's origin can be in doubt between
// scopes: several are live, or one is kept for its survivors (another can
// start at any time). Then every look reads relayd's children again at its
// end, so that it saw every process in relayd's care: attribution by
// activity and by "it existed unseen, so it came from outside" hold only
// after such a look (seenWhole). A single running scope, the common case,
// costs nothing more.
func doubtful(scopes []*pgScope) bool {
	if len(scopes) > 1 {
		return true
	}
	for _, s := range scopes {
		if s.left {
			return true
		}
	}
	return false
}

// anyEmpty reports whether a scope has no member and no unclaimed orphan:
// only then does a look count as evidence, and must be complete.
func anyEmpty(scopes []*pgScope, unclaimed map[Member][]*pgScope) bool {
	for _, s := range scopes {
		if len(s.known) > 0 {
			continue
		}
		held := false
		for _, from := range unclaimed {
			if slices.Contains(from, s) {
				held = true
				break
			}
		}
		if !held {
			return true
		}
	}
	return false
}

// selfChildren lists relayd's children that can belong to scopes: the
// children of its main thread, which the kernel hands every orphan to, and
// of each thread that forked a subject of scopes, whose clone(CLONE_PARENT)
// children become that thread's. Other threads' children are subjects of
// other scopes, or operator commands. A thread that has ended has handed
// its children to another, the main thread among them.
func (t *Tracker) selfChildren(scopes []*pgScope) ([]int, error) {
	var out []int
	buf := make([]byte, 4096)
	tids := []int{t.self}
	for _, s := range scopes {
		if s.tid > 0 && !slices.Contains(tids, s.tid) {
			tids = append(tids, s.tid)
		}
	}
	for i, tid := range tids {
		b, err := readSmall(t.procRoot+"/"+strconv.Itoa(t.self)+"/task/"+strconv.Itoa(tid)+"/children", buf)
		if err != nil && i > 0 && errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("exec: relayd's children: %w", err)
		}
		for _, f := range bytes.Fields(b) {
			if c, err := strconv.Atoi(string(f)); err == nil {
				out = append(out, c)
			}
		}
	}
	return out, nil
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

// attribute decides, for each live process that came to relayd (its
// parent is relayd, relayd did not start it, and no scope holds it), which
// scope it belongs to, in this order:
//
//  1. one already seen at the last complete look keeps what it was then:
//     nobody's, or unclaimed;
//  2. by its session: a session made by a member of one scope is that
//     scope's; a session of processes of no scope is nobody's;
//  3. by its start time: one that existed at the last complete look without
//     being seen came from outside relayd's care (relayd is PID 1 and a
//     docker exec left it), nobody's; otherwise the scopes that began
//     before it could have made it: with one, it is that scope's; with none,
//     nobody's; with several, it is unclaimed by each of them.
//
// The descendants of an unclaimed process are unclaimed by the same scopes.
func (t *Tracker) attribute(table map[int]procEntry, children map[int][]int, scopes []*pgScope) {
	held := make(map[int]bool)
	for _, s := range scopes {
		for pid := range s.known {
			held[pid] = true
		}
	}
	for m := range t.unclaimed {
		e, ok := table[m.PID]
		if !ok || e.start != m.Start || e.dead() || held[m.PID] {
			delete(t.unclaimed, m)
			continue
		}
		if s := bySession(scopes, e.sid); s != nil {
			s.known[m.PID] = m.Start
			delete(t.unclaimed, m)
			continue
		}
		held[m.PID] = true
	}
	var grown []*pgScope
	for pid, e := range table {
		if e.ppid != t.self || held[pid] || e.dead() || (t.reaper != nil && t.reaper.IsChild(pid)) {
			continue
		}
		m := Member{PID: pid, Start: e.start}
		if _, seen := t.seen[m]; seen {
			continue // nobody's then (a member then would be held now)
		}
		if s := bySession(scopes, e.sid); s != nil {
			s.known[pid] = e.start
			grown = append(grown, s)
			continue
		}
		if t.foreignSids[e.sid] || (t.seenWhole && t.seenTick > 0 && e.start < t.seenTick) {
			continue
		}
		var from []*pgScope
		for _, s := range scopes {
			if s.start <= e.start {
				from = append(from, s)
			}
		}
		for s := range t.pending {
			if s.start <= e.start {
				from = append(from, s)
			}
		}
		if len(from) > 1 && t.ran != nil && t.seenWhole {
			from = t.active(from, table)
		}
		switch len(from) {
		case 0:
		case 1:
			from[0].known[pid] = e.start
			grown = append(grown, from[0])
		default:
			t.unclaimed[m] = from
		}
	}
	for _, s := range grown {
		s.update(table, children, t.looks)
	}
	// Descendants of unclaimed processes are unclaimed by the same scopes.
	for m, from := range t.unclaimed {
		queue := slices.Clone(children[m.PID])
		for len(queue) > 0 {
			pid := queue[0]
			queue = queue[1:]
			e := table[pid]
			c := Member{PID: pid, Start: e.start}
			if e.dead() || held[pid] || t.unclaimed[c] != nil {
				continue
			}
			t.unclaimed[c] = from
			queue = append(queue, children[pid]...)
		}
	}
}

// active keeps the scopes of from that could have made a process since the
// last whole look (seenWhole: it saw every process in relayd's care, so a
// process that made the orphan was seen then or was born since): each one
// of whose processes (or an unclaimed process it could own) ran, ended or
// appeared since. The scopes left out are proven idle: none of their
// processes executed an instruction, so none forked.
func (t *Tracker) active(from []*pgScope, table map[int]procEntry) []*pgScope {
	busy := make(map[*pgScope]bool)
	for m, owners := range t.unclaimed {
		if t.ranSince(m, table) {
			for _, s := range owners {
				busy[s] = true
			}
		}
	}
	out := from[:0:0]
	for _, s := range from {
		if busy[s] || t.scopeRan(s, table) {
			out = append(out, s)
		}
	}
	return out
}

// scopeRan reports whether a process of s ran, ended or appeared since the
// last complete look, or cannot be shown not to have: a scope that began
// since, a process of it that look saw but did not measure (its start time
// was not known yet when the look began), one that has ended, one whose run
// time grew, one that is new.
func (t *Tracker) scopeRan(s *pgScope, table map[int]procEntry) bool {
	if !s.looked {
		return true
	}
	for m, owner := range t.seen {
		if owner != s {
			continue
		}
		if _, measured := t.ran[m]; !measured {
			return true
		}
		if start, ok := s.known[m.PID]; !ok || start != m.Start {
			return true
		}
		if t.ranSince(m, table) {
			return true
		}
	}
	for pid, start := range s.known {
		if owner, ok := t.seen[Member{PID: pid, Start: start}]; !ok || owner != s {
			return true
		}
	}
	return false
}

// ranSince reports whether m ran since the last complete look (or cannot
// be shown not to have).
func (t *Tracker) ranSince(m Member, table map[int]procEntry) bool {
	before, ok := t.ran[m]
	e, live := table[m.PID]
	if !ok || !live || e.start != m.Start {
		return true
	}
	now, err := runtimeOf(t.procRoot, m.PID, e.threads)
	return err != nil || now != before
}

// bySession returns the one scope whose members made session sid, or nil.
func bySession(scopes []*pgScope, sid int) *pgScope {
	var found *pgScope
	for _, s := range scopes {
		if _, ok := s.sids[sid]; ok {
			if found != nil {
				return nil // a pid reused as a session id: no proof either way
			}
			found = s
		}
	}
	return found
}

// remember keeps what a complete look found, for the attribution of the
// orphans of later looks.
func (t *Tracker) remember(table map[int]procEntry, scopes []*pgScope, began uint64, whole bool) {
	owner := make(map[int]*pgScope)
	for _, s := range scopes {
		for pid := range s.known {
			owner[pid] = s
		}
	}
	unclaimed := make(map[int]bool, len(t.unclaimed))
	for m := range t.unclaimed {
		unclaimed[m.PID] = true
	}
	seen := make(map[Member]*pgScope, len(table))
	foreign := make(map[int]bool)
	for pid, e := range table {
		if e.dead() || unclaimed[pid] {
			continue
		}
		seen[Member{PID: pid, Start: e.start}] = owner[pid]
		if owner[pid] == nil && pid != t.self {
			foreign[e.sid] = true
		}
	}
	for _, s := range scopes {
		for sid := range s.sids {
			delete(foreign, sid) // a member's session is never nobody's
		}
	}
	t.seen, t.foreignSids, t.seenTick, t.seenWhole = seen, foreign, began, whole
	for s := range t.scopes {
		s.looked = false
	}
	for _, s := range scopes {
		s.looked = true
	}
}

// runtimes reads how long each member known so far and each unclaimed
// process has run, when more than one scope is live or one is kept: only
// then can an orphan's origin be in doubt between scopes, now or once
// another starts. A single running scope, the common case, costs nothing
// more.
func (t *Tracker) runtimes(scopes []*pgScope) map[Member]uint64 {
	if !doubtful(scopes) {
		return nil
	}
	ran := make(map[Member]uint64)
	read := func(pid int, start uint64) {
		if start == 0 {
			return // not looked at yet: it counts as new
		}
		if ns, err := runtimeOf(t.procRoot, pid, -1); err == nil {
			ran[Member{PID: pid, Start: start}] = ns
		}
	}
	for _, s := range scopes {
		for pid, start := range s.known {
			read(pid, start)
		}
	}
	for m := range t.unclaimed {
		read(m.PID, m.Start)
	}
	return ran
}

// sidGrace is how many looks a session is remembered after the last one
// that saw a member in it.
const sidGrace = 1

// update recomputes the scope's members from one process table of look
// number look: the members it knew that are still there, the processes of
// the sessions its members made that began after it, and their
// descendants.
func (s *pgScope) update(table map[int]procEntry, children map[int][]int, look uint64) {
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
	if len(s.sids) > 0 {
		for _, e := range table {
			if _, ok := s.sids[e.sid]; ok && e.start >= s.start {
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
	if s.sids == nil {
		s.sids = make(map[int]uint64, 1)
	}
	for pid := range members {
		s.sids[table[pid].sid] = look
	}
	for sid, last := range s.sids {
		if last+sidGrace < look {
			delete(s.sids, sid)
		}
	}
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
