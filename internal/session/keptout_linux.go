package session

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/relayd/relayd/internal/exec"
	"github.com/relayd/relayd/internal/protocol"
)

// keptOut is the part of a left scope that a trial boundary settles when
// it keeps some of the scope's processes (protocol 4.6): every member
// outside the kept processes' subtrees. It is a teardown.Scope, so that
// teardown.Stop settles it as any scope (SIGTERM, grace, SIGKILL, two
// empty looks); each process is signalled on its own, through a pidfd
// opened once its start time named it, and a look finds it only while
// that pidfd says it runs. Its evidence is then that every process it
// signalled is gone and that a complete look of the scope finds nothing
// outside the kept subtrees.
type keptOut struct {
	scope exec.Scope

	mu      sync.Mutex
	kept    map[int]uint64  // kept pids, with their descendants as found → start ticks
	targets map[int]*target // what is settled, by pid
	// spare are left alone without their descendants: a session's shell,
	// whose new children are its command's (shell.go).
	spare map[int]uint64

	mismatched []int // pids of keep found here with another start time: not kept
}

type target struct {
	start uint64
	fd    int // pidfd; -1 once it is known gone
}

// maxDepth bounds the walk up a member's parents to a kept process.
const maxDepth = 64

// newKeptOut takes members (a first look at scope, complete when looked
// is true) and the processes to keep: those that are members and started
// when keep says (rule 6.13: a pid is acted on only with its start time),
// and the members that descend from them, are kept; every other member is
// a target, a process that took a kept pid after its owner ended
// included. When the look failed, every pid of keep counts as possibly a
// member. The pids of keep that are here with another start time are
// listed in mismatched.
func newKeptOut(scope exec.Scope, members []exec.Member, looked bool, keep []protocol.Kept) *keptOut {
	k := &keptOut{scope: scope, kept: map[int]uint64{}, targets: map[int]*target{}}
	inScope := map[int]bool{}
	for _, m := range members {
		inScope[m.PID] = true
	}
	for _, kp := range keep {
		if looked && !inScope[kp.PID] {
			continue
		}
		st, ok := readStat(kp.PID)
		if !ok {
			continue
		}
		if ms, known := startMs(st.startTicks); known && ms == kp.Start {
			k.kept[kp.PID] = st.startTicks
		} else {
			k.mismatched = append(k.mismatched, kp.PID)
		}
	}
	k.mu.Lock()
	k.sort(members)
	k.mu.Unlock()
	return k
}

// keeps reports whether the scope holds a kept process.
func (k *keptOut) keeps() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.kept) > 0
}

// sort makes each member of a look kept (a kept pid, or a descendant of
// one) or a target, and returns the targets still running. k.mu is held.
func (k *keptOut) sort(members []exec.Member) []exec.Member {
	var out []exec.Member
	for _, m := range members {
		if t, ok := k.targets[m.PID]; ok {
			if k.running(t) {
				out = append(out, exec.Member{PID: m.PID, Start: t.start})
			}
			continue
		}
		st, ok := readStat(m.PID)
		if !ok {
			continue // gone since the look; the next look tells
		}
		if start, ok := k.spare[m.PID]; ok && start == st.startTicks {
			continue
		}
		if k.isKept(m.PID, st) {
			continue
		}
		if t := k.open(m.PID, st.startTicks); t != nil {
			out = append(out, exec.Member{PID: m.PID, Start: t.start})
		}
	}
	// A target that a look missed is still one until its pidfd says it is gone.
	for pid, t := range k.targets {
		if !slices.ContainsFunc(out, func(m exec.Member) bool { return m.PID == pid }) && k.running(t) {
			out = append(out, exec.Member{PID: pid, Start: t.start})
		}
	}
	return out
}

// isKept reports whether pid (whose stat is st) is kept or descends from a
// kept process, and records a descendant as kept.
func (k *keptOut) isKept(pid int, st procInfo) bool {
	if start, ok := k.kept[pid]; ok && start == st.startTicks {
		return true
	}
	var chain []int
	cur := st
	for depth := 0; depth < maxDepth && cur.ppid > 1; depth++ {
		parent := cur.ppid
		pst, ok := readStat(parent)
		if !ok {
			return false
		}
		if start, ok := k.spare[parent]; ok && start == pst.startTicks {
			return false
		}
		if start, ok := k.kept[parent]; ok && start == pst.startTicks {
			k.kept[pid] = st.startTicks
			for _, c := range chain {
				if cst, ok := readStat(c); ok {
					k.kept[c] = cst.startTicks
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
func (k *keptOut) open(pid int, start uint64) *target {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil // gone
	}
	if st, ok := readStat(pid); !ok || st.startTicks != start {
		unix.Close(fd)
		return nil // gone, and the pid reused
	}
	t := &target{start: start, fd: fd}
	k.targets[pid] = t
	return t
}

// running reports whether t's process still runs: its pidfd is not yet
// readable (a pidfd becomes readable when its process exits).
func (k *keptOut) running(t *target) bool {
	if t.fd < 0 {
		return false
	}
	fds := []unix.PollFd{{Fd: int32(t.fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	if err != nil && !errors.Is(err, unix.EINTR) {
		return true // no evidence: it counts as running
	}
	if n > 0 {
		unix.Close(t.fd)
		t.fd = -1
		return false
	}
	return true
}

// Members is one complete look of the scope, less the kept subtrees, plus
// every target still running.
func (k *keptOut) Members() ([]exec.Member, error) {
	members, err := k.scope.Members()
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.sort(members), nil
}

// Signal signals every target still running, after a look for new ones.
func (k *keptOut) Signal(sig syscall.Signal) error {
	members, err := k.Members()
	if err != nil {
		k.mu.Lock()
		members = nil
		for pid, t := range k.targets {
			members = append(members, exec.Member{PID: pid, Start: t.start})
		}
		k.mu.Unlock()
	}
	if serr := k.SignalMembers(members, sig); serr != nil {
		return serr
	}
	return err
}

// SignalMembers signals the targets among members, each through its pidfd.
func (k *keptOut) SignalMembers(members []exec.Member, sig syscall.Signal) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	var first error
	for _, m := range members {
		t, ok := k.targets[m.PID]
		if !ok || t.fd < 0 {
			continue
		}
		if err := unix.PidfdSendSignal(t.fd, sig, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) && first == nil {
			first = fmt.Errorf("session: signal %d: %w", m.PID, err)
		}
	}
	return first
}

// settled lists the pids of every target.
func (k *keptOut) settled() []int {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]int, 0, len(k.targets))
	for pid := range k.targets {
		out = append(out, pid)
	}
	return out
}

func (k *keptOut) close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, t := range k.targets {
		if t.fd >= 0 {
			unix.Close(t.fd)
			t.fd = -1
		}
	}
}

// readStat reads /proc/PID/stat alone: ppid and start time.
func readStat(pid int) (procInfo, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procInfo{}, false
	}
	return parseProcStat(b)
}
