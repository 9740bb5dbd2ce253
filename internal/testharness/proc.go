package testharness

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/relayd/relayd/internal/exec"
)

// Stat is what tests read of /proc/PID/stat.
type Stat struct {
	State byte          // R, S, D, Z, T, ...
	PPID  int           // parent
	PGID  int           // process group
	SID   int           // session
	CPU   time.Duration // user and system time of all its threads, not its children
	Start uint64        // start time, clock ticks since boot (field 22)
}

// Dead is true for a zombie or a process being reaped.
func (s Stat) Dead() bool { return s.State == 'Z' || s.State == 'X' }

// ReadStat reads /proc/PID/stat (exec.ReadStat, relayd's one reader of it).
func ReadStat(pid int) (Stat, error) {
	st, err := exec.ReadStat(pid)
	if err != nil {
		return Stat{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return Stat{State: st.State, PPID: st.PPID, PGID: st.PGID, SID: st.SID,
		CPU: time.Duration(st.UTime+st.STime) * time.Second / exec.ClockTicks, Start: st.Start}, nil
}

// Alive is true while pid exists and is not a zombie.
func Alive(pid int) bool {
	s, err := ReadStat(pid)
	return err == nil && !s.Dead()
}

// Children lists the processes whose parent is ppid.
func Children(ppid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if s, err := ReadStat(pid); err == nil && s.PPID == ppid {
			out = append(out, pid)
		}
	}
	return out
}

// Cmdline is a process's command line, its arguments joined by spaces.
func Cmdline(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

// ReadPids reads the pids (whole numbers above 1, separated by white space)
// a subject wrote to path; nil when there is no such file.
func ReadPids(path string) []int {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []int
	for _, w := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(w); err == nil && pid > 1 {
			out = append(out, pid)
		}
	}
	return out
}

// Leftovers kills and lists ("PID argv") the live children of the process
// ppid (a test process): every process a test starts descends from it, and
// orphans come to it as a subreaper, so what a test left behind shows up
// here. It polls for up to 2 s, since they may be dying already. Each is
// pinned with a pidfd and checked to be still ppid's child before it is
// signalled. It reaps nothing: the caller's reaper does.
func Leftovers(ppid int) []string {
	var out []string
	var pids []int
	deadline := time.Now().Add(2 * time.Second)
	for {
		out, pids = out[:0], pids[:0]
		for _, pid := range Children(ppid) {
			if s, err := ReadStat(pid); err == nil && !s.Dead() {
				out = append(out, fmt.Sprintf("%d %q", pid, Cmdline(pid)))
				pids = append(pids, pid)
			}
		}
		if len(out) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, pid := range pids {
		_ = exec.SignalPinned(pid, unix.SIGKILL, func() bool {
			s, err := ReadStat(pid)
			return err == nil && s.PPID == ppid
		})
	}
	return out
}

// StartedBy reports whether pid is alive and started no later than t,
// within /proc's 10 ms clock ticks. A pid a subject wrote into a file at
// t names that process only if so: pids wrap (pid_max is 32768 here), and
// a process that took the pid since started after the write. Tests kill
// a pid read from a file only when this holds.
func StartedBy(pid int, t time.Time) bool {
	s, err := ReadStat(pid)
	if err != nil || s.Dead() {
		return false
	}
	var now unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &now) != nil {
		return false
	}
	age := time.Duration(now.Nano()) - time.Duration(s.Start)*time.Second/exec.ClockTicks
	return age+20*time.Millisecond >= time.Since(t)
}

// KillFromFile SIGKILLs each pid written in path that StartedBy says is
// the process that was written there (pinned by a pidfd while checked),
// and never a process that took a pid since.
func KillFromFile(path string) {
	fi, err := os.Stat(path)
	if err != nil {
		return
	}
	for _, pid := range ReadPids(path) {
		if !StartedBy(pid, fi.ModTime()) {
			continue
		}
		start := uint64(0)
		if s, err := ReadStat(pid); err == nil {
			start = s.Start
		}
		_ = exec.SignalPinned(pid, unix.SIGKILL, func() bool {
			s, err := ReadStat(pid)
			return err == nil && s.Start == start
		})
	}
}

// selfStart is this test process's start, in clock ticks since boot.
var selfStart = func() uint64 {
	s, err := ReadStat(os.Getpid())
	if err != nil {
		return 0
	}
	return s.Start
}()

// Ours reports whether pid is alive and started after this test process
// did: the most a pid learned during a test can be checked against. A
// process older than the test run (a daemon of the machine, the test's
// own parent) is never ours, whatever pid it holds.
func Ours(pid int) bool {
	if pid <= 1 || selfStart == 0 {
		return false
	}
	s, err := ReadStat(pid)
	return err == nil && !s.Dead() && s.Start >= selfStart
}

// KillOurs SIGKILLs pid if Ours says so, pinned by a pidfd while its
// start time is checked again: a test's cleanup of a process it started.
func KillOurs(pid int) {
	if !Ours(pid) {
		return
	}
	s, err := ReadStat(pid)
	if err != nil {
		return
	}
	_ = exec.SignalPinned(pid, unix.SIGKILL, func() bool {
		now, err := ReadStat(pid)
		return err == nil && now.Start == s.Start
	})
}
