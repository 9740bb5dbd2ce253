package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/relayd/relayd/internal/env"
	"github.com/relayd/relayd/internal/testharness"
)

// The baselines: what relayd cannot beat. A bare spawn is fork, exec of
// /bin/true in a new session (as relayd starts every subject), and wait4
// on that exact pid; its stdio is /dev/null.

// devNullFile is kept referenced for the whole run: a collected *os.File
// closes its descriptor, and the bare rows then failed with "bad file
// descriptor" (or spawned onto whatever reused the number).
var devNullFile = func() *os.File {
	f, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		panic(err)
	}
	return f
}()

var devNull = devNullFile.Fd()

func bareSpawn(sys *syscall.SysProcAttr) error {
	pid, err := syscall.ForkExec("/bin/true", []string{"true"},
		&syscall.ProcAttr{Files: []uintptr{devNull, devNull, devNull}, Sys: sys})
	if err != nil {
		return fmt.Errorf("bare spawn of /bin/true: %w", err)
	}
	return waitPid(pid)
}

// waitPid waits for pid, and only for it, and checks it exited 0.
func waitPid(pid int) error {
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(pid, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("wait4 %d: %w", pid, err)
		}
		break
	}
	if !ws.Exited() || ws.ExitStatus() != 0 {
		return fmt.Errorf("/bin/true ended with status %v", ws)
	}
	return nil
}

func spawnSetsid() error { return bareSpawn(&syscall.SysProcAttr{Setsid: true}) }

// cgroupBase is a cgroup v2 directory beside relayd's subtrees (relayd makes
// BASE/relayd-PID in its own cgroup, which it inherits from this process;
// this is BASE/relaybench-PID) holding one fresh leaf per bare spawn.
type cgroupBase struct {
	dir string
	n   atomic.Uint64
}

// newCgroupBase finds this process's cgroup v2 directory the way relayd
// does (env.FindCgroup2) and makes the base in it.
func newCgroupBase() (*cgroupBase, error) {
	own, err := env.FindCgroup2("")
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(own.Base, "relaybench-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("cannot make a cgroup for bare spawns: %w", err)
	}
	b := &cgroupBase{dir: dir}
	if err := b.spawn(); err != nil { // prove it works
		b.close()
		return nil, err
	}
	return b, nil
}

// spawn is one bare spawn of /bin/true born into a fresh leaf (clone3 with
// CLONE_INTO_CGROUP), then wait4, then rmdir of the leaf, retried briefly:
// the kernel says "populated 0" a little after wait4 returns.
func (b *cgroupBase) spawn() error {
	leaf := filepath.Join(b.dir, "leaf-"+strconv.FormatUint(b.n.Add(1), 10))
	if err := os.Mkdir(leaf, 0o755); err != nil {
		return fmt.Errorf("cgroup leaf: %w", err)
	}
	fd, err := unix.Open(leaf, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		os.Remove(leaf)
		return fmt.Errorf("cgroup leaf: %w", err)
	}
	err = bareSpawn(&syscall.SysProcAttr{Setsid: true, UseCgroupFD: true, CgroupFD: fd})
	unix.Close(fd)
	if rerr := removeLeaf(leaf); rerr != nil && err == nil {
		err = rerr
	}
	return err
}

func removeLeaf(dir string) error {
	deadline := time.Now().Add(2 * time.Second)
	for i := 0; ; i++ {
		err := os.Remove(dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("removing cgroup leaf: %w", err)
		}
		if i < 100 {
			runtime.Gosched()
		} else {
			time.Sleep(100 * time.Microsecond)
		}
	}
}

func (b *cgroupBase) close() {
	_ = removeLeaf(b.dir)
}

// alive is true while pid exists and is not a zombie.
func alive(pid int) bool { return testharness.Alive(pid) }
