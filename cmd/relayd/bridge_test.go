package main

import (
	"bytes"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// relayd bridge widens its stdin and stdout pipes (issue 30): under
// docker exec -i each is a pipe, and a 64 KiB one wakes the bridge and
// the process at its other end for every 64 KiB of a body. The bytes go
// through whole both ways.
func TestBridgeWidensPipes(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "relayd.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // an echo in relayd's place
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_, _ = io.Copy(c, c)
		c.Close()
	}()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer outR.Close()
	exited := make(chan int, 1)
	go func() {
		code := bridgeMain([]string{"--socket", sock}, func(string) string { return "" }, inR, outW, io.Discard)
		inR.Close()
		outW.Close()
		exited <- code
	}()
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
