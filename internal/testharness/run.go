package testharness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"
)

// ErrTooLong is RunWithin's error for a command that outlived its time.
var ErrTooLong = errors.New("testharness: command still running at its deadline; killed")

// RunWithin runs cmd and waits up to timeout for it; a command still
// running then is SIGKILLed (it is the caller's own child) and waited for,
// and the error matches ErrTooLong. Otherwise the error is cmd.Wait's.
func RunWithin(cmd *exec.Cmd, timeout time.Duration) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("%w (%s)", ErrTooLong, timeout)
	}
}

// LeakCheck is the end of a TestMain whose tests start processes: it kills
// and lists on stderr (prefixed with what) the test process's live
// children, and returns code, or 1 when there were any.
func LeakCheck(what string, code int) int {
	if leaks := Leftovers(os.Getpid()); len(leaks) > 0 {
		fmt.Fprintf(os.Stderr, "%s: processes left behind (now killed): %v\n", what, leaks)
		if code == 0 {
			code = 1
		}
	}
	return code
}
