package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/relayd/relayd/client"
)

// ptyEcho adds to the round-trip section the keystroke echo round trip
// through a pty execution (protocol 4.7): one key typed as a stdin
// message, echoed by the subject (cat in raw mode, as an editor or a
// shell's line editor echoes), back as an output message.
func (b *bench) ptyEcho(sec *section) {
	s := &series{name: "keystroke echo round trip through a pty execution", block: b.pick(2000, 200), warm: 20}
	var stops []func()
	defer func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}()
	if why := b.startPtyEcho(s, &stops); why != "" {
		s.skip = why
	}
	began, budget := time.Now(), b.pickDur(30*time.Second, 10*time.Second)
	interleave([]*series{s}, 1, func() bool { return b.cut(began, budget) })
	sec.add(s.figure("ms")).target("p50 under 1 ms", medianAtMost(1))
	sec.note("keystroke echo: one byte sent as a stdin message to `stty raw -echo; exec cat` on a pty (process-group), timed until its echo arrives as an output message")
}

// startPtyEcho starts the echoing execution and sets s.op to one key's
// round trip, or says why it cannot.
func (b *bench) startPtyEcho(s *series, stops *[]func()) string {
	d, why := b.relaydFor(b.cfg.relayd, "process-group", "pty echo", stops)
	if why != "" {
		return why
	}
	cl, err := d.connect()
	if err != nil {
		return err.Error()
	}
	keys, typing := io.Pipe()
	*stops = append(*stops, func() { typing.Close(); cl.close() }) // the lost connection settles the execution
	echoed := make(chan string, 64)
	ended := make(chan error, 1)
	go func() {
		_, err := cl.Execute(context.Background(), client.Request{Command: "/bin/sh", Args: []string{"-c", "stty raw -echo; echo ready; exec cat"},
			Pty: &client.Pty{Rows: 24, Cols: 80}, Stdin: keys, Timeout: 10 * time.Minute,
			Output: func(o client.Output) { echoed <- o.Data }})
		ended <- fmt.Errorf("the echoing execution ended: %v", err)
	}()
	wait := func(want string) error {
		var seen strings.Builder
		t := time.NewTimer(10 * time.Second)
		defer t.Stop()
		for !strings.Contains(seen.String(), want) {
			select {
			case data := <-echoed:
				seen.WriteString(data)
			case err := <-ended:
				return err
			case <-t.C:
				return fmt.Errorf("no echo of %q within 10s (saw %q)", want, seen.String())
			}
		}
		return nil
	}
	if err := wait("ready"); err != nil {
		return err.Error()
	}
	s.op = func() error {
		if _, err := typing.Write([]byte("k")); err != nil {
			return err
		}
		return wait("k")
	}
	return ""
}
