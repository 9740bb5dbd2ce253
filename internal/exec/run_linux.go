package exec

import (
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// RunBounded runs argv (an operator's command, such as --destroy-command) in
// a session of its own with stdin and stdout on /dev/null and stderr on
// relayd's, and waits for it until deadline; then it SIGKILLs that session,
// which it created, and returns an error.
func RunBounded(r *Reaper, argv []string, environ []string, deadline time.Time) error {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devnull.Close()
	pid, _, exited, err := r.ForkExec(argv[0], argv, &syscall.ProcAttr{
		Env:   environ,
		Files: []uintptr{devnull.Fd(), devnull.Fd(), os.Stderr.Fd()},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	if err != nil {
		return err
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case st := <-exited:
		if st.ExitCode() != 0 {
			return fmt.Errorf("exec.RunBounded %s: exit status %d", argv[0], st.ExitCode())
		}
		return nil
	case <-t.C:
		_ = unix.Kill(-pid, unix.SIGKILL) // its own session and process group, made above
		return fmt.Errorf("exec.RunBounded %s: still running at the deadline; killed", argv[0])
	}
}
