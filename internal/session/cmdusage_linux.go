package session

import (
	"bytes"
	"os"
	"strconv"
	"time"

	"github.com/relayd/relayd/internal/exec"
	"github.com/relayd/relayd/internal/protocol"
)

// What a session's command used (protocol 4.8 on a session's executed).
// A command's processes are the shell's children: the shell reaps them,
// so the kernel accounts their CPU time and storage I/O to the shell
// (/proc/PID/stat's cutime and cstime, /proc/PID/io), beside the shell's
// own (a builtin loop runs in it); what the shim reaps (processes orphaned
// to it, and the shell once it exits) comes with the shim's sums. The
// usage is the difference of both between the command's start and its end.

// shellUse is one look at a session's use so far.
type shellUse struct {
	cpuUser, cpuSystem time.Duration // the shell's own and its reaped children's
	read, write        int64         // storage I/O of the shell and its reaped children; -1: unreadable
	shim               exec.Usage    // what the shim reaped
}

// lookShellUse reads the shell's counters (pid) and the shim's sums.
func lookShellUse(pid int, subj *exec.Subject) shellUse {
	u := shellUse{read: -1, write: -1}
	u.shim, _ = subj.Usage()
	if st, err := exec.ReadStat(pid); err == nil {
		t := func(n int64) time.Duration { return time.Duration(n) * time.Second / exec.ClockTicks }
		u.cpuUser, u.cpuSystem = t(int64(st.UTime)+st.CUTime), t(int64(st.STime)+st.CSTime)
	}
	dir := "/proc/" + strconv.Itoa(pid)
	if b, err := os.ReadFile(dir + "/io"); err == nil {
		for _, line := range bytes.Split(b, []byte("\n")) {
			k, v, _ := bytes.Cut(line, []byte(": "))
			n, err := strconv.ParseInt(string(v), 10, 64)
			switch {
			case err != nil:
			case string(k) == "read_bytes":
				u.read = n
			case string(k) == "write_bytes":
				u.write = n
			}
		}
	}
	return u
}

// commandUsage is what was used between a (the command's start) and b
// (its end). exited: the shell has exited, so the shim's sums hold it
// whole (what a counted of it included).
func commandUsage(a, b shellUse, exited bool) *protocol.Usage {
	d := func(x, y time.Duration) time.Duration { return max(0, y-x) }
	di := func(x, y int64) int64 { return max(0, y-x) }
	u := exec.Usage{
		CPUUser:    d(a.shim.CPUUser, b.shim.CPUUser),
		CPUSystem:  d(a.shim.CPUSystem, b.shim.CPUSystem),
		Processes:  di(a.shim.Processes, b.shim.Processes),
		ReadBytes:  di(a.shim.ReadBytes, b.shim.ReadBytes),
		WriteBytes: di(a.shim.WriteBytes, b.shim.WriteBytes),
	}
	if b.shim.MaxRSS > a.shim.MaxRSS {
		u.MaxRSS = b.shim.MaxRSS
	}
	if exited {
		// The shim's sums took the shell whole: less what it had used
		// when the command began.
		u.CPUUser, u.CPUSystem = max(0, u.CPUUser-a.cpuUser), max(0, u.CPUSystem-a.cpuSystem)
		if a.read >= 0 {
			u.ReadBytes, u.WriteBytes = max(0, u.ReadBytes-a.read), max(0, u.WriteBytes-a.write)
		}
	} else {
		u.CPUUser += d(a.cpuUser, b.cpuUser)
		u.CPUSystem += d(a.cpuSystem, b.cpuSystem)
		if a.read >= 0 && b.read >= 0 {
			u.ReadBytes += di(a.read, b.read)
			u.WriteBytes += di(a.write, b.write)
		}
	}
	return usageOf(u)
}
