package env

import (
	"os"

	"golang.org/x/sys/unix"
)

// Host is what the machine relayd runs on offers for tracking scopes.
type Host struct {
	PID       int  // relayd's own pid
	PID1      bool // relayd is PID 1 of its PID namespace: it reaps every orphan
	Subreaper bool // relayd is a child subreaper: orphans of subjects come to it
	ProcOK    bool // /proc is mounted and lists processes
}

// Probe makes relayd a child subreaper (unless it is PID 1, where orphans come
// to it anyway) and reports what the host offers.
func Probe() Host {
	h := Host{PID: os.Getpid()}
	h.PID1 = h.PID == 1
	if h.PID1 {
		h.Subreaper = true
	} else if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err == nil {
		h.Subreaper = true
	}
	if _, err := os.Stat("/proc/self/stat"); err == nil {
		h.ProcOK = true
	}
	return h
}
