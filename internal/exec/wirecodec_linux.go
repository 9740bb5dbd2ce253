package exec

import (
	"encoding/binary"
	"fmt"
)

// The body of a shim frame (shimwire_linux.go): each message's fields in
// a fixed order, integers as varints, strings and lists with their length
// first. A body that ends early, runs over, or names more elements than
// it has bytes left is errShimFrame; nothing is allocated from a length
// before the bytes behind it are there.

// wireMsg is a frame's body.
type wireMsg interface {
	put(e *wireEnc)
	get(d *wireDec)
}

type wireEnc struct{ b []byte }

func (e *wireEnc) uint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *wireEnc) int(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *wireEnc) str(s string)  { e.uint(uint64(len(s))); e.b = append(e.b, s...) }
func (e *wireEnc) bool(v bool) {
	if v {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
}

func (e *wireEnc) strs(list []string) {
	e.uint(uint64(len(list)))
	for _, s := range list {
		e.str(s)
	}
}

func (e *wireEnc) pairs(list [][2]uint64) {
	e.uint(uint64(len(list)))
	for _, p := range list {
		e.uint(p[0])
		e.uint(p[1])
	}
}

type wireDec struct {
	b   []byte
	err error
}

func (d *wireDec) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", errShimFrame, what)
	}
	d.b = nil
}

func (d *wireDec) uint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad integer")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *wireDec) int() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad integer")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count is a list's length, each element taking at least min bytes.
func (d *wireDec) count(min int) int {
	n := d.uint()
	if n > uint64(len(d.b)/min) {
		d.fail("a length beyond the frame")
		return 0
	}
	return int(n)
}

func (d *wireDec) str() string {
	n := d.count(1)
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *wireDec) bool() bool {
	if len(d.b) == 0 {
		d.fail("short frame")
		return false
	}
	v := d.b[0]
	d.b = d.b[1:]
	if v > 1 {
		d.fail("bad boolean")
	}
	return v == 1
}

func (d *wireDec) strs() []string {
	n := d.count(1)
	if n == 0 {
		return nil
	}
	out := make([]string, n)
	for i := range out {
		out[i] = d.str()
	}
	return out
}

func (d *wireDec) pairs() [][2]uint64 {
	n := d.count(2)
	if n == 0 {
		return nil
	}
	out := make([][2]uint64, n)
	for i := range out {
		out[i] = [2]uint64{d.uint(), d.uint()}
	}
	return out
}

// decodeBody fills v from a frame's body, all of it.
func decodeBody(body []byte, v wireMsg) error {
	d := wireDec{b: body}
	v.get(&d)
	if d.err == nil && len(d.b) > 0 {
		d.fail("trailing bytes")
	}
	return d.err
}

func (m *shimStart) put(e *wireEnc) {
	e.uint(uint64(m.Seq))
	e.str(m.Path)
	e.strs(m.Argv)
	e.strs(m.Env)
	e.str(m.Dir)
	e.bool(m.Cred != nil)
	if m.Cred != nil {
		e.uint(uint64(m.Cred.UID))
		e.uint(uint64(m.Cred.GID))
		e.uint(uint64(len(m.Cred.Groups)))
		for _, g := range m.Cred.Groups {
			e.uint(uint64(g))
		}
	}
	e.int(int64(m.Cgroup))
	e.int(m.Grace)
	e.int(m.Timeout)
	e.int(int64(m.FDs))
	e.uint(uint64(len(m.DropCaps)))
	for _, c := range m.DropCaps {
		e.int(int64(c))
	}
	e.uint(uint64(m.Umask))
	e.bool(m.Tty)
	e.uint(uint64(len(m.Rlimits)))
	for _, l := range m.Rlimits {
		e.int(int64(l.Resource))
		e.uint(l.Value)
	}
	e.bool(m.Status)
}

func (m *shimStart) get(d *wireDec) {
	m.Seq = uint32(d.uint())
	m.Path = d.str()
	m.Argv = d.strs()
	m.Env = d.strs()
	m.Dir = d.str()
	if d.bool() {
		c := &shimCred{UID: uint32(d.uint()), GID: uint32(d.uint())}
		if n := d.count(1); n > 0 {
			c.Groups = make([]uint32, n)
			for i := range c.Groups {
				c.Groups[i] = uint32(d.uint())
			}
		}
		m.Cred = c
	}
	m.Cgroup = int(d.int())
	m.Grace = d.int()
	m.Timeout = d.int()
	m.FDs = int(d.int())
	if n := d.count(1); n > 0 {
		m.DropCaps = make([]int, n)
		for i := range m.DropCaps {
			m.DropCaps[i] = int(d.int())
		}
	}
	m.Umask = uint32(d.uint())
	m.Tty = d.bool()
	if n := d.count(2); n > 0 {
		m.Rlimits = make([]Rlimit, n)
		for i := range m.Rlimits {
			m.Rlimits[i] = Rlimit{Resource: int(d.int()), Value: d.uint()}
		}
	}
	m.Status = d.bool()
}

func (m *shimReq) put(e *wireEnc) {
	e.uint(uint64(m.Seq))
	e.int(int64(m.Sig))
	e.bool(m.Members != nil)
	if m.Members != nil {
		e.pairs(m.Members)
	}
}

func (m *shimReq) get(d *wireDec) {
	m.Seq = uint32(d.uint())
	m.Sig = int(d.int())
	if d.bool() {
		// nil is "walk the subtree"; a list, even empty, is what to signal.
		if m.Members = d.pairs(); m.Members == nil {
			m.Members = [][2]uint64{}
		}
	}
}

func (m *shimReply) put(e *wireEnc) {
	e.uint(uint64(m.Seq))
	e.str(m.Err)
	e.int(int64(m.Errno))
	e.str(m.Stage)
	e.int(int64(m.PID))
	e.uint(m.Start)
	e.pairs(m.Members)
	e.bool(m.Empty)
	e.bool(m.Tainted)
	m.Usage.put(e)
}

func (m *shimReply) get(d *wireDec) {
	m.Seq = uint32(d.uint())
	m.Err = d.str()
	m.Errno = int(d.int())
	m.Stage = d.str()
	m.PID = int(d.int())
	m.Start = d.uint()
	m.Members = d.pairs()
	m.Empty = d.bool()
	m.Tainted = d.bool()
	m.Usage.get(d)
}

func (m *shimExit) put(e *wireEnc) {
	e.int(int64(m.PID))
	e.bool(m.Exited)
	e.int(int64(m.Code))
	e.int(int64(m.Signal))
	e.bool(m.Empty)
	m.Usage.put(e)
}

func (m *shimExit) get(d *wireDec) {
	m.PID = int(d.int())
	m.Exited = d.bool()
	m.Code = int(d.int())
	m.Signal = int(d.int())
	m.Empty = d.bool()
	m.Usage.get(d)
}

// shimHello is the shim's first frame.
type shimHello struct{ PID int }

func (m *shimHello) put(e *wireEnc) { e.int(int64(m.PID)) }
func (m *shimHello) get(d *wireDec) { m.PID = int(d.int()) }

// shimNone is the body of the frames that carry nothing (empty, leave).
type shimNone struct{}

func (shimNone) put(*wireEnc) {}
func (shimNone) get(*wireDec) {}
