package main

import (
	"bytes"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// relayd bridge widens its stdin and stdout pipes (issue 30): under
// docker exec -i each is a pipe, and a 64 KiB one wakes the bridge and
// the process at its other end for every 64 KiB of a body. The bytes go
// through whole both ways.
func TestBridgeWidensPipes(t *testing.T) {
	inW, outR, exited := runBridge(t, func(c net.Conn) { _, _ = io.Copy(c, c) }) // an echo in relayd's place
	defer outR.Close()
	data := bytes.Repeat([]byte("relayd bridge "), 300<<10) // 4.2 MB, past any pipe
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(outR)
		got <- b
	}()
	if _, err := inW.Write(data[:1]); err != nil { // the bridge is running
		t.Fatal(err)
	}
	if _, err := inW.Write(data[1:]); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]*os.File{"stdin": inW, "stdout": outR} {
		n, err := unix.FcntlInt(f.Fd(), unix.F_GETPIPE_SZ, 0)
		if err != nil {
			t.Fatal(err)
		}
		if n < bridgeBufBytes {
			t.Errorf("the bridge's %s pipe holds %d bytes; want it widened to %d", name, n, bridgeBufBytes)
		}
	}
	inW.Close()
	if b := <-got; !bytes.Equal(b, data) {
		t.Errorf("the bridge echoed %d bytes of the %d sent, or other bytes", len(b), len(data))
	}
	if code := <-exited; code != 0 {
		t.Errorf("the bridge exited %d; want 0 when relayd closes", code)
	}
}

// The bridge writes relayd's replies to its stdout whole, through its
// buffer: spliced from the socket, each of relayd's socket writes stayed
// a pipe buffer of its own (the kernel does not merge spliced pages), so
// the reader of a docker exec's stdout took them in small pieces; a 1 GiB
// get through docker exec -i C relayd bridge cost twice the CPU and ran
// at about half the rate. relayd's stand-in here writes 1,536 KiB in
// 512-byte writes to a reader that does not read: written whole, they
// fill the bridge's 1 MiB pipe; spliced, 256 pipe buffers of 512 bytes.
func TestBridgeWritesWholePages(t *testing.T) {
	const piece, total = 512, 1536 << 10
	inW, outR, exited := runBridge(t, func(c net.Conn) {
		b := bytes.Repeat([]byte{'r'}, piece)
		for n := 0; n < total; n += piece {
			if _, err := c.Write(b); err != nil {
				return
			}
		}
	})
	defer inW.Close()
	// Until the pipe is full, or what it holds has not grown for a second:
	// the bridge is blocked on it.
	held, still := 0, 0
	for deadline := time.Now().Add(10 * time.Second); held < bridgeBufBytes && still < 100 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		n, err := unix.IoctlGetInt(int(outR.Fd()), unix.TIOCINQ) // FIONREAD
		if err != nil {
			t.Fatal(err)
		}
		if n == held && n > 0 {
			still++
		} else {
			held, still = n, 0
		}
	}
	if held < bridgeBufBytes/2 {
		t.Errorf("the bridge's stdout pipe held %d bytes when it blocked; want at least %d: written whole, relayd's pieces fill its pages", held, bridgeBufBytes/2)
	}
	got, err := io.ReadAll(outR) // what it held, the rest, and the bridge ends
	if err != nil || len(got) != total {
		t.Errorf("read %d bytes (%v); want %d", len(got), err, total)
	}
	outR.Close()
	if code := <-exited; code != 0 {
		t.Errorf("the bridge exited %d; want 0 when relayd closes", code)
	}
}

// runBridge runs bridgeMain on pipes, against serve in relayd's place on a
// Unix socket (the connection is closed when serve returns). It returns
// the bridge's stdin to write, its stdout to read, and its exit code.
func runBridge(t *testing.T, serve func(net.Conn)) (stdin, stdout *os.File, exited <-chan int) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "relayd.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		serve(c)
	}()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	code := make(chan int, 1)
	go func() {
		c := bridgeMain([]string{"--socket", sock}, func(string) string { return "" }, inR, outW, io.Discard)
		inR.Close()
		outW.Close()
		code <- c
	}()
	return inW, outR, code
}
