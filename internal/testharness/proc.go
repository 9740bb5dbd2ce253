package testharness

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Stat is what tests read of /proc/PID/stat.
type Stat struct {
	State byte          // R, S, D, Z, T, ...
	PPID  int           // parent
	PGID  int           // process group
	CPU   time.Duration // user and system time of all its threads, not its children
}

// ReadStat reads /proc/PID/stat. The command name, field 2, may hold spaces
// and parentheses, so the fields are read after its last ')'.
func ReadStat(pid int) (Stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return Stat{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 13 {
		return Stat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgid, err2 := strconv.Atoi(f[2])
	utime, err3 := strconv.ParseInt(f[11], 10, 64)
	stime, err4 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
		return Stat{}, fmt.Errorf("/proc/%d/stat: a field is not a number", pid)
	}
	// Clock ticks are 10 ms (USER_HZ 100) on every Linux this runs on.
	return Stat{State: f[0][0], PPID: ppid, PGID: pgid, CPU: time.Duration(utime+stime) * 10 * time.Millisecond}, nil
}

// Alive is true while pid exists and is not a zombie.
func Alive(pid int) bool {
	s, err := ReadStat(pid)
	return err == nil && s.State != 'Z' && s.State != 'X'
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
