package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Error is a protocol error: a category (one of the Cat constants) and a
// message for people that says what was wrong and where. It is the "error"
// object of an error reply.
type Error struct {
	Category string `json:"category"`
	Message  string `json:"message"`
}

// Error returns "category: message".
func (e *Error) Error() string {
	return e.Category + ": " + e.Message
}

func newError(category, format string, args ...any) *Error {
	return &Error{Category: category, Message: fmt.Sprintf(format, args...)}
}

// Message is one decoded controller message: a top-level JSON object.
type Message struct {
	Kind     string          // "" when absent or not a string
	Token    string          // "" when absent or not a string
	HasToken bool            // "token" is present and a string
	ID       json.RawMessage // nil when absent or null; else the raw JSON of a string or number, to echo

	// fields holds the raw value of each top-level field that relayd reads
	// (fieldNames), the last one when a name appears twice; nil when absent.
	// They are slices of the decoded line. No other field is kept.
	fields [len(fieldNames)]json.RawMessage

	line    []byte // the decoded line, which Ignored walks again
	unknown bool   // a top-level key matched none of fieldNames
}

// fieldNames are the top-level fields relayd reads: those of every message,
// then execute's (section 4), then attach's (section 4.5), stdin's and
// verify's (4.6). Decode finds these and skips every other.
var fieldNames = [...]string{"kind", "token", "id",
	"command", "args", "environment", "credentials", "resultToken", "captureStdout", "cwd", "timeoutMs",
	"captureStderr", "stream", "onExit", "detachMs", // execute's extensions (section 4.5)
	"input", "inputEncoding", "stdin", "user", // execute's extensions (section 4.6)
	"maxOutputBytes", "outputKeep", // execute's output limits (relayd's, docs/protocol.md 4.6)
	"limits",                  // execute's resource limits (section 4.8)
	"execution",               // attach's and stdin's
	"data", "encoding", "eof", // stdin's (section 4.6)
	"all", "survivors", "keep", // verify's trial boundary (section 4.6)
	"path", "more", "mode", "parents", // put's and get's besides user and data (files.go, section 4.6)
	"pty", "rows", "cols", // execute's terminal, and resize's (pty.go, section 4.7)
	"body",                                   // put's and get's bulk bodies (files.go, section 4.6)
	"format", "exclude", "replace", "owners", // trees (files.go, section 4.6)
	"session", "script", "shell", // shell sessions (session.go, section 4.7)
	"from", "waitMs", "idleMs", // a pty session's read (session.go)
	"links",                          // a tree put's symbolic links (files.go, section 4.6)
	"name", "paths", "mark", "files", // marks (marks.go, section 4.9); verify's files
}

// The ranges of fieldNames that each kind reads besides the first
// commonFields (kind, token, id), which every kind reads.
const (
	commonFields           = 3
	executeFrom, executeTo = 3, 22
	attachFrom, attachTo   = 22, 23
	stdinFrom, stdinTo     = 22, 26
	verifyFrom, verifyTo   = 26, 29
)

// maxFieldName is the length of the longest of fieldNames.
const maxFieldName = len("maxOutputBytes")

// field returns the raw value of the top-level field name and whether it
// is present; name must be one of fieldNames.
func (m *Message) field(name string) (json.RawMessage, bool) {
	for i, n := range fieldNames {
		if n == name {
			return m.fields[i], m.fields[i] != nil
		}
	}
	return nil, false
}

// Decode parses one message line, as returned by LineReader.ReadLine. Every
// error is an *Error:
//
//   - the line is not valid UTF-8, not JSON, or JSON that is not an object:
//     CatBadJSON, and the returned Message is nil;
//   - "id" is present but neither a string, a number nor null: CatBadRequest.
//     The returned Message is then non-nil, with Kind, Token and HasToken
//     filled in (ID nil), so that the caller can check authentication before
//     answering the bad request.
//
// A null "id" counts as absent. When a field appears twice, the last one
// counts; keys are compared after unescaping, case-exact. Decode never
// panics, whatever the input.
//
// Decode builds nothing but Kind, Token and ID: it checks the line's syntax
// (encoding/json's, which keeps no values), then walks the top-level
// object, skipping the value of every field not in fieldNames and keeping
// the others as slices of line, so that a line costs no memory beyond its
// own bytes however many fields it has (rule 6.11: the token is checked
// before the rest of a message is built). The rest is built by Execute,
// which reads line: line must not change while the Message is used.
//
// Callers should keep the result in a *Error variable: a nil *Error stored in
// an error interface is not a nil error.
func Decode(line []byte) (*Message, *Error) {
	if !utf8.Valid(line) {
		return nil, newError(CatBadJSON, "message is not valid UTF-8 (bad byte at offset %d)", invalidUTF8Offset(line))
	}
	if !json.Valid(line) {
		// Unmarshal checks the syntax before it builds anything, and says
		// what is wrong where.
		var nothing struct{}
		err := json.Unmarshal(line, &nothing)
		if err == nil { // cannot happen: Valid and Unmarshal share a scanner
			err = errors.New("invalid JSON")
		}
		return nil, newError(CatBadJSON, "message is not JSON: %s", err.Error())
	}
	if jsonKind(line) != kindObject {
		return nil, newError(CatBadJSON, "message is not a JSON object (it is %s)", jsonKindName(line))
	}
	m := &Message{line: line}
	walkObject(line, func(key, value []byte) {
		if i := fieldIndex(key); i >= 0 {
			m.fields[i] = value
		} else {
			m.unknown = true
		}
	})
	m.Kind, _ = m.stringField("kind")
	m.Token, m.HasToken = m.stringField("token")
	if raw, ok := m.field("id"); ok && jsonKind(raw) != kindNull {
		id, err := checkID(raw)
		if err != nil {
			return m, err
		}
		m.ID = append(json.RawMessage(nil), id...) // a reply may outlive the line
	}
	return m, nil
}

// fieldIndex returns the index in fieldNames of the raw JSON string key (its
// quotes excluded), unescaped, or -1.
func fieldIndex(key []byte) int {
	var buf [maxFieldName]byte
	name, ok := unescapeShort(key, buf[:0])
	if !ok {
		return -1
	}
	for i, n := range fieldNames {
		if string(name) == n {
			return i
		}
	}
	return -1
}

// MaxIDBytes bounds a string "id"; MaxIDInteger bounds an integer one, so
// that every controller language decodes it exactly (section 4).
const (
	MaxIDBytes         = 256
	MaxIDInteger int64 = 1<<53 - 1
)

// checkID returns the raw JSON of a valid "id", to echo: a string of at most
// MaxIDBytes bytes, or an integer written without fraction or exponent
// within ±MaxIDInteger.
func checkID(raw json.RawMessage) (json.RawMessage, *Error) {
	raw = bytes.TrimSpace(raw)
	switch jsonKind(raw) {
	case kindString:
		s, ok := decodeString(raw)
		if !ok || len(s) > MaxIDBytes {
			return nil, newError(CatBadRequest, `"id" string is longer than %d bytes`, MaxIDBytes)
		}
		return raw, nil
	case kindNumber:
		digits := raw
		if digits[0] == '-' {
			digits = digits[1:]
		}
		if len(digits) == 0 || len(digits) > 16 || !allDigits(digits) {
			return nil, newError(CatBadRequest, `"id" number must be an integer from -%d to %d, without fraction or exponent`, MaxIDInteger, MaxIDInteger)
		}
		n, err := strconv.ParseInt(string(digits), 10, 64)
		if err != nil || n > MaxIDInteger {
			return nil, newError(CatBadRequest, `"id" number must be an integer from -%d to %d, without fraction or exponent`, MaxIDInteger, MaxIDInteger)
		}
		return raw, nil
	}
	return nil, newError(CatBadRequest, `"id" must be a string or an integer`)
}

func allDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// stringField returns the value of the top-level field name and true when
// it is present and a string.
func (m *Message) stringField(name string) (string, bool) {
	raw, ok := m.field(name)
	if !ok {
		return "", false
	}
	return decodeString(raw)
}

// decodeString returns the value of raw and true when raw is a JSON string
// (of a line that Decode found valid), as encoding/json decodes it, with a
// single allocation of at most len(raw) bytes.
func decodeString(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if jsonKind(raw) != kindString || len(raw) < 2 || raw[len(raw)-1] != '"' {
		return "", false
	}
	return unquote(raw[1 : len(raw)-1])
}

func invalidUTF8Offset(b []byte) int {
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size <= 1 {
			return i
		}
		i += size
	}
	return len(b)
}

// JSON value kinds, told apart by a value's first byte.
const (
	kindInvalid = iota
	kindNull
	kindBool
	kindNumber
	kindString
	kindArray
	kindObject
)

// jsonKind returns the kind of the JSON value raw, which is assumed to be
// valid JSON (leading white space allowed).
func jsonKind(raw []byte) int {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return kindInvalid
	}
	switch c := raw[0]; {
	case c == 'n':
		return kindNull
	case c == 't' || c == 'f':
		return kindBool
	case c == '"':
		return kindString
	case c == '[':
		return kindArray
	case c == '{':
		return kindObject
	case c == '-' || c >= '0' && c <= '9':
		return kindNumber
	}
	return kindInvalid
}

func jsonKindName(raw []byte) string {
	switch jsonKind(raw) {
	case kindNull:
		return "null"
	case kindBool:
		return "a boolean"
	case kindNumber:
		return "a number"
	case kindString:
		return "a string"
	case kindArray:
		return "an array"
	case kindObject:
		return "an object"
	}
	return "not a JSON value"
}
