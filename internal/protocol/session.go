package protocol

import (
	"encoding/json"
	"strconv"
	"strings"
)

// Shell sessions (section 4.7): open, an execute with session and script,
// close. A session's command is an execute read by Execute; open is read
// as an execute of the shell, so that user, cwd, environment,
// credentials and limits are checked as there.

// MaxSessionName bounds a session's name in a request ("s-N").
const MaxSessionName = 64

// The shells a session may ask for: bash (the default) and POSIX sh.
const (
	ShellBash = "bash"
	ShellSh   = "sh"
)

// readsSessionExecute reports whether an execute reads fieldNames[i]
// beyond its own range: session and script.
func readsSessionExecute(i int) bool {
	switch fieldNames[i] {
	case "session", "script":
		return true
	}
	return false
}

// readsSession reports whether an open or a close (k) reads fieldNames[i].
func readsSession(k string, i int) bool {
	n := fieldNames[i]
	switch k {
	case "close":
		return n == "session"
	case "read":
		return n == "session" || n == "from" || n == "waitMs" || n == "idleMs"
	}
	switch n {
	case "shell", "user", "cwd", "environment", "credentials", "limits", "pty":
		return true
	}
	return false
}

// sessionScript reads an execute's session and script: both or neither.
func (m *Message) sessionScript(x *Execute) *Error {
	raw, present := m.optional("session")
	if !present {
		if _, has := m.optional("script"); has {
			return badExecute(`"script" needs "session": the shell session to run it in (open one first)`)
		}
		return nil
	}
	name, ok := decodeString(raw)
	if !ok || name == "" || len(name) > MaxSessionName {
		return badExecute(`"session" must be a non-empty string of at most %d bytes: the name an opened reply gave`, MaxSessionName)
	}
	if _, has := m.optional("command"); has {
		return badExecute(`"command" and "session" exclude each other: a session's command is its "script"`)
	}
	raw, present = m.optional("script")
	script, ok := decodeString(raw)
	if !present || !ok {
		return badExecute(`"script" must be a string: the shell code to run in the session`)
	}
	if strings.IndexByte(script, 0) >= 0 {
		return badExecute(`"script" holds a NUL byte`)
	}
	x.Session, x.Script = name, script
	return nil
}

// sessionFields refuses what a session's command cannot have: what only
// open sets (the shell's user, environment and limits), and what a
// session does not serve. "stream", "input" and "stdin" are served as for
// any execute; what a pty session cannot take is refused where the
// session is known (sessionCommand).
func sessionFields(x *Execute) *Error {
	if x.Session == "" {
		return nil
	}
	switch {
	case len(x.Args) > 0:
		return badExecute(`"args" cannot be combined with "session": the script is the command`)
	case len(x.Environment) > 0 || len(x.Credentials) > 0:
		return badExecute(`"environment" and "credentials" of a session are set by open; in a script, export sets a variable`)
	case x.User != "":
		return badExecute(`"user" of a session is set by open`)
	case x.Cwd != "":
		return badExecute(`"cwd" cannot be combined with "session": the shell's own directory is the command's (cd in the script)`)
	case x.ResultToken != "":
		return badExecute(`"resultToken" cannot be combined with "session"`)
	case x.DetachMs > 0:
		return badExecute(`"detachMs" cannot be combined with "session": a session outlives its connection by itself`)
	case x.Pty != nil:
		return badExecute(`"pty" of a session is set by open`)
	case x.Limits != nil:
		return badExecute(`"limits" of a session are set by open`)
	case x.OnExit != OnExitLeave:
		return badExecute(`"onExit" cannot be combined with "session": what a command leaves is in its survivors, and close settles it`)
	case !x.CaptureStdout:
		return badExecute(`"captureStdout" cannot be false for a session's command`)
	}
	return nil
}

// OpenSession validates m as an open request; it does not look at m.Kind.
// The shell's execute is what Execute reads of m with the shell as its
// command; its errors say "open:".
func (m *Message) OpenSession() (*Execute, *Error) {
	shell := ShellBash
	if raw, present := m.optional("shell"); present {
		s, _ := decodeString(raw)
		if s != ShellBash && s != ShellSh {
			return nil, newError(CatBadRequest, `open: "shell" must be %q or %q`, ShellBash, ShellSh)
		}
		shell = s
	}
	for _, f := range []string{"command", "args", "session", "script", "resultToken"} {
		if _, has := m.optional(f); has {
			return nil, newError(CatBadRequest, `open: %q is not read by open (a session without a pty runs its shell: %q or %q)`, f, ShellBash, ShellSh)
		}
	}
	as := *m
	for i, n := range fieldNames {
		if n == "command" {
			as.fields[i], _ = json.Marshal(shell)
		}
	}
	x, e := as.Execute()
	if e != nil {
		e.Message = "open: " + strings.TrimPrefix(e.Message, "execute: ")
		return nil, e
	}
	x.Ignored = m.ignoredAs("open")
	return x, nil
}

// CloseSession validates m as a close request: the session's name.
func (m *Message) CloseSession() (string, *Error) {
	name, ok := m.stringField("session")
	if !ok || name == "" || len(name) > MaxSessionName {
		return "", newError(CatBadRequest, `close: "session" must be a non-empty string of at most %d bytes: the name an opened reply gave`, MaxSessionName)
	}
	return name, nil
}

// Opened answers an open: the session's name.
type Opened struct {
	Token   string          `json:"token,omitempty"`
	Kind    string          `json:"kind"` // "opened"
	ID      json.RawMessage `json:"id,omitempty"`
	Session string          `json:"session"`
	Shell   string          `json:"shell"`
	Cwd     string          `json:"cwd"`
	Ignored []string        `json:"ignored,omitempty"`
}

// Closed answers a close: what settling the whole session did.
type Closed struct {
	Token      string          `json:"token,omitempty"`
	Kind       string          `json:"kind"` // "closed"
	ID         json.RawMessage `json:"id,omitempty"`
	Session    string          `json:"session"`
	Settlement string          `json:"settlement"` // a Settle word
	Scope      ScopeInfo       `json:"scope"`
	Detail     string          `json:"detail,omitempty"`
	Ignored    []string        `json:"ignored,omitempty"`
	Usage      *Usage          `json:"usage,omitempty"` // the whole session's, the shell's included (4.8)
}

// SessionStatus is one open session in a status reply.
type SessionStatus struct {
	Session   string `json:"session"`
	Shell     string `json:"shell"`
	PID       int    `json:"pid"`
	User      string `json:"user,omitempty"`
	Busy      bool   `json:"busy"`
	IdleMs    int64  `json:"idleMs"`
	StartedMs int64  `json:"startedMs"`
}

// sessionField reads an optional "session" of a stdin or resize (k).
func (m *Message) sessionField(k string) (string, bool, *Error) {
	raw, present := m.optional("session")
	if !present {
		return "", false, nil
	}
	name, ok := decodeString(raw)
	if !ok || name == "" || len(name) > MaxSessionName {
		return "", false, newError(CatBadRequest, `%s: "session" must be a non-empty string of at most %d bytes: the name an opened reply gave`, k, MaxSessionName)
	}
	return name, true, nil
}

// MaxReadWaitMs bounds a read's waitMs and idleMs: a minute.
const MaxReadWaitMs = 60000

// Read is a validated read of a pty session's screen.
type Read struct {
	Session        string
	From           int64 // offset in the terminal's output; 0 when absent
	WaitMs, IdleMs int64
}

// ReadSession validates m as a read request (section 4.7).
func (m *Message) ReadSession() (*Read, *Error) {
	name, ok := m.stringField("session")
	if !ok || name == "" || len(name) > MaxSessionName {
		return nil, newError(CatBadRequest, `read: "session" must be a non-empty string of at most %d bytes: the name an opened reply gave`, MaxSessionName)
	}
	r := &Read{Session: name}
	for _, f := range []struct {
		name string
		into *int64
		max  int64
	}{{"from", &r.From, 1<<53 - 1}, {"waitMs", &r.WaitMs, MaxReadWaitMs}, {"idleMs", &r.IdleMs, MaxReadWaitMs}} {
		raw, present := m.optional(f.name)
		if !present {
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
		if jsonKind(raw) != kindNumber || err != nil || v < 0 || v > f.max {
			return nil, newError(CatBadRequest, `read: %q must be an integer from 0 to %d`, f.name, f.max)
		}
		*f.into = v
	}
	return r, nil
}

// Terminal answers a read: what the terminal printed from offset From
// (or the oldest kept) to Next; Lost counts bytes older than the ring.
type Terminal struct {
	Token   string          `json:"token,omitempty"`
	Kind    string          `json:"kind"` // "terminal"
	ID      json.RawMessage `json:"id,omitempty"`
	Session string          `json:"session"`
	Data    string          `json:"data"`
	Next    int64           `json:"next"`
	Lost    int64           `json:"lost,omitempty"`
	Ended   bool            `json:"ended,omitempty"` // the session is closed: nothing more will come
	Ignored []string        `json:"ignored,omitempty"`
}
