package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/relayd/relayd/client"
)

// sessionRows adds to the round-trip section the shell sessions' figures
// (protocol 4.7): a command in a session (`true`, a builtin: no process
// is created) against an execute of /bin/true on the same relayd,
// taking turns; and the keystroke echo round trip through a pty session
// (a key typed with a stdin message, its echo read back with read).
func (b *bench) sessionRows(sec *section) {
	block := b.pick(500, 100)
	exe := &series{name: "execute /bin/true, beside the session rows", block: block, warm: 20}
	cmd := &series{name: "a command in a shell session (true, a builtin)", block: block, warm: 20}
	echo := &series{name: "keystroke echo round trip through a pty session", block: block, warm: 20}
	var stops []func()
	defer func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}()
	if why := b.startSessions(exe, cmd, echo, &stops); why != "" {
		exe.skip, cmd.skip, echo.skip = why, why, why
	}
	began, budget := time.Now(), b.pickDur(60*time.Second, 15*time.Second)
	interleave([]*series{exe, cmd, echo}, b.pick(10, 3), func() bool { return b.cut(began, budget) })
	fe := sec.add(exe.figure("ms"))
	sec.add(cmd.figure("ms")).against(fe).target("p50 below 0.3x execute", ratioAtMost(0.3))
	sec.add(echo.figure("ms")).target("p50 under 1 ms", medianAtMost(1))
	sec.note("sessions: a bash session without a pty runs `true`; a pty session's bash -i runs `stty raw -echo; cat`, and one key typed as a stdin message is timed until read returns its echo (process-group)")
}

// startSessions opens the two sessions and sets the series' ops, or says
// why it cannot.
func (b *bench) startSessions(exe, cmd, echo *series, stops *[]func()) string {
	d, why := b.relaydFor(b.cfg.relayd, "process-group", "sessions", stops)
	if why != "" {
		return why
	}
	ctx := context.Background()
	cl, err := d.connect()
	if err != nil {
		return err.Error()
	}
	*stops = append(*stops, cl.close)
	exe.op = func() error {
		_, err := cl.execute(trueReq)
		return err
	}
	sh, err := cl.OpenSession(ctx, client.SessionOptions{})
	if err != nil {
		return "open: " + err.Error()
	}
	*stops = append(*stops, func() { _, _ = sh.Close(ctx) })
	cmd.op = func() error {
		r, err := sh.Run(ctx, "true", client.RunOptions{Timeout: 10 * time.Second})
		if err == nil && r.ExitCode != 0 {
			err = fmt.Errorf("true in a session: exit %d", r.ExitCode)
		}
		return err
	}
	pt, err := cl.OpenSession(ctx, client.SessionOptions{Pty: &client.Pty{Rows: 24, Cols: 80}})
	if err != nil {
		return "open with a pty: " + err.Error()
	}
	*stops = append(*stops, func() { _, _ = pt.Close(ctx) })
	var next int64
	wait := func(want string) error {
		var seen strings.Builder
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(seen.String(), want); {
			if time.Now().After(deadline) {
				return fmt.Errorf("no echo of %q within 10s (saw %q)", want, seen.String())
			}
			t, err := pt.Read(ctx, next, 5*time.Second, 0)
			if err != nil {
				return err
			}
			if t.Ended {
				return fmt.Errorf("the pty session ended (saw %q)", seen.String())
			}
			next = t.Next
			seen.WriteString(t.Data)
		}
		return nil
	}
	if err := pt.Write([]byte("stty raw -echo; echo rea''dy; cat\r")); err != nil {
		return err.Error()
	}
	if err := wait("ready"); err != nil {
		return err.Error()
	}
	echo.op = func() error {
		if err := pt.Write([]byte("k")); err != nil {
			return err
		}
		return wait("k")
	}
	return ""
}
