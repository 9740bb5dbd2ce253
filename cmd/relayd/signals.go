package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// Rule 6.8: only SIGTERM and SIGINT stop relayd. Every other signal that
// can be caught is caught, logged at a bounded rate, and otherwise changes
// nothing: a subject running as relayd's user can signal relayd (its
// parent), and must not be able to kill it (SIGHUP, SIGABRT, SIGSEGV sent
// with kill, a real-time signal, ...) or stop it (SIGTSTP, SIGTTIN,
// SIGTTOU), which would leave every deadline unenforced.
//
// Signals are caught, never ignored: an ignored signal stays ignored in
// every program relayd starts, and subjects are owed the default
// dispositions. A caught signal is reset to its default in the child
// before exec (Go's syscall.ForkExec for the signals Go handles; execve for
// the rest). SIGKILL and SIGSTOP cannot be caught: only PID 1 (whom the
// kernel spares them from inside its namespace) or --subject-user protects
// relayd from those (SECURITY.md).

// shrugged reports whether relayd shrugs off sig: every signal from 1 to
// 64 but those that cannot be caught (SIGKILL, SIGSTOP), those that stop
// relayd (SIGTERM, SIGINT), and those Go's runtime needs and never delivers
// to a program: SIGCHLD (relayd's reaper has it; its default is to ignore),
// SIGURG (the runtime preempts goroutines with it; default ignore, so a
// subject's SIGURG is harmless and is not logged, or the runtime's own
// would be), SIGPROF (the runtime's profiler consumes it: harmless, never
// logged) and signals 32 to 34 (the runtime's and the C library's own,
// which signal.Notify cannot catch; catchUncaught covers them).
func shrugged(sig syscall.Signal) bool {
	switch sig {
	case syscall.SIGKILL, syscall.SIGSTOP, syscall.SIGTERM, syscall.SIGINT,
		syscall.SIGCHLD, syscall.SIGURG, syscall.SIGPROF:
		return false
	}
	return sig >= 1 && sig <= 64 && !(sig >= 32 && sig <= 34)
}

// signalWindow is how often the count of signals that came after the first
// one is logged, per signal.
const signalWindow = time.Minute

// shrugOff catches every signal that shrugged admits, and every other
// catchable signal whose disposition is still the default or "ignore"
// (catchUncaught), and logs them with a signalLog until ctx ends. It
// returns once they are caught.
func shrugOff(ctx context.Context, log zerolog.Logger) {
	var sigs []os.Signal
	for s := syscall.Signal(1); s <= 64; s++ {
		if shrugged(s) {
			sigs = append(sigs, s)
		}
	}
	ch := make(chan os.Signal, 64)
	signal.Notify(ch, sigs...)
	counted := catchUncaught()
	if len(counted) > 0 {
		log.Debug().Ints("signals", signalNumbers(counted)).Msg("signals Go's runtime cannot deliver are counted by relayd's own handler")
	}
	go func() {
		defer signal.Stop(ch)
		sl := newSignalLog(log, signalWindow)
		last := make([]uint64, len(counted))
		poll := time.NewTicker(time.Second)
		defer poll.Stop()
		window := time.NewTicker(signalWindow)
		defer window.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case sig := <-ch:
				sl.received(sig.(syscall.Signal), 1)
			case <-poll.C:
				for i, s := range counted {
					if n := countedSignals(s); n != last[i] {
						sl.received(s, n-last[i])
						last[i] = n
					}
				}
			case <-window.C:
				sl.flush()
			}
		}
	}()
}

// signalName is SIGHUP, SIGRTMIN+3 (glibc's numbering: SIGRTMIN is 34) or
// "signal 32".
func signalName(sig syscall.Signal) string {
	if n := unix.SignalName(sig); n != "" {
		return n
	}
	if sig >= 34 && sig <= 64 {
		return fmt.Sprintf("SIGRTMIN+%d", sig-34)
	}
	return fmt.Sprintf("signal %d", int(sig))
}

func signalNumbers(sigs []syscall.Signal) []int {
	out := make([]int, len(sigs))
	for i, s := range sigs {
		out[i] = int(s)
	}
	return out
}

// signalLog logs shrugged-off signals at a bounded rate, so that a subject
// sending millions of them cannot turn relayd's log into a CPU or disk
// sink: the first of a signal is logged at once; those that follow within
// the window are counted, and flush logs the count once per window. A
// signal that stayed quiet for a whole window is logged at once again. At
// most two lines per signal and window, whatever comes.
type signalLog struct {
	log     zerolog.Logger
	window  time.Duration
	pending map[syscall.Signal]uint64 // counted since the last line; present: logged this window
}

func newSignalLog(log zerolog.Logger, window time.Duration) *signalLog {
	return &signalLog{log: log, window: window, pending: map[syscall.Signal]uint64{}}
}

// received records n arrivals of sig.
func (l *signalLog) received(sig syscall.Signal, n uint64) {
	if _, seen := l.pending[sig]; seen {
		l.pending[sig] += n
		return
	}
	l.pending[sig] = 0
	l.log.Warn().Str("signal", signalName(sig)).Int("number", int(sig)).Uint64("count", n).
		Msg("signal ignored: only SIGTERM and SIGINT stop relayd")
}

// flush ends a window: it logs the count of each signal that came again
// since its last line, and forgets the signals that did not.
func (l *signalLog) flush() {
	for sig, n := range l.pending {
		if n == 0 {
			delete(l.pending, sig)
			continue
		}
		l.pending[sig] = 0
		l.log.Warn().Str("signal", signalName(sig)).Int("number", int(sig)).Uint64("count", n).
			Dur("within", l.window).Msg("signal ignored again: only SIGTERM and SIGINT stop relayd")
	}
}
