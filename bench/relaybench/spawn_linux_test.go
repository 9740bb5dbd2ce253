package main

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The bare baseline's stdio must still be /dev/null after a garbage
// collection. With --only throughput every bare row once failed with "bad
// file descriptor": the *os.File behind devNull was collected and its
// cleanup closed the descriptor (or, worse, its number was reused).
func TestBareSpawnNullSurvivesGC(t *testing.T) {
	var want unix.Stat_t
	if err := unix.Stat("/dev/null", &want); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		runtime.GC()
		time.Sleep(20 * time.Millisecond) // cleanups run on their own goroutine
	}
	var got unix.Stat_t
	if err := unix.Fstat(int(devNull), &got); err != nil {
		t.Fatalf("devNull (fd %d) after GC: %v", devNull, err)
	}
	if got.Rdev != want.Rdev || got.Ino != want.Ino {
		t.Fatalf("devNull (fd %d) after GC is no longer /dev/null", devNull)
	}
	if err := spawnSetsid(); err != nil {
		t.Fatal(err)
	}
}
