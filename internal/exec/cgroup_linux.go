package exec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Cgroup is the name of the cgroup v2 mechanism.
const Cgroup = "cgroup"

// Cgroups hands out one cgroup v2 leaf per execution, beside a leaf that
// holds relayd itself:
//
//	BASE/relayd-PID/daemon   relayd
//	BASE/relayd-PID/x-N      one execution each
//
// The subject is born inside its leaf, by its shim (shimproc_linux.go): with
// clone3 and CLONE_INTO_CGROUP where the kernel and the seccomp filter
// allow it, else by the shim moving itself into the leaf for the fork and
// back into the daemon leaf (where relayd and the idle shims live) right
// after it. Either way no
// descendant can be outside it: setsid and double forks do not leave a
// cgroup. A subject with write access to the hierarchy (relayd's own user,
// root) can make child cgroups below its leaf and move processes into them;
// they stay members (rule 6.5). Membership is cgroup.procs of the leaf and
// of every cgroup below it; emptiness is the leaf's cgroup.events
// "populated 0", which covers its descendants; SIGKILL is cgroup.kill, which
// reaches the whole subtree and also catches processes forked while it runs.
// A leaf goes, with the cgroups below it, deepest first, once all of it is
// empty.
type Cgroups struct {
	base    string // where relayd's subtree is made
	home    string // the cgroup relayd was started in
	subtree string // BASE/relayd-PID
	next    atomic.Uint64
	hasKill bool
	// controllers are those of memory and pids that relayd's subtree
	// enables for its leaves (protocol 4.8's memoryBytes and pids).
	controllers map[string]bool
	// viaShim: clone3 is refused here, so a subject is not born in its
	// leaf by clone3: its shim moves itself into the leaf, forks it, and
	// moves back to the daemon leaf.
	viaShim bool
	shims   *Shims

	mu      sync.Mutex
	pending map[*cgScope]bool // leaves with survivors, removed once empty
	kick    chan struct{}     // a leaf was added to pending: sweep at the short interval again
}

// NewCgroups proves that cgroup scopes work under base and sets them up:
// it creates relayd's subtree, moves relayd into its daemon leaf, then
// starts a probe child in a fresh leaf through r, waits for the leaf to
// empty, and removes it. Any failure leaves nothing behind and is returned
// with the reason.
//
// home is the cgroup relayd runs in now, where Release moves it back.
func NewCgroups(ctx context.Context, shims *Shims, base, home string) (*Cgroups, error) {
	c := &Cgroups{base: base, home: home, shims: shims, subtree: filepath.Join(base, "relayd-"+strconv.Itoa(os.Getpid())),
		pending: make(map[*cgScope]bool), kick: make(chan struct{}, 1)}
	if err := faultCgroupSetup(); err != nil {
		return nil, err
	}
	if err := os.Mkdir(c.subtree, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("exec.NewCgroups: cannot create %s: %w", c.subtree, err)
	}
	daemon := filepath.Join(c.subtree, "daemon")
	if err := os.Mkdir(daemon, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		os.Remove(c.subtree)
		return nil, fmt.Errorf("exec.NewCgroups: cannot create %s: %w", daemon, err)
	}
	if err := writeFile(filepath.Join(daemon, "cgroup.procs"), strconv.Itoa(os.Getpid())); err != nil {
		os.Remove(daemon)
		os.Remove(c.subtree)
		return nil, fmt.Errorf("exec.NewCgroups: cannot move relayd into %s: %w", daemon, err)
	}
	// A subtree of the same name is a leftover of an earlier relayd that had
	// our pid (PID 1 of a restarted container): its empty leaves go now.
	c.removeEmptyLeaves()
	_, err := os.Stat(filepath.Join(daemon, "cgroup.kill"))
	c.hasKill = err == nil && !faultNoCgroupKill()
	c.enableControllers()
	err = c.probe()
	if err != nil && refusedClone3(err) {
		c.viaShim = true
		err = c.probe()
	}
	if err != nil {
		c.Release()
		return nil, err
	}
	go c.sweep(ctx)
	return c, nil
}

// probe starts a child that exits at once in a new leaf, through a shim as
// every subject is, and checks that the leaf reports it populated and then
// empty.
func (c *Cgroups) probe() error {
	sc, err := c.newLeaf("probe")
	if err != nil {
		return err
	}
	mode, fds, err := sc.enter()
	if err != nil {
		sc.remove()
		return err
	}
	devnull, err := devNull()
	if err != nil {
		closeFDs(fds)
		sc.remove()
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		exe = "/proc/self/exe"
	}
	run, _, _, err := startShimmed(c.shims, Spec{Path: exe, Argv: []string{"relayd", "--version"}}, mode,
		append([]int{int(devnull.r), int(devnull.w), int(devnull.w)}, fds...))
	closeFDs(fds)
	if err != nil {
		sc.remove()
		return fmt.Errorf("exec.probe: cannot start a process inside a cgroup leaf: %w", err)
	}
	sc.started(run)
	select {
	case <-run.exited:
	case <-run.lost:
		return fmt.Errorf("exec.probe: the probe's shim was lost")
	case <-time.After(10 * time.Second):
		return fmt.Errorf("exec.probe: the probe process did not exit within 10s")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		members, err := sc.Members()
		if err == nil && len(members) == 0 && sc.remove() {
			run.close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("exec.probe: the probe leaf %s did not report populated 0 and go away: %v", sc.dir, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// refusedClone3 says whether a spawn failed because clone3 is refused: a
// seccomp filter's ENOSYS (Docker's default profile) or EPERM (older
// profiles, which did not know the call).
func refusedClone3(err error) bool {
	return errors.Is(err, syscall.ENOSYS) || errors.Is(err, syscall.EPERM)
}

// Release moves relayd back to the cgroup it started in and removes
// everything of its subtree that is empty. Leaves with survivors stay; a
// later relayd removes them once empty (CleanStale).
func (c *Cgroups) Release() {
	_ = writeFile(filepath.Join(c.home, "cgroup.procs"), strconv.Itoa(os.Getpid()))
	c.removeEmptyLeaves()
	_ = os.Remove(filepath.Join(c.subtree, "daemon"))
	_ = os.Remove(c.subtree)
}

// removeEmptyLeaves removes every execution leaf of the subtree that is
// empty, with the cgroups below it (the kernel refuses to remove the others).
func (c *Cgroups) removeEmptyLeaves() {
	entries, _ := os.ReadDir(c.subtree)
	for _, e := range entries {
		if e.IsDir() && e.Name() != "daemon" {
			removeIfEmpty(filepath.Join(c.subtree, e.Name()))
		}
	}
}

// CleanStale removes the empty leaves and subtrees that relayds which are
// no longer running left under base. It returns what it removed.
func CleanStale(base string) []string {
	var removed []string
	entries, _ := os.ReadDir(base)
	for _, e := range entries {
		pidText, ok := strings.CutPrefix(e.Name(), "relayd-")
		if !ok || !e.IsDir() {
			continue
		}
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid == os.Getpid() || processExists(pid) {
			continue
		}
		sub := filepath.Join(base, e.Name())
		leaves, _ := os.ReadDir(sub)
		for _, l := range leaves {
			if l.IsDir() && removeIfEmpty(filepath.Join(sub, l.Name())) {
				removed = append(removed, filepath.Join(sub, l.Name()))
			}
		}
		if os.Remove(sub) == nil {
			removed = append(removed, sub)
		}
	}
	return removed
}

func processExists(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// idleCost: a watcher of kept scopes waits at least idleCost times as long
// as its last pass took, so that it spends at most about 1/idleCost of a
// core (1%) however many it watches (rule 6.11).
const idleCost = 100

// The sweep's timing: every sweepInterval after a leaf is handed to it or
// removed, doubling while nothing goes up to maxSweepInterval, and at least
// idleCost times as long as the last sweep took, so that leaves kept for
// their survivors cost at most about 1% of a core however many there are
// (rule 6.11).
const (
	sweepInterval    = time.Second
	maxSweepInterval = 8 * time.Second
)

// sweep removes leaves whose survivors have all gone.
func (c *Cgroups) sweep(ctx context.Context) {
	wait := sweepInterval
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.kick:
			if wait > sweepInterval {
				wait = sweepInterval
				timer.Reset(wait)
			}
			continue
		case <-timer.C:
		}
		began := time.Now()
		removed := false
		c.mu.Lock()
		for s := range c.pending {
			if s.remove() {
				delete(c.pending, s)
				removed = true
			}
		}
		c.mu.Unlock()
		if removed {
			wait = sweepInterval
		} else {
			wait = max(min(2*wait, maxSweepInterval), idleCost*time.Since(began))
		}
		timer.Reset(wait)
	}
}

// EntersByShim says that clone3 is refused here, so that each subject's
// shim moves itself into the leaf for the fork.
func (c *Cgroups) EntersByShim() bool { return c.viaShim }

// Name is the mechanism's name.
func (c *Cgroups) Name() string { return Cgroup }

// Subtree is relayd's own part of the hierarchy.
func (c *Cgroups) Subtree() string { return c.subtree }

// NewScope creates the leaf of one execution, named after it.
func (c *Cgroups) NewScope(name string) (Scope, error) {
	if err := faultScopeSetup(); err != nil {
		return nil, err
	}
	if name == "" {
		name = "x-" + strconv.FormatUint(c.next.Add(1), 10)
	}
	return c.newLeaf(name)
}

// newLeaf creates a leaf; a name already taken (by a leaf that still holds
// survivors of an earlier relayd) gets a suffix.
func (c *Cgroups) newLeaf(name string) (*cgScope, error) {
	dir := filepath.Join(c.subtree, name)
	for i := 2; ; i++ {
		err := os.Mkdir(dir, 0o755)
		if err == nil {
			return &cgScope{c: c, dir: dir}, nil
		}
		if !errors.Is(err, os.ErrExist) || i > 100 {
			return nil, fmt.Errorf("%w: cannot create cgroup leaf %s: %v", ErrScopeUnavailable, dir, err)
		}
		dir = filepath.Join(c.subtree, name+"."+strconv.Itoa(i))
	}
}

type cgScope struct {
	c       *Cgroups
	dir     string
	run     *shimRun
	removed atomic.Bool // the leaf was removed, which the kernel allows only when it is empty
	rm      sync.Mutex  // remove's: one at a time, so that final is read before the removal
	// final is what the leaf's memory controller counted, read just
	// before the leaf was removed (empty, so nothing more can count):
	// the reply's usage and cause are made after the scope is closed.
	final atomic.Pointer[leafCounters]
}

// leafCounters are a leaf's memory.events oom_kill and memory.peak.
type leafCounters struct {
	oomKills, peak      uint64
	hasOOMKill, hasPeak bool
}

// counters reads the leaf's memory counters: its own until it is
// removed, then those read just before.
func (s *cgScope) counters() leafCounters {
	if s.removed.Load() {
		if f := s.final.Load(); f != nil {
			return *f
		}
		return leafCounters{}
	}
	return readLeafCounters(s.dir)
}

// readLeafCounters reads oom_kill of dir's memory.events (which counts the
// cgroups below it too) and its memory.peak.
func readLeafCounters(dir string) leafCounters {
	var c leafCounters
	if b, err := os.ReadFile(filepath.Join(dir, "memory.events")); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, found := strings.CutPrefix(line, "oom_kill "); found {
				n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
				c.oomKills, c.hasOOMKill = n, err == nil
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "memory.peak")); err == nil {
		n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		c.peak, c.hasPeak = n, err == nil
	}
	return c
}

func (s *cgScope) Mechanism() string { return Cgroup }

// enter opens what the shim needs for the subject to be born in the leaf:
// the leaf itself for clone3, or the leaf's cgroup.procs and the daemon
// leaf's for the shim to move into the leaf and back.
func (s *cgScope) enter() (int, []int, error) {
	if s.c.viaShim {
		in, err := unix.Open(filepath.Join(s.dir, "cgroup.procs"), unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return 0, nil, fmt.Errorf("cannot open %s/cgroup.procs: %w", s.dir, err)
		}
		back, err := unix.Open(filepath.Join(s.c.subtree, "daemon", "cgroup.procs"), unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			unix.Close(in)
			return 0, nil, fmt.Errorf("cannot open %s/daemon/cgroup.procs: %w", s.c.subtree, err)
		}
		return cgroupMigrate, []int{in, back}, nil
	}
	fd, err := unix.Open(s.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, nil, fmt.Errorf("cannot open cgroup leaf %s: %w", s.dir, err)
	}
	return cgroupClone3, []int{fd}, nil
}

func (s *cgScope) started(run *shimRun) { s.run = run }

// Members is every process of the leaf and of the cgroups below it, and of
// the shim's subtree, which holds what a root subject moved out of the
// leaf. For the leaf, an empty list counts only when the leaf's cgroup.events also says
// "populated 0" (which covers the cgroups below it: a process that moves
// between two of them while they are read is missed by the list, never by
// this); any read failure is no evidence.
func (s *cgScope) Members() ([]Member, error) {
	inLeaf, err := s.leafMembers()
	if err != nil || s.run == nil {
		return inLeaf, err
	}
	// The shim's subtree too: a root subject can move a process out of the
	// leaf (into another cgroup of the hierarchy), never out of the subtree.
	below, err := s.run.members()
	if err != nil {
		return nil, err
	}
	if len(below) == 0 {
		return inLeaf, nil
	}
	seen := make(map[int]bool, len(below))
	for _, m := range below {
		seen[m.PID] = true
	}
	for _, m := range inLeaf {
		if !seen[m.PID] {
			below = append(below, m)
		}
	}
	return below, nil
}

// leafMembers reads the members of the leaf and of every cgroup below it.
func (s *cgScope) leafMembers() ([]Member, error) {
	if s.removed.Load() {
		return nil, nil
	}
	if s.run != nil && s.run.subtreeEmpty() {
		// Once the subject has ended and its shim has no child left, the
		// leaf is of no more use, and an rmdir the kernel allows is its
		// word that no process is in the leaf or below it (it refuses a
		// populated cgroup): one syscall where cgroup.events took three,
		// and the removal Close would do next. A leaf it refuses is read
		// as below. While survivors live (a settlement's looks) it is not
		// tried: the shim's word is what makes it worth trying.
		if err := faultCgroupRead(); err != nil {
			return nil, err
		}
		if s.remove() {
			return nil, nil
		}
	}
	// "populated 0" is the kernel's word that no process is in the leaf or
	// below it: one read, where listing them is a read per cgroup and a
	// listing of each (a tenth of relayd's CPU per execute in cgroup mode).
	// It may lag an exit the other way only (populated 1 a moment after
	// the last process was reaped), which the listing below settles.
	if busy, err := s.populated(); err == nil && !busy {
		return nil, nil
	}
	pids, err := s.procs()
	if err != nil {
		if s.removed.Load() { // removed while we read: it was empty
			return nil, nil
		}
		return nil, err
	}
	if len(pids) == 0 {
		populated, err := s.populated()
		if err != nil {
			return nil, err
		}
		if populated {
			return nil, fmt.Errorf("exec: cgroup %s is populated but lists no process yet", s.dir)
		}
		return nil, nil
	}
	out := make([]Member, len(pids))
	for i, pid := range pids {
		out[i] = Member{PID: pid}
	}
	return out, nil
}

// procs lists the processes of the leaf and of every cgroup below it. A
// cgroup below the leaf that goes away while it is read is skipped: it was
// empty.
func (s *cgScope) procs() ([]int, error) {
	if err := faultCgroupRead(); err != nil {
		return nil, err
	}
	var pids []int
	err := walkCgroups(s.dir, func(dir string) error {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			if dir != s.dir && errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return fmt.Errorf("exec: reading %s/cgroup.procs: %w", dir, err)
		}
		for _, f := range bytes.Fields(b) {
			pid, err := strconv.Atoi(string(f))
			if err != nil {
				return fmt.Errorf("exec: %s/cgroup.procs holds %q", dir, f)
			}
			pids = append(pids, pid)
		}
		return nil
	})
	return pids, err
}

// walkCgroups calls fn for dir and then for every cgroup below it, each
// parent before its children. A cgroup below dir that goes away while it is
// listed is skipped.
func walkCgroups(dir string, fn func(dir string) error) error {
	queue := []string{dir}
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		if err := fn(d); err != nil {
			return err
		}
		entries, err := os.ReadDir(d)
		if err != nil {
			if d != dir && errors.Is(err, os.ErrNotExist) {
				continue
			}
			return fmt.Errorf("exec: listing cgroup %s: %w", d, err)
		}
		for _, e := range entries {
			if e.IsDir() {
				queue = append(queue, filepath.Join(d, e.Name()))
			}
		}
	}
	return nil
}

func (s *cgScope) populated() (bool, error) {
	if err := faultCgroupRead(); err != nil {
		return false, err
	}
	return populated(s.dir)
}

// populated reads "populated" of dir's cgroup.events: whether any process
// is in dir or in a cgroup below it.
//
// It is read on every execute's end: one open, read and close into a
// buffer on the stack, not os.ReadFile's stat, poller registration and
// allocations (a third of the read's cost).
func populated(dir string) (bool, error) {
	fd, err := unix.Open(dir+"/cgroup.events", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, fmt.Errorf("exec: reading %s/cgroup.events: %w", dir, err)
	}
	var buf [256]byte // "populated N\nfrozen N\n"
	n, err := unix.Read(fd, buf[:])
	unix.Close(fd)
	if err != nil {
		return false, fmt.Errorf("exec: reading %s/cgroup.events: %w", dir, err)
	}
	for b := buf[:max(n, 0)]; len(b) > 0; {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if v, ok := bytes.CutPrefix(line, []byte("populated ")); ok {
			return string(v) != "0", nil
		}
	}
	return false, fmt.Errorf("exec: %s/cgroup.events has no populated line", dir)
}

// removeIfEmpty removes the cgroup dir and every cgroup below it, deepest
// first, when no process is in any of them (dir's cgroup.events says
// populated 0), and reports whether dir is gone. A populated tree is left
// whole: the empty cgroups a survivor made below its leaf may still be its
// to use.
func removeIfEmpty(dir string) bool {
	err := unix.Rmdir(dir) // os.Remove would try unlink first
	if err == nil || err == unix.ENOENT {
		return true
	}
	if busy, err := populated(dir); err != nil || busy {
		return false
	}
	var dirs []string
	_ = walkCgroups(dir, func(d string) error {
		dirs = append(dirs, d)
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- { // every cgroup after its parent: reversed, children first
		_ = os.Remove(dirs[i])
	}
	_, err = os.Stat(dir)
	return errors.Is(err, os.ErrNotExist)
}

// Signal sends sig to every process in the leaf and in the cgroups below it,
// and to every process of the shim's subtree that is not there (what a root
// subject moved out of the leaf), each once: many programs take a second
// SIGTERM as "quit now, skip the clean-up" (rule 6.13).
// SIGKILL goes through cgroup.kill where the kernel has it, which reaches the
// whole subtree and also catches a fork in flight; without it the leaf is
// frozen first (which freezes the cgroups below it too), so nothing forks
// while each process is killed, and thawed after. Other signals go to each listed process
// through a pidfd opened before a second read of cgroup.procs confirms it is
// still a member, so a pid reused outside the leaf is never signalled.
func (s *cgScope) Signal(sig syscall.Signal) error {
	signalled, err := s.signalLeaf(sig)
	if s.run == nil {
		return err
	}
	if sig == syscall.SIGKILL {
		// SIGKILL twice is SIGKILL once: the whole subtree, in one request.
		if serr := s.run.signal(sig); err == nil && serr != nil {
			err = serr
		}
		return err
	}
	// The shim's subtree, less what the leaf's signalling reached: each by
	// pid and start time, through the shim. A process the leaf signalled
	// that died, and whose pid a process of the subtree took in between,
	// is skipped: it takes the SIGKILL at the grace's end. The request
	// goes even when nothing is left to signal (an empty list, not nil,
	// which would be the whole subtree): a shim whose relayd dies during
	// the grace knows that SIGTERM went out, and sends none again.
	below, serr := s.run.members()
	if serr != nil {
		if err == nil {
			err = serr
		}
		return err
	}
	rest := make([]Member, 0, len(below))
	for _, m := range below {
		if !signalled[m.PID] {
			rest = append(rest, m)
		}
	}
	if serr := s.run.signalSome(sig, rest); err == nil && serr != nil {
		err = serr
	}
	return err
}

// signalLeaf signals every process of the leaf and of the cgroups below it,
// and returns the pids it signalled.
func (s *cgScope) signalLeaf(sig syscall.Signal) (map[int]bool, error) {
	if s.removed.Load() {
		return nil, nil // the kernel removed it empty: nothing can be in it
	}
	if sig == syscall.SIGKILL {
		if err := faultCgroupRead(); err != nil {
			return nil, err
		}
		if s.c.hasKill {
			if err := writeFile(filepath.Join(s.dir, "cgroup.kill"), "1"); err != nil {
				return nil, fmt.Errorf("exec: cgroup.kill %s: %w", s.dir, err)
			}
			// cgroup.kill signals each process's main thread; one whose main
			// thread has exited while others run does not take it, so every
			// listed process also gets SIGKILL through a pidfd, which goes
			// to the whole thread group.
			return s.signalEach(syscall.SIGKILL)
		}
		return s.freezeAndKill()
	}
	return s.signalEach(sig)
}

// freezeAndKill is SIGKILL without cgroup.kill: freeze the leaf (waiting a
// little for "frozen 1"), SIGKILL every listed process, thaw. A fatal signal
// ends a frozen process once it is thawed.
func (s *cgScope) freezeAndKill() (map[int]bool, error) {
	freeze := filepath.Join(s.dir, "cgroup.freeze")
	frozen := writeFile(freeze, "1") == nil
	if frozen {
		defer writeFile(freeze, "0")
		deadline := time.Now().Add(50 * time.Millisecond)
		for time.Now().Before(deadline) {
			if b, err := os.ReadFile(filepath.Join(s.dir, "cgroup.events")); err != nil || strings.Contains(string(b), "frozen 1") {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	return s.signalEach(syscall.SIGKILL)
}

// signalEach signals every listed process of the leaf and of the cgroups
// below it once, and returns the pids it signalled.
func (s *cgScope) signalEach(sig syscall.Signal) (map[int]bool, error) {
	pids, err := s.procs()
	if err != nil {
		return nil, err
	}
	fds := make(map[int]pidfd, len(pids))
	defer func() {
		for _, fd := range fds {
			fd.close()
		}
	}()
	for _, pid := range pids {
		if fd, err := openPidfd(pid); err == nil {
			fds[pid] = fd
		}
	}
	again, err := s.procs()
	if err != nil {
		return nil, err
	}
	var first error
	signalled := make(map[int]bool, len(again))
	for _, pid := range again {
		fd, ok := fds[pid]
		if !ok || signalled[pid] {
			// Born after the first read (the next look signals it), or
			// listed twice, moved between two cgroups of the leaf while they
			// were read: once is enough.
			continue
		}
		signalled[pid] = true
		if err := fd.signal(sig); err != nil && first == nil {
			first = fmt.Errorf("exec: signal %d in %s: %w", pid, s.dir, err)
		}
	}
	return signalled, first
}

// LeaveAlone hands the leaf to the sweep, which removes it once its
// survivors are gone. The leaf is marked, so that a relayd started after
// this one dies leaves the survivors alone too (leftover_cgroup_linux.go).
func (s *cgScope) LeaveAlone() {
	if s.run != nil {
		s.run.leaveAlone()
	}
	markLeftAlone(s.dir)
	s.keep()
}

// Close removes the leaf when it is empty; a leaf with survivors is
// removed later, once they are gone.
func (s *cgScope) Close() {
	if s.run != nil {
		s.run.close()
	}
	s.keep()
}

// keep removes the leaf if it is empty, else hands it to the sweep.
func (s *cgScope) keep() {
	if !s.remove() {
		s.c.mu.Lock()
		s.c.pending[s] = true
		s.c.mu.Unlock()
		select {
		case s.c.kick <- struct{}{}:
		default: // a kick is already waiting
		}
	}
}

// remove removes the leaf, with the cgroups below it, if it is empty and
// reports whether it is gone.
func (s *cgScope) remove() bool {
	s.rm.Lock()
	defer s.rm.Unlock()
	if s.removed.Load() {
		return true
	}
	if s.c.controllers["memory"] {
		// Read while the leaf is there; if it is empty (the removal below
		// succeeds) nothing counts after this.
		f := readLeafCounters(s.dir)
		s.final.Store(&f)
	}
	if removeIfEmpty(s.dir) {
		s.removed.Store(true)
		return true
	}
	return false
}

func writeFile(path, data string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(data)
	cerr := f.Close()
	if werr != nil {
		return werr
	}
	return cerr
}

// enableControllers enables the memory and pids controllers for relayd's
// leaves where the hierarchy offers them to relayd's subtree (its parent
// enabled them), each on its own: a limit needs its controller.
func (c *Cgroups) enableControllers() {
	c.controllers = map[string]bool{}
	offered, _ := os.ReadFile(filepath.Join(c.subtree, "cgroup.controllers"))
	for _, ctl := range []string{"memory", "pids"} {
		if !slices.Contains(strings.Fields(string(offered)), ctl) {
			continue
		}
		if writeFile(filepath.Join(c.subtree, "cgroup.subtree_control"), "+"+ctl) == nil {
			c.controllers[ctl] = true
		}
	}
}

// CanLimit says why the limit name (protocol 4.8: memoryBytes, pids)
// cannot be set on a leaf, or nil when it can.
func (c *Cgroups) CanLimit(name string) error {
	ctl := map[string]string{"memoryBytes": "memory", "pids": "pids"}[name]
	if ctl == "" {
		return fmt.Errorf("%s is not a cgroup limit", name)
	}
	if !c.controllers[ctl] {
		return fmt.Errorf("%w: the %s controller is not enabled for relayd's cgroup v2 subtree %s (the cgroup v2 hierarchy does not offer it to relayd here; on a hybrid host it may be on cgroup v1)", ErrNoController, ctl, c.subtree)
	}
	return nil
}

// ErrNoController: a limit of protocol 4.8 needs a cgroup controller the
// scope does not have.
var ErrNoController = errors.New("exec: no cgroup controller for this limit")

// SetCgroupLimits sets memoryBytes (memory.max, with memory.swap.max 0
// where it exists) and pids (pids.max) on scope's cgroup leaf before its
// subject starts; 0 leaves one unset. A scope without a leaf (the
// process-group mechanism) has no controller.
func SetCgroupLimits(scope Scope, memoryBytes, pids uint64) error {
	if memoryBytes == 0 && pids == 0 {
		return nil
	}
	s, ok := scope.(*cgScope)
	if !ok {
		return fmt.Errorf("%w: the %s mechanism has no cgroup", ErrNoController, scope.Mechanism())
	}
	if memoryBytes > 0 {
		if err := s.c.CanLimit("memoryBytes"); err != nil {
			return err
		}
		if err := writeFile(filepath.Join(s.dir, "memory.max"), strconv.FormatUint(memoryBytes, 10)); err != nil {
			return fmt.Errorf("exec: memory.max of %s: %w", s.dir, err)
		}
		_ = writeFile(filepath.Join(s.dir, "memory.swap.max"), "0")
	}
	if pids > 0 {
		if err := s.c.CanLimit("pids"); err != nil {
			return err
		}
		if err := writeFile(filepath.Join(s.dir, "pids.max"), strconv.FormatUint(pids, 10)); err != nil {
			return fmt.Errorf("exec: pids.max of %s: %w", s.dir, err)
		}
	}
	return nil
}

// ScopeOOMKills is the oom_kill count of scope's leaf (memory.events,
// which counts the cgroups below it too); ok is false without a memory
// controller on the leaf, or without a leaf. A removed leaf's is the
// count read just before its removal.
func ScopeOOMKills(scope Scope) (n uint64, ok bool) {
	s, isCg := scope.(*cgScope)
	if !isCg || !s.c.controllers["memory"] {
		return 0, false
	}
	c := s.counters()
	return c.oomKills, c.hasOOMKill
}

// ScopeMemoryPeak is the memory.peak of scope's leaf in bytes: the most
// its processes held together (page cache included); ok is false without
// a memory controller on the leaf, or on a kernel before 5.19 (no such
// file). A removed leaf's is the figure read just before its removal.
func ScopeMemoryPeak(scope Scope) (n uint64, ok bool) {
	s, isCg := scope.(*cgScope)
	if !isCg || !s.c.controllers["memory"] {
		return 0, false
	}
	c := s.counters()
	return c.peak, c.hasPeak
}
