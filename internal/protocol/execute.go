package protocol

import (
	"encoding/base64"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// resultTokenVar is the variable through which a subject receives its
// resultToken. A request may not set it itself.
const resultTokenVar = "MAKA_EVAL_RESULT_TOKEN"

// reservedPrefix starts the names of relayd's own configuration variables,
// which a controller may not set for a subject (section 4.2).
const reservedPrefix = "RELAYD_"

// maxTimeoutMs is the largest accepted timeoutMs: the longest time.Duration,
// in whole milliseconds.
const maxTimeoutMs = 9223372036854

// Execute is a validated execute request (protocol section 4.2).
type Execute struct {
	Command       string
	Args          []string          // never nil
	Environment   map[string]string // never nil
	Credentials   map[string]string // never nil; values are secrets
	ResultToken   string            // "" when absent
	CaptureStdout bool              // true when absent
	Cwd           string            // "" when absent
	TimeoutMs     int64             // 0 when absent

	// The extensions of section 4.5.
	CaptureStderr bool   // false when absent
	Stream        bool   // false when absent
	OnExit        string // OnExitLeave when absent
	DetachMs      int64  // 0 when absent

	// The extensions of section 4.6.
	Input    []byte // written to the subject's stdin; nil when absent
	HasInput bool   // input was given ("" counts: stdin is then a pipe that ends at once)
	Stdin    bool   // stdin stays open after Input for stdin messages
	User     string // "USER" or "USER:GROUP"; "" when absent

	// Output limits a harness chooses (relayd's refinement of 4.6): at most
	// MaxOutputBytes of raw stdout and of captured stderr each, within the
	// daemon's limits (0 when absent: those limits); OutputKeep says which
	// end is kept when more came.
	MaxOutputBytes int64
	OutputKeep     string // "" when absent, which is OutputKeepHead

	// Pty, when not nil, runs the subject on a terminal of its own
	// (section 4.7, pty.go).
	Pty *Pty

	// Limits are section 4.8's resource limits, by name; nil when absent.
	Limits Limits

	// Session names the shell session whose shell runs Script (section
	// 4.7, session.go); "" for an ordinary execute.
	Session, Script string

	// Ignored names the request's unknown top-level fields, for its
	// started and executed replies (section 4.6); nil when none.
	Ignored []string
}

// The values of onExit (section 4.5): what happens to the scope of a
// subject that exited by itself.
const (
	OnExitLeave           = "leave"             // rule 6.1
	OnExitSettle          = "settle"            // settle it whatever the status
	OnExitSettleOnFailure = "settle-on-failure" // settle it after a non-zero status or a signal
)

// The values of outputKeep: which end of a longer output is returned.
const (
	OutputKeepHead = "head" // the first bytes (relayd's default, the contract's)
	OutputKeepTail = "tail" // the last bytes (what inspect_ai keeps)
)

// Execute validates m as an execute request; it does not look at m.Kind.
// Every failure is an *Error of category CatBadRequest whose message starts
// with "execute: " and names the field, for example
//
//	execute: "command" must be a non-empty string
//	execute: "args"[2] holds a NUL byte
//	execute: "environment" and "credentials" both set OPENAI_API_KEY
//
// The rules, checked field by field in the order of section 4.2's table
// (command, args, environment, credentials, resultToken, captureStdout, cwd,
// timeoutMs, then section 4.5's captureStderr, stream, onExit, detachMs),
// the first failure being reported: command is a non-empty
// string; args is an array of strings; environment and credentials are
// objects of strings whose names match [A-Za-z_][A-Za-z0-9_]*, taken in
// sorted order, that share no name and do not set MAKA_EVAL_RESULT_TOKEN;
// resultToken is exactly 32 lower-case hex digits; captureStdout is a
// boolean; cwd is a string; timeoutMs is a JSON number that is an exact
// integer from 1 to 9223372036854 (1000, 1e3 and 1000.0 are all 1000);
// captureStderr and stream are booleans; onExit is one of the OnExit
// values; detachMs is read like timeoutMs; no string holds a NUL byte. A null optional field counts as absent; unknown
// fields are ignored. Messages name fields and variables but never quote a
// value.
func (m *Message) Execute() (*Execute, *Error) {
	x := &Execute{
		Args:          []string{},
		Environment:   map[string]string{},
		Credentials:   map[string]string{},
		CaptureStdout: true,
		OnExit:        OnExitLeave,
	}
	var ok bool

	// session and script, instead of command (section 4.7, session.go)
	if e := m.sessionScript(x); e != nil {
		return nil, e
	}
	// command
	x.Command, ok = m.stringField("command")
	if x.Session == "" && (!ok || x.Command == "") {
		return nil, badExecute(`"command" must be a non-empty string`)
	}
	if strings.IndexByte(x.Command, 0) >= 0 {
		return nil, badExecute(`"command" holds a NUL byte`)
	}

	// args
	if raw, present := m.optional("args"); present {
		var items []json.RawMessage
		if jsonKind(raw) != kindArray || json.Unmarshal(raw, &items) != nil {
			return nil, badExecute(`"args" must be an array of strings`)
		}
		for i, item := range items {
			s, ok := decodeString(item)
			if !ok {
				return nil, badExecute(`"args"[%d] must be a string`, i)
			}
			if strings.IndexByte(s, 0) >= 0 {
				return nil, badExecute(`"args"[%d] holds a NUL byte`, i)
			}
			x.Args = append(x.Args, s)
		}
	}

	// environment and credentials
	var e *Error
	if x.Environment, e = m.variables("environment", nil); e != nil {
		return nil, e
	}
	if x.Credentials, e = m.variables("credentials", x.Environment); e != nil {
		return nil, e
	}

	// resultToken
	if raw, present := m.optional("resultToken"); present {
		s, ok := decodeString(raw)
		if !ok || !isResultToken(s) {
			return nil, badExecute(`"resultToken" must be exactly 32 lower-case hex digits`)
		}
		x.ResultToken = s
	}

	// captureStdout
	if raw, present := m.optional("captureStdout"); present {
		if jsonKind(raw) != kindBool || json.Unmarshal(raw, &x.CaptureStdout) != nil {
			return nil, badExecute(`"captureStdout" must be true or false`)
		}
	}

	// cwd
	if raw, present := m.optional("cwd"); present {
		if x.Cwd, ok = decodeString(raw); !ok {
			return nil, badExecute(`"cwd" must be a string`)
		}
		if strings.IndexByte(x.Cwd, 0) >= 0 {
			return nil, badExecute(`"cwd" holds a NUL byte`)
		}
	}

	// timeoutMs
	if x.TimeoutMs, e = m.milliseconds("timeoutMs"); e != nil {
		return nil, e
	}

	// captureStderr, stream
	if x.CaptureStderr, e = m.boolField("captureStderr", false); e != nil {
		return nil, e
	}
	if x.Stream, e = m.boolField("stream", false); e != nil {
		return nil, e
	}

	// onExit
	if raw, present := m.optional("onExit"); present {
		s, _ := decodeString(raw)
		switch s {
		case OnExitLeave, OnExitSettle, OnExitSettleOnFailure:
			x.OnExit = s
		default:
			return nil, badExecute(`"onExit" must be %q, %q or %q`, OnExitLeave, OnExitSettle, OnExitSettleOnFailure)
		}
	}

	// detachMs
	if x.DetachMs, e = m.milliseconds("detachMs"); e != nil {
		return nil, e
	}

	// input, inputEncoding, stdin, user (section 4.6)
	if e = m.input(x); e != nil {
		return nil, e
	}
	if x.Stdin, e = m.boolField("stdin", false); e != nil {
		return nil, e
	}
	if raw, present := m.optional("user"); present {
		x.User, ok = decodeString(raw)
		if !ok || x.User == "" || len(x.User) > maxUser || strings.IndexByte(x.User, 0) >= 0 {
			return nil, badExecute(`"user" must be a user name or uid, optionally followed by :GROUP, of at most %d bytes`, maxUser)
		}
	}
	if e = m.outputLimits(x); e != nil {
		return nil, e
	}
	if x.Pty, e = m.pty(x); e != nil {
		return nil, e
	}
	if e = m.limits(x); e != nil {
		return nil, e
	}
	if e = sessionFields(x); e != nil {
		return nil, e
	}
	x.Ignored = m.ignoredAs("execute")
	return x, nil
}

// outputLimits reads "maxOutputBytes" (an integer of at least 1) and
// "outputKeep" ("head" or "tail") into x.
func (m *Message) outputLimits(x *Execute) *Error {
	if raw, present := m.optional("maxOutputBytes"); present {
		v, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
		if jsonKind(raw) != kindNumber || err != nil || v < 1 {
			return badExecute(`"maxOutputBytes" must be an integer of at least 1`)
		}
		x.MaxOutputBytes = v
	}
	if raw, present := m.optional("outputKeep"); present {
		s, _ := decodeString(raw)
		if s != OutputKeepHead && s != OutputKeepTail {
			return badExecute(`"outputKeep" must be %q or %q`, OutputKeepHead, OutputKeepTail)
		}
		x.OutputKeep = s
	}
	return nil
}

// maxUser bounds "user"; a login name is at most 32 bytes on Linux.
const maxUser = 256

// input reads "input" and "inputEncoding" into x.
func (m *Message) input(x *Execute) *Error {
	encoding := ""
	if raw, present := m.optional("inputEncoding"); present {
		encoding, _ = decodeString(raw)
		if encoding != "base64" && encoding != "utf-8" {
			return badExecute(`"inputEncoding" must be "base64" (or "utf-8", the default)`)
		}
	}
	raw, present := m.optional("input")
	if !present {
		return nil
	}
	text, ok := decodeString(raw)
	if !ok {
		return badExecute(`"input" must be a string`)
	}
	x.HasInput = true
	if encoding != "base64" {
		x.Input = []byte(text)
		return nil
	}
	b, err := base64.StdEncoding.DecodeString(text)
	if err != nil {
		return badExecute(`"input" is not base64 (standard alphabet, padded): %v`, err)
	}
	x.Input = b
	return nil
}

// boolField reads the optional boolean field name; def when absent.
func (m *Message) boolField(name string, def bool) (bool, *Error) {
	raw, present := m.optional(name)
	if !present {
		return def, nil
	}
	v := def
	if jsonKind(raw) != kindBool || json.Unmarshal(raw, &v) != nil {
		return def, badExecute(`%q must be true or false`, name)
	}
	return v, nil
}

// milliseconds reads the optional field name (timeoutMs, detachMs): an
// integer from 1 to maxTimeoutMs; 0 when absent.
func (m *Message) milliseconds(name string) (int64, *Error) {
	raw, present := m.optional(name)
	if !present {
		return 0, nil
	}
	if jsonKind(raw) != kindNumber {
		return 0, badExecute(`%q must be an integer of at least 1`, name)
	}
	switch v, verdict := parseTimeoutMs(strings.TrimSpace(string(raw))); verdict {
	case timeoutOK:
		return v, nil
	case timeoutTooBig:
		return 0, badExecute(`%q must be at most %d (the longest duration relayd can wait)`, name, int64(maxTimeoutMs))
	default:
		return 0, badExecute(`%q must be an integer of at least 1`, name)
	}
}

// MaxExecutionName bounds the "execution" of an attach; relayd's own names
// ("x-" and a number) are far shorter.
const MaxExecutionName = 64

// Attach validates m as an attach request (section 4.5) and returns the
// name of the execution to take over; it does not look at m.Kind. A failure
// is an *Error of category CatBadRequest that names the field, never its
// value.
func (m *Message) Attach() (string, *Error) {
	name, ok := m.stringField("execution")
	if !ok || name == "" || len(name) > MaxExecutionName {
		return "", newError(CatBadRequest,
			`attach: "execution" must be a non-empty string of at most %d bytes: the execution named by a started or executed message`, MaxExecutionName)
	}
	return name, nil
}

// StdinChunk is a validated stdin message (section 4.6): the next bytes of
// an execution's stdin, and whether they are the last.
type StdinChunk struct {
	Execution string
	Session   string // instead of Execution: keystrokes for a pty session (4.7)
	Data      []byte
	EOF       bool
}

// Stdin validates m as a stdin message; it does not look at m.Kind. A
// failure is an *Error of category CatBadRequest that names the field.
func (m *Message) Stdin() (*StdinChunk, *Error) {
	c := &StdinChunk{}
	if sess, ok, e := m.sessionField("stdin"); e != nil {
		return nil, e
	} else if ok {
		c.Session = sess
	} else {
		name, ok := m.stringField("execution")
		if !ok || name == "" || len(name) > MaxExecutionName {
			return nil, newError(CatBadRequest,
				`stdin: "execution" must be a non-empty string of at most %d bytes: the execution named by a started or executed message`, MaxExecutionName)
		}
		c.Execution = name
	}
	encoding := ""
	if raw, present := m.optional("encoding"); present {
		encoding, _ = decodeString(raw)
		if encoding != "base64" && encoding != "utf-8" {
			return nil, newError(CatBadRequest, `stdin: "encoding" must be "base64" (or "utf-8", the default)`)
		}
	}
	if raw, present := m.optional("data"); present {
		text, ok := decodeString(raw)
		if !ok {
			return nil, newError(CatBadRequest, `stdin: "data" must be a string`)
		}
		if encoding == "base64" {
			b, err := base64.StdEncoding.DecodeString(text)
			if err != nil {
				return nil, newError(CatBadRequest, `stdin: "data" is not base64 (standard alphabet, padded): %v`, err)
			}
			c.Data = b
		} else {
			c.Data = []byte(text)
		}
	}
	if raw, present := m.optional("eof"); present {
		if jsonKind(raw) != kindBool || json.Unmarshal(raw, &c.EOF) != nil {
			return nil, newError(CatBadRequest, `stdin: "eof" must be true or false`)
		}
	}
	return c, nil
}

func badExecute(format string, args ...any) *Error {
	return newError(CatBadRequest, "execute: "+format, args...)
}

// optional returns the raw value of the field name and whether it is present
// and not null.
func (m *Message) optional(name string) (json.RawMessage, bool) {
	raw, ok := m.field(name)
	if !ok || jsonKind(raw) == kindNull {
		return nil, false
	}
	return raw, true
}

// variables validates the object of variables in the field name
// ("environment" or "credentials"). other, when not nil, holds the variables
// of "environment", which the field may not share a name with.
func (m *Message) variables(name string, other map[string]string) (map[string]string, *Error) {
	vars := map[string]string{}
	raw, present := m.optional(name)
	if !present {
		return vars, nil
	}
	var fields map[string]json.RawMessage
	if jsonKind(raw) != kindObject || json.Unmarshal(raw, &fields) != nil {
		return nil, badExecute(`%q must be an object of strings`, name)
	}
	names := make([]string, 0, len(fields))
	for n := range fields {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if !isVariableName(n) {
			return nil, badExecute(`%q name %s is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)`, name, quoteName(n))
		}
		v, ok := decodeString(fields[n])
		if !ok {
			return nil, badExecute(`%q value of %s must be a string`, name, n)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return nil, badExecute(`%q value of %s holds a NUL byte`, name, n)
		}
		if n == resultTokenVar {
			return nil, badExecute(`%q must not set %s: relayd sets it from "resultToken"`, name, resultTokenVar)
		}
		if strings.HasPrefix(n, reservedPrefix) {
			return nil, badExecute(`%q must not set %s: names starting with %s are relayd's own configuration`, name, n, reservedPrefix)
		}
		if _, shared := other[n]; shared {
			return nil, badExecute(`"environment" and %q both set %s`, name, n)
		}
		vars[n] = v
	}
	return vars, nil
}

// isVariableName reports whether s matches [A-Za-z_][A-Za-z0-9_]*.
func isVariableName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// quoteName quotes an invalid variable name for a message, shortened so that
// a huge name cannot make a huge message.
func quoteName(s string) string {
	const keep = 64
	if len(s) <= keep {
		return strconv.Quote(s)
	}
	cut := keep
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "..."
}

// isResultToken reports whether s is exactly 32 lower-case hex digits.
func isResultToken(s string) bool {
	return len(s) == 32 && isLowerHex(s)
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Verdicts of parseTimeoutMs.
const (
	timeoutOK          = iota
	timeoutNotPositive // not an integer, or less than 1
	timeoutTooBig      // an integer above maxTimeoutMs
)

// parseTimeoutMs reads the JSON number literal lit exactly, without floating
// point: 1000, 1e3, 10000e-1 and 1000.0 are all 1000, 1.5 is not an integer,
// and 1e400 is too big (not infinity, not an error of another kind).
func parseTimeoutMs(lit string) (int64, int) {
	s := lit
	neg := false
	if strings.HasPrefix(s, "-") {
		neg, s = true, s[1:]
	}
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	intPart := s[:i]
	s = s[i:]
	frac := ""
	if strings.HasPrefix(s, ".") {
		s = s[1:]
		j := 0
		for j < len(s) && isDigit(s[j]) {
			j++
		}
		if j == 0 {
			return 0, timeoutNotPositive
		}
		frac, s = s[:j], s[j:]
	}
	var exp int64
	if s != "" && (s[0] == 'e' || s[0] == 'E') {
		s = s[1:]
		expNeg := false
		if s != "" && (s[0] == '+' || s[0] == '-') {
			expNeg, s = s[0] == '-', s[1:]
		}
		if s == "" {
			return 0, timeoutNotPositive
		}
		for k := 0; k < len(s); k++ {
			if !isDigit(s[k]) {
				return 0, timeoutNotPositive
			}
			if exp < 1e9 { // beyond that only the sign matters; stay far from overflow
				exp = exp*10 + int64(s[k]-'0')
			}
		}
		s = ""
		if expNeg {
			exp = -exp
		}
	}
	if s != "" || intPart == "" {
		return 0, timeoutNotPositive
	}
	// The value is digits × 10^exp.
	digits := strings.TrimLeft(intPart+frac, "0")
	exp -= int64(len(frac))
	if digits == "" || neg {
		return 0, timeoutNotPositive // zero, or negative
	}
	for strings.HasSuffix(digits, "0") {
		digits = digits[:len(digits)-1]
		exp++
	}
	if exp < 0 {
		return 0, timeoutNotPositive // a fraction remains
	}
	if int64(len(digits))+exp > int64(len(strconv.FormatInt(maxTimeoutMs, 10))) {
		return 0, timeoutTooBig
	}
	v, err := strconv.ParseInt(digits+strings.Repeat("0", int(exp)), 10, 64)
	if err != nil || v > maxTimeoutMs {
		return 0, timeoutTooBig
	}
	return v, timeoutOK
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
