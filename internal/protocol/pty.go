package protocol

import (
	"encoding/json"
	"strconv"
	"strings"
)

// Pty is an execute's terminal (section 4.7): its size, and the TERM the
// subject gets unless environment sets it.
type Pty struct {
	Rows, Cols int
	Term       string
}

// DefaultTerm is a terminal's TERM when "term" is absent.
const DefaultTerm = "xterm-256color"

// MaxPtySide bounds rows and cols: the kernel takes up to 65535, but no
// screen is that large and a harness that sends more has a bug.
const MaxPtySide = 1000

// maxTerm bounds "term"; terminfo names are short.
const maxTerm = 64

// readsResize reports whether a resize reads fieldNames[i].
func readsResize(i int) bool {
	switch fieldNames[i] {
	case "execution", "rows", "cols", "session":
		return true
	}
	return false
}

// pty reads the optional "pty" of an execute: an object with "rows" and
// "cols" (integers from 1 to MaxPtySide) and an optional "term". With a
// terminal, captureStderr is refused: the subject's stderr is the terminal,
// one stream with its stdout (docs/protocol.md 4.7).
func (m *Message) pty(x *Execute) (*Pty, *Error) {
	raw, present := m.optional("pty")
	if !present {
		return nil, nil
	}
	var obj map[string]json.RawMessage
	if jsonKind(raw) != kindObject || json.Unmarshal(raw, &obj) != nil {
		return nil, badExecute(`"pty" must be an object such as {"rows":24,"cols":80}`)
	}
	p := &Pty{Term: DefaultTerm}
	var e *Error
	if p.Rows, e = ptySide("execute", `"pty"."rows"`, obj["rows"]); e != nil {
		return nil, e
	}
	if p.Cols, e = ptySide("execute", `"pty"."cols"`, obj["cols"]); e != nil {
		return nil, e
	}
	if t, present := obj["term"]; present && jsonKind(t) != kindNull {
		s, ok := decodeString(t)
		if !ok || s == "" || len(s) > maxTerm || strings.ContainsAny(s, "\x00=/") {
			return nil, badExecute(`"pty"."term" must be a terminal type such as %q (at most %d bytes, no NUL, "=" or "/")`, DefaultTerm, maxTerm)
		}
		p.Term = s
	}
	for k := range obj {
		if k != "rows" && k != "cols" && k != "term" {
			return nil, badExecute(`"pty" has an unknown field: only "rows", "cols" and "term" are read`)
		}
	}
	if x.CaptureStderr {
		return nil, badExecute(`"captureStderr" cannot be combined with "pty": the subject's stderr is its terminal, one stream with stdout`)
	}
	return p, nil
}

// ptySide reads one side of a terminal: an integer from 1 to MaxPtySide.
func ptySide(kind, name string, raw json.RawMessage) (int, *Error) {
	v, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if raw == nil || jsonKind(raw) != kindNumber || err != nil || v < 1 || v > MaxPtySide {
		return 0, newError(CatBadRequest, "%s: %s must be an integer from 1 to %d", kind, name, MaxPtySide)
	}
	return v, nil
}

// Resize is a validated resize message (section 4.7): the new size of an
// execution's terminal.
type Resize struct {
	Execution  string
	Session    string // instead of Execution: a pty session's terminal (4.7)
	Rows, Cols int
}

// Resize validates m as a resize message; it does not look at m.Kind. A
// failure is an *Error of category CatBadRequest that names the field.
func (m *Message) Resize() (*Resize, *Error) {
	r := &Resize{}
	if sess, ok, e := m.sessionField("resize"); e != nil {
		return nil, e
	} else if ok {
		r.Session = sess
	} else {
		name, ok := m.stringField("execution")
		if !ok || name == "" || len(name) > MaxExecutionName {
			return nil, newError(CatBadRequest,
				`resize: "execution" must be a non-empty string of at most %d bytes: the execution named by a started message`, MaxExecutionName)
		}
		r.Execution = name
	}
	rows, _ := m.field("rows")
	cols, _ := m.field("cols")
	var e *Error
	if r.Rows, e = ptySide("resize", `"rows"`, rows); e != nil {
		return nil, e
	}
	if r.Cols, e = ptySide("resize", `"cols"`, cols); e != nil {
		return nil, e
	}
	return r, nil
}
