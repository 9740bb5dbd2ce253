package exec

import (
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"
)

// pidfds counts the pidfds this test process holds.
func pidfds(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if target, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%s", e.Name())); target == "anon_inode:[pidfd]" {
			n++
		}
	}
	return n
}

// A child that ends while its watcher registers the pidfd with the poller
// (here: always, the window is widened to 100 ms) is still seen: the
// watcher closes its pidfd and ends. Before, the poller's readiness was
// reset when the wait began and the edge-triggered pidfd never woke it: one
// goroutine and one descriptor leaked per such child (found by TestChaos
// under load: relayd three descriptors over its baseline for good).
func TestWatcherSeesChildThatEndedWhileRegistering(t *testing.T) {
	watchDelay.Store(int64(100 * time.Millisecond))
	defer watchDelay.Store(0)
	before := pidfds(t)
	for i := 0; i < 3; i++ {
		_, _, exited, err := testReaper.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{})
		if err != nil {
			t.Fatal(err)
		}
		<-exited
	}
	deadline := time.Now().Add(5 * time.Second)
	for pidfds(t) > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d pidfds held 5 s after their children ended (%d before); want their watchers gone", pidfds(t), before)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
