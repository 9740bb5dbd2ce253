package exec

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"golang.org/x/sys/unix"
)

// The wire between relayd and a shim (shimproc_linux.go): a Unix stream
// socketpair, the shim's descriptor 3. Each message is a frame: a 4-byte
// little-endian length, a kind byte, and that many bytes less one of body,
// in the binary form of wirecodec_linux.go (JSON's reflection was a third
// of a shim's CPU per execute).
// Descriptors travel with a frame's header (SCM_RIGHTS), only from relayd
// to a shim. Requests carry a sequence number that their reply echoes;
// events (hello, exited, empty) carry none. A shim answers requests in the
// order they came, and writes an event before any reply that follows it,
// so that a reply to sync comes after the exit it collected.
// relayd takes nothing on a shim's word alone (rule 6.13): a frame that
// breaks these rules retires the shim (shim.dispatch, shimpool_linux.go).

// Frame kinds, relayd to shim.
const (
	frStart   = 'S' // start the subject (shimStart), with its descriptors
	frMembers = 'M' // list the subtree (shimReply.Members, Empty)
	frSignal  = 'K' // signal every process of the subtree (shimReq.Sig)
	frSync    = 'Y' // reap what has ended, then reply
	frLeave   = 'L' // the subject exited and its survivors are left alone (rule 6.1); no reply
)

// Frame kinds, shim to relayd.
const (
	frHello  = 'h' // the shim is ready
	frReply  = 'r' // the reply to a request (shimReply)
	frExited = 'x' // the subject was reaped (shimExit); with Empty, the subtree is empty too
	frEmpty  = 'e' // the subject is gone and the subtree is empty: the shim is free (Usage: the execution's whole)
)

// maxShimFrame bounds a frame: a start carries the subject's argv and
// environment, which --max-line-bytes bounds; this only stops a torn stream.
const maxShimFrame = 1 << 30

// maxShimFDs is the most descriptors one frame carries.
const maxShimFDs = 8

// How the subject enters its cgroup leaf (shimStart.Cgroup).
const (
	cgroupNone    = 0 // no cgroup: the process-group mechanism
	cgroupClone3  = 1 // born in it: descriptor 3 of the frame is the leaf (clone3, CLONE_INTO_CGROUP)
	cgroupMigrate = 2 // the shim moves itself in (descriptor 3, the leaf's cgroup.procs), forks, and moves back (descriptor 4)
)

type shimStart struct {
	Seq    uint32
	Path   string
	Argv   []string
	Env    []string
	Dir    string
	Cred   *shimCred
	Cgroup int
	// Grace and Timeout (nanoseconds) are the budget of the settlement the
	// shim makes by itself when relayd dies while the subject runs.
	Grace, Timeout int64
	FDs            int    // descriptors in the frame: stdin, stdout, stderr, then the cgroup's
	DropCaps       []int  // capabilities the subject must not hold (--drop-capabilities)
	Umask          uint32 // the subject's umask (--subject-umask)
	// Tty: descriptor 0 is a terminal, to be the subject's controlling
	// terminal in its new session (protocol 4.7).
	Tty     bool
	Rlimits []Rlimit // set on the subject before it starts (protocol 4.8)
	// Status: descriptor 3 of the frame is the subject's descriptor 3, a
	// shell session's status channel (protocol 4.7, rule 6.13), and the
	// cgroup's follow it.
	Status bool
}

type shimCred struct {
	UID, GID uint32
	Groups   []uint32
}

type shimReq struct {
	Seq uint32
	Sig int
	// Members, with a signal, are the processes to signal (pid, start
	// time), from the last look; nil: every process a fresh walk finds.
	Members [][2]uint64
}

type shimReply struct {
	Seq   uint32
	Err   string // the request failed; for a start, nothing ran
	Errno int    // a start's errno
	Stage string // a start's failing stage: "scope" or "exec"
	PID   int    // a start's subject
	Start uint64 // its start time (clock ticks since boot)
	// Members is the subtree (pid, start time) of a members request;
	// Empty is the kernel's word that nothing is left (wait: no child).
	Members [][2]uint64
	Empty   bool
	// Tainted: the shim could not take back its own resource limits after
	// a start with Rlimits; it must take no other execution.
	Tainted bool
	// Usage, in a members reply, is what the execution's reaped processes
	// used so far (the look reaps first).
	Usage Usage
}

type shimExit struct {
	PID    int
	Exited bool
	Code   int
	Signal int
	// Empty: no child was left when the subject was reaped, and the shim
	// is free (no empty event follows).
	Empty bool
	// Usage is what the processes reaped so far used, the subject
	// included; with Empty, all of the execution's.
	Usage Usage
}

// errShimFrame is a frame that breaks the wire's rules.
var errShimFrame = errors.New("exec: malformed shim frame")

// writeFrame writes one frame, with fds (relayd to shim only). The caller
// serialises writes.
func writeFrame(c *net.UnixConn, kind byte, v wireMsg, fds []int) error {
	bp := frameBufs.Get().(*[]byte)
	defer frameBufs.Put(bp)
	buf, err := encodeFrameInto((*bp)[:0], kind, v)
	if err != nil {
		return err
	}
	if cap(buf) <= maxPooledFrame {
		*bp = buf // grown for a large start (a long environment): kept
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	// One message: the descriptors go with its first byte, which the
	// reader's first read (the five bytes of the header) takes; one write
	// wakes the shim once.
	n, _, err := c.WriteMsgUnix(buf, oob, nil)
	if err != nil {
		return err
	}
	if n < len(buf) {
		_, err = c.Write(buf[n:])
	}
	return err
}

// frameBufs keep the buffers frames are encoded in between writes: a
// start's frame (its environment) grew a fresh 64-byte slice five or six
// times on every execute.
var frameBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// maxPooledFrame is the largest buffer frameBufs keeps.
const maxPooledFrame = 256 << 10

// encodeFrame is one frame: header and body.
func encodeFrame(kind byte, v wireMsg) ([]byte, error) {
	return encodeFrameInto(make([]byte, 0, 64), kind, v)
}

// encodeFrameInto is encodeFrame into buf's capacity.
func encodeFrameInto(buf []byte, kind byte, v wireMsg) ([]byte, error) {
	e := wireEnc{b: append(buf[:0], 0, 0, 0, 0, 0)}
	v.put(&e)
	if len(e.b)-4 > maxShimFrame {
		return nil, fmt.Errorf("%w: length %d", errShimFrame, len(e.b)-4)
	}
	binary.LittleEndian.PutUint32(e.b, uint32(len(e.b)-4))
	e.b[4] = kind
	return e.b, nil
}

// frameReader reads frames on relayd's side (no descriptors come to it).
type frameReader struct {
	br *bufio.Reader
}

func newFrameReader(c *net.UnixConn) *frameReader {
	return &frameReader{br: bufio.NewReaderSize(c, frameReaderBuf)}
}

// read returns the next frame's kind and body; the body is valid until
// the next read.
func (r *frameReader) read() (kind byte, body []byte, err error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r.br, hdr[:]); err != nil {
		return 0, nil, err
	}
	size := binary.LittleEndian.Uint32(hdr[:4])
	if size < 1 || size > maxShimFrame {
		return 0, nil, fmt.Errorf("%w: length %d", errShimFrame, size)
	}
	// Beyond the reader's buffer, grown as the bytes come, not allocated
	// from the length: a torn or forged length costs no more than the
	// bytes behind it.
	n := int(size - 1)
	if n <= r.br.Size() {
		// In the reader's buffer: valid until the next read, and every
		// frame is decoded (its strings copied) before that.
		if body, err = r.br.Peek(n); err == nil {
			_, _ = r.br.Discard(n)
		} else if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
	} else if body, err = io.ReadAll(io.LimitReader(r.br, int64(n))); err == nil && len(body) < n {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return 0, nil, err
	}
	return hdr[4], body, nil
}

// frameReaderBuf is the buffer of relayd's reader of a shim's frames.
const frameReaderBuf = 64 << 10

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
