package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayd/relayd/client"
	"github.com/relayd/relayd/internal/testharness"
)

// The bounds of a Listener against peers that are not relayd, and its room
// for a relayd whose ready is long.

func listen(t *testing.T) *client.Listener {
	t.Helper()
	ln, err := client.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// peer dials ln as a test's stand-in for whoever may connect, writes first
// (if any) and is closed at the test's end.
func peer(t *testing.T, ln *client.Listener, first string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	if first != "" {
		if _, err := nc.Write([]byte(first)); err != nil {
			t.Fatal(err)
		}
	}
	return nc
}

// closedWithin says whether the Listener closed nc within d: a read ends in
// EOF or a reset, not in the deadline.
func closedWithin(nc net.Conn, d time.Duration) bool {
	_ = nc.SetReadDeadline(time.Now().Add(d))
	_, err := nc.Read(make([]byte, 1))
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

// A dial-out relayd whose ready carries a long --instruction-file (relayd
// allows 8 MiB) is accepted; at most MaxLongHellos peers at once may send a
// first line past MaxHello, the next is closed there, and a slot is free
// again once its peer is gone.
func TestListenerLongHello(t *testing.T) {
	ln := listen(t)
	junk := strings.Repeat("x", client.MaxHello+1000) // no newline: a first line that never ends
	var holders []net.Conn
	for i := 0; i < client.MaxLongHellos; i++ {
		holders = append(holders, peer(t, ln, junk))
	}
	time.Sleep(300 * time.Millisecond) // the holders' lines are read and their slots taken
	for i, h := range holders {
		if closedWithin(h, 10*time.Millisecond) {
			t.Fatalf("long first line %d of %d was closed; want it read while a slot is free", i+1, client.MaxLongHellos)
		}
	}
	if extra := peer(t, ln, junk); !closedWithin(extra, 5*time.Second) {
		t.Fatalf("a first line past %d bytes with every long-hello slot taken was kept; want it closed", client.MaxHello)
	}
	// A relayd with a short ready is not held up by them.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if c := acceptRelayd(ctx, t, ln, ""); c.Handshake().Instruction != "" {
		t.Fatalf("instruction %q; want none", c.Handshake().Instruction)
	}
	for _, h := range holders {
		h.Close()
	}
	// A long ready that came before the Listener saw them go would find
	// no slot and be closed, as designed: wait for the slots.
	waitFor(t, "the closed peers' long-hello slots to be free", func() bool { return client.LongHellos(ln) == 0 })
	instruction := strings.Repeat("Fix the failing test in pkg/parse; keep the public API.\n", 4000) // 228 KB
	if c := acceptRelayd(ctx, t, ln, instruction); c.Handshake().Instruction != instruction {
		t.Fatalf("the ready's instruction has %d bytes; want the %d of --instruction-file", len(c.Handshake().Instruction), len(instruction))
	}
}

// acceptRelayd starts a dial-out relayd (with instruction as its
// --instruction-file, if any) and accepts it on ln.
func acceptRelayd(ctx context.Context, t *testing.T, ln *client.Listener, instruction string) *client.Conn {
	t.Helper()
	args := []string{"--scope", "process-group", "--state-dir", filepath.Join(t.TempDir(), "state")}
	if instruction != "" {
		f := filepath.Join(t.TempDir(), "instruction.md")
		if err := os.WriteFile(f, []byte(instruction), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--instruction-file", f)
	}
	r, err := testharness.Prepare(testharness.Options{Bin: relaydBin, Dir: t.TempDir(), Connect: ln.Addr().String(), Args: args})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Launch(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Kill)
	c, err := ln.Accept(ctx, r.Token)
	if err != nil {
		t.Fatalf("Accept: %v; relayd's log: %s", err, r.Logs.String())
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// At most MaxHandshakes peers may be in their handshake; the next waits,
// is not closed, and gets a slot once the silent ones have held theirs for
// the crowded hello timeout (1 s), so peers that send nothing cannot keep a
// relayd out. Close closes those in their handshake. A peer that sends
// nothing while nobody queues is closed after the hello timeout.
func TestListenerHandshakesBounded(t *testing.T) {
	defer client.SetListenerTimeouts(20*time.Second, time.Minute)()
	ln := listen(t)
	var silent []net.Conn
	for i := 0; i < client.MaxHandshakes; i++ {
		silent = append(silent, peer(t, ln, ""))
	}
	if closedWithin(silent[0], 1500*time.Millisecond) {
		t.Fatal("a peer within the bound was closed while nobody queued")
	}
	// Connections are accepted in order, so this one meets every slot taken.
	peer(t, ln, `{"token":"tok-late","kind":"ready","protocol":1}`+"\n")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := ln.Accept(ctx, "tok-late")
	if err != nil {
		t.Fatalf("a relayd that found every handshake slot taken by silent peers: %v", err)
	}
	c.Close()
	if !closedWithin(silent[0], 5*time.Second) {
		t.Fatal("the silent peers kept their slots while a relayd queued")
	}
	// Close does not wait out the peers' hello timeout.
	more := peer(t, ln, "")
	began := time.Now()
	ln.Close()
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("Close took %s with peers in their handshake; want it prompt", took)
	}
	if !closedWithin(more, 5*time.Second) {
		t.Fatal("a peer in its handshake was left open by Close")
	}

	restore := client.SetListenerTimeouts(300*time.Millisecond, time.Minute)
	quick := listen(t)
	restore()
	began = time.Now()
	if p := peer(t, quick, ""); !closedWithin(p, 10*time.Second) {
		t.Fatal("a peer that sent nothing was kept past the hello timeout")
	}
	if took := time.Since(began); took < 300*time.Millisecond {
		t.Fatalf("a silent peer was closed after %s; want the 300ms hello timeout first", took)
	}
}

// At most MaxHeld relayds wait for their Accept: the next is closed; one
// held is closed once it has waited the hold timeout, even when nobody else
// arrives.
func TestListenerHeldBounded(t *testing.T) {
	ln := listen(t)
	var held []net.Conn
	for i := 0; i < client.MaxHeld; i++ {
		held = append(held, peer(t, ln, fmt.Sprintf(`{"token":"tok-%d","kind":"ready","protocol":1}`+"\n", i)))
	}
	waitFor(t, fmt.Sprintf("%d relayds to be held", client.MaxHeld), func() bool { return client.Held(ln) == client.MaxHeld })
	if extra := peer(t, ln, `{"token":"tok-extra","kind":"ready","protocol":1}`+"\n"); !closedWithin(extra, 5*time.Second) {
		t.Fatalf("relayd %d was held; want at most %d", client.MaxHeld+1, client.MaxHeld)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := ln.Accept(ctx, "tok-7")
	if err != nil {
		t.Fatalf("Accept for a held relayd: %v", err)
	}
	c.Close()
	if !closedWithin(held[7], 5*time.Second) || closedWithin(held[8], 10*time.Millisecond) {
		t.Fatal("Accept handed over another relayd than the one with its token")
	}

	restore := client.SetListenerTimeouts(10*time.Second, 400*time.Millisecond)
	quick := listen(t)
	restore()
	began := time.Now()
	p := peer(t, quick, `{"token":"tok-late","kind":"ready","protocol":1}`+"\n")
	if !closedWithin(p, 10*time.Second) {
		t.Fatal("a relayd nobody accepted was held past the hold timeout with nobody else arriving")
	}
	if took := time.Since(began); took < 400*time.Millisecond {
		t.Fatalf("a held relayd was closed after %s; want the 400ms hold timeout first", took)
	}
}
