//go:build amd64 || arm64

package main

import (
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Signals that Go's runtime neither handles nor lets signal.Notify catch
// (32 and 34 in a static build: the C library's SIGCANCEL and first
// real-time signal, which kill -RTMIN sends; also 33 with cgo) keep their
// default disposition, which ends the process. relayd gives each of them
// countSignal, a handler in assembly that only adds one to sigCounts: it
// touches no Go state, so it is safe on any thread at any moment, and a
// caught signal, unlike an ignored one, is reset to its default by execve,
// so subjects still start with default dispositions.

// sigCounts[s] counts the signals s that countSignal caught. Written by
// countSignal only, with atomic adds; read with atomic loads.
var sigCounts [65]uint64

// countSignal is the handler (assembly); Go never calls it.
func countSignal()

// handlerAddrs returns the addresses of countSignal and of the restorer
// the kernel needs on amd64 (0 on arm64, where the vDSO provides it).
func handlerAddrs() (handler, restorer uintptr)

// kernelSigaction is the kernel's struct sigaction for rt_sigaction(2) on
// amd64 and arm64.
type kernelSigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

const (
	sigDFL = 0
	sigIGN = 1

	saRestart  = 0x10000000
	saOnstack  = 0x08000000 // on the thread's signal stack, which Go gives every thread
	saRestorer = 0x04000000
)

// catchUncaught gives countSignal to every signal from 1 to 64 that is
// still at its default disposition or ignored, except those relayd must
// leave alone (SIGKILL and SIGSTOP cannot be caught; SIGTERM, SIGINT and
// SIGCHLD are Go's). Call it after signal.Notify. It returns the signals it
// gave countSignal.
func catchUncaught() []syscall.Signal {
	handler, restorer := handlerAddrs()
	act := kernelSigaction{handler: handler, flags: saRestart | saOnstack, mask: ^uint64(0)}
	if restorer != 0 {
		act.restorer = restorer
		act.flags |= saRestorer
	}
	var out []syscall.Signal
	for s := syscall.Signal(1); s <= 64; s++ {
		switch s {
		case syscall.SIGKILL, syscall.SIGSTOP, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD:
			continue
		}
		var old kernelSigaction
		if rtSigaction(s, nil, &old) != nil || (old.handler != sigDFL && old.handler != sigIGN) {
			continue
		}
		if rtSigaction(s, &act, nil) == nil {
			out = append(out, s)
		}
	}
	return out
}

func rtSigaction(sig syscall.Signal, act, old *kernelSigaction) error {
	_, _, errno := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig),
		uintptr(unsafe.Pointer(act)), uintptr(unsafe.Pointer(old)), 8, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// countedSignals returns how many signals sig countSignal has caught.
func countedSignals(sig syscall.Signal) uint64 {
	return atomic.LoadUint64(&sigCounts[sig])
}
