package session

import (
	"errors"
	"io/fs"
	"slices"
	"syscall"
	"time"

	"github.com/relayd/relayd/internal/exec"
	"github.com/relayd/relayd/internal/protocol"
)

// This file turns the members of kept scopes into the survivors a reply
// lists (sections 4.2, 4.3 and 4.6): what a harness needs to judge each
// one (its uid, the TCP ports it listens on, its start time and session)
// at a cost bounded by the number listed, not by what they do.

// Re-reading an empty command line: a process read between the kernel's
// switch to a new program and the setup of its arguments shows none for
// a moment, so it is read again a few times, a millisecond apart, for all
// such survivors at once (a zombie, whose command line never comes back,
// is not waited for).
const (
	argvRetries   = 3
	argvRetryWait = time.Millisecond
)

// describe turns members into survivors, in pid order, leaving out the
// subject itself and any pid listed twice. It lists at most
// protocol.MaxSurvivors and counts the rest; only those listed are read
// (exec.Argv reads at most 4 KiB of a command line), and /proc/net/tcp*
// is read once for all of them.
func describe(members []exec.Member, subject int) (list []protocol.Survivor, omitted int) {
	pids := make([]int, 0, len(members))
	for _, m := range members {
		if m.PID != subject {
			pids = append(pids, m.PID)
		}
	}
	slices.Sort(pids)
	pids = slices.Compact(pids)
	if len(pids) > protocol.MaxSurvivors {
		omitted = len(pids) - protocol.MaxSurvivors
		pids = pids[:protocol.MaxSurvivors]
	}
	list = make([]protocol.Survivor, 0, len(pids))
	if len(pids) == 0 {
		return list, omitted
	}
	sv := newSurvey()
	var again []int // indices of live survivors whose command line came back empty
	for _, pid := range pids {
		s, retry := sv.describeOne(pid)
		if retry {
			again = append(again, len(list))
		}
		list = append(list, s)
	}
	sv.portsDenied(list)
	for round := 0; round < argvRetries && len(again) > 0; round++ {
		time.Sleep(argvRetryWait)
		still := again[:0]
		for _, i := range again {
			if argv := exec.Argv(list[i].PID); argv != nil {
				list[i].Argv, list[i].ArgvUnavailable = argv, false
			} else {
				still = append(still, i)
			}
		}
		again = still
	}
	return list, omitted
}

// describeOne reads one survivor. A command line that cannot be read is
// never reported as a silent []: the survivor says ArgvUnavailable and
// carries the kernel's name of the process (comm) instead; retry reports
// whether the process lives on and may show its command line in a moment.
func (sv *survey) describeOne(pid int) (s protocol.Survivor, retry bool) {
	s = protocol.Survivor{PID: pid, UID: -1, Argv: exec.Argv(pid), Listens: []int{}}
	info, ok := readProcInfo(pid)
	if ok {
		s.UID, s.Session = info.uid, info.SID
		s.Start, _ = startMs(info.Start)
		if len(sv.listening) > 0 {
			s.Listens = sv.ports(pid)
		}
	}
	if s.Argv == nil {
		s.ArgvUnavailable = true
		s.Argv = []string{}
		if ok && info.Comm != "" {
			s.Argv = []string{info.Comm}
		}
		retry = ok && info.State != 'Z' && info.State != 'X'
	}
	return s, retry
}

// survey is what one describe reads once for all survivors: the
// listening TCP sockets of relayd's network namespace, and the survivors
// whose descriptors relayd's own rights could not read.
type survey struct {
	listening map[uint64]int // socket inode → local port, LISTEN rows only
	denied    []int          // pids whose /proc/PID/fd refused relayd's own rights
}

func newSurvey() *survey {
	sv := &survey{listening: map[uint64]int{}}
	readListening(sv.listening)
	return sv
}

// ports returns the local ports of the listening sockets among pid's
// descriptors, ascending, each once. A process whose descriptors relayd
// may not read with its own rights is noted for portsDenied.
func (sv *survey) ports(pid int) []int {
	inodes, err := socketInodes(pid, maxDescriptors)
	if errors.Is(err, fs.ErrPermission) {
		sv.denied = append(sv.denied, pid)
	}
	return sv.portsOf(inodes)
}

func (sv *survey) portsOf(inodes []uint64) []int {
	ports := []int{}
	for _, ino := range inodes {
		if p, ok := sv.listening[ino]; ok {
			ports = append(ports, p)
		}
	}
	slices.Sort(ports)
	return slices.Compact(ports)
}

// portsDenied fills in the listens of the survivors whose descriptors
// relayd's own rights could not read. /proc/PID/fd of another user's
// process needs CAP_SYS_PTRACE, which Docker does not grant, even to
// root; the kernel checks it with the reader's fsuid and fsgid (ptrace's
// PTRACE_MODE_READ_FSCREDS). So they are read again as their own user:
// on a locked thread of its own whose fsuid and fsgid are the process's
// uid and gid (asUser; the thread dies with its goroutine), one thread
// per user among them. A process whose real, effective and saved ids
// differ (a set-user-ID program) matches no single fsuid and keeps [].
func (sv *survey) portsDenied(list []protocol.Survivor) {
	if len(sv.denied) == 0 {
		return
	}
	at := make(map[int]int, len(sv.denied)) // pid → index in list
	for i := range list {
		at[list[i].PID] = i
	}
	byUser := map[[2]uint32][]int{}
	var users [][2]uint32
	for _, pid := range sv.denied {
		uid, gid, ok := readIDs(pid)
		if !ok {
			continue
		}
		k := [2]uint32{uid, gid}
		if _, seen := byUser[k]; !seen {
			users = append(users, k)
		}
		byUser[k] = append(byUser[k], pid)
	}
	for _, k := range users {
		pids := byUser[k]
		inodes := make([][]uint64, len(pids))
		err := asUser(&syscall.Credential{Uid: k[0], Gid: k[1]}, func() error {
			for i, pid := range pids {
				inodes[i], _ = socketInodes(pid, maxDescriptors)
			}
			return nil
		})
		if err != nil {
			continue // relayd cannot take that fsuid (it is not root): those keep []
		}
		for i, pid := range pids {
			list[at[pid]].Listens = sv.portsOf(inodes[i])
		}
	}
}
