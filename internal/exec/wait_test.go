package exec

import (
	osexec "os/exec"
	"testing"
	"time"
)

// TestWaitGone: WaitGone returns once the process exited (a zombie not yet
// reaped counts), at once for one already reaped, and false at the
// deadline for one that runs on.
func TestWaitGone(t *testing.T) {
	run := osexec.Command("sleep", "30")
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = run.Process.Kill(); _ = run.Wait() })
	if WaitGone(run.Process.Pid, time.Now().Add(50*time.Millisecond)) {
		t.Fatalf("WaitGone(%d) says a running sleep ended", run.Process.Pid)
	}

	quick := osexec.Command("true")
	if err := quick.Start(); err != nil {
		t.Fatal(err)
	}
	if !WaitGone(quick.Process.Pid, time.Now().Add(time.Minute)) {
		t.Fatalf("WaitGone(%d) did not see true exit", quick.Process.Pid)
	}
	// Still a zombie: nobody reaped it yet.
	if !WaitGone(quick.Process.Pid, time.Now().Add(time.Minute)) {
		t.Fatalf("WaitGone(%d) did not take a zombie for ended", quick.Process.Pid)
	}
	_ = quick.Wait()
	if !WaitGone(quick.Process.Pid, time.Now()) {
		t.Fatalf("WaitGone(%d) did not take a reaped process for ended", quick.Process.Pid)
	}
}
