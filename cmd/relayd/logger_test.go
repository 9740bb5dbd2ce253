package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// Console logs are for people; colour codes are for people watching a
// terminal. Written to anything else (a buffer, a pipe, a file: docker logs,
// a CI log, a log collector) they are noise, so relayd writes none there.
func TestConsoleLogHasNoColourOffTerminal(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	file, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	var buf bytes.Buffer

	tests := []struct {
		name string
		w    io.Writer
		read func() []byte // what was written, once the logger is done
	}{
		{"buffer", &buf, func() []byte { return buf.Bytes() }},
		{"pipe", pw, func() []byte {
			pw.Close()
			b, err := io.ReadAll(pr)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}},
		{"file", file, func() []byte {
			b, err := os.ReadFile(file.Name())
			if err != nil {
				t.Fatal(err)
			}
			return b
		}},
	}
	t.Setenv("NO_COLOR", "") // zerolog honours NO_COLOR: unset, it cannot hide a colour
	o := defaultOptions()
	o.logFormat = "console"
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log := newLogger(o, tt.w)
			log.Warn().Str("scope", "cgroup").Err(io.EOF).Msg("scope mechanism chosen")
			out := tt.read()
			if !bytes.Contains(out, []byte("scope mechanism chosen")) {
				t.Fatalf("console log wrote %q; want the message", out)
			}
			if i := bytes.IndexByte(out, 0x1b); i >= 0 {
				t.Fatalf("console log to a %s wrote %q; want no escape (ESC at byte %d)", tt.name, out, i)
			}
		})
	}
}

// isTerminal tells a terminal from everything else, so that console logs
// keep their colours where a person watches them.
func TestIsTerminal(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	file, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	tests := []struct {
		name string
		w    io.Writer
		want bool
	}{
		{"buffer", &bytes.Buffer{}, false},
		{"pipe", pw, false},
		{"file", file, false},
		{"/dev/null", devNull, false},
		{"pseudo-terminal", openPTY(t), true},
	}
	for _, tt := range tests {
		if got := isTerminal(tt.w); got != tt.want {
			t.Errorf("isTerminal(%s) = %v; want %v", tt.name, got, tt.want)
		}
	}
}

// openPTY opens the terminal side of a new pseudo-terminal, or skips the
// test where there is none to open.
func openPTY(t *testing.T) *os.File {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { ptmx.Close() })
	rc, err := ptmx.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n uint32
	var ioctlErr error
	_ = rc.Control(func(fd uintptr) {
		if ioctlErr = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); ioctlErr == nil { // unlockpt
			n, ioctlErr = unix.IoctlGetUint32(int(fd), unix.TIOCGPTN) // ptsname
		}
	})
	if ioctlErr != nil {
		t.Skipf("no pseudo-terminal: %v", ioctlErr)
	}
	pts, err := os.OpenFile("/dev/pts/"+strconv.Itoa(int(n)), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { pts.Close() })
	return pts
}
