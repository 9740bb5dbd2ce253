package protocol

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// The executed reply, encoded by hand: it is written once per execute, and
// encoding/json's reflection over it (its Diagnostic's MarshalJSON, whose
// output json.Marshal validates and copies again) was a tenth of relayd's
// CPU time in the round-trip benchmark. The bytes are exactly
// json.Marshal's: TestAppendExecutedIsMarshal sets every field, and
// FuzzAppendString compares the escaping. Values encoding/json would
// reject or that rarely occur (an id that is not a plain number or string,
// survivors, limits) go through json.Marshal.

// appendExecutedHead appends e's fields before stdout, from the opening
// brace to exitCode's value.
func appendExecutedHead(b []byte, e *Executed) ([]byte, error) {
	b = append(b, '{')
	if e.Token != "" {
		b = append(b, `"token":`...)
		b = appendString(b, e.Token)
		b = append(b, ',')
	}
	b = append(b, `"kind":`...)
	b = appendString(b, e.Kind)
	if len(e.ID) > 0 {
		b = append(b, `,"id":`...)
		var err error
		if b, err = appendRaw(b, e.ID); err != nil {
			return nil, err
		}
	}
	b = append(b, `,"termination":`...)
	b = appendString(b, e.Termination)
	b = append(b, `,"exitCode":`...)
	return strconv.AppendInt(b, int64(e.ExitCode), 10), nil
}

// appendExecutedTail appends e's fields after stdout, from diagnostic's
// name to the closing brace.
func appendExecutedTail(b []byte, e *Executed) ([]byte, error) {
	b = append(b, `"diagnostic":`...)
	b = e.Diagnostic.appendJSON(b)
	b = append(b, `,"execution":`...)
	b = appendString(b, e.Execution)
	b = append(b, `,"settlement":`...)
	b = appendString(b, e.Settlement)
	b = append(b, `,"survivors":`...)
	if len(e.Survivors) == 0 {
		b = append(b, "[]"...)
	} else {
		s, err := json.Marshal(e.Survivors)
		if err != nil {
			return nil, err
		}
		b = append(b, s...)
	}
	if e.SurvivorsOmitted != 0 {
		b = append(b, `,"survivorsOmitted":`...)
		b = strconv.AppendInt(b, int64(e.SurvivorsOmitted), 10)
	}
	b = append(b, `,"scope":{"mechanism":`...)
	b = appendString(b, e.Scope.Mechanism)
	b = append(b, '}')
	if e.Signal != "" {
		b = append(b, `,"signal":`...)
		b = appendString(b, e.Signal)
	}
	if e.StdoutTruncated != nil {
		b = append(b, `,"stdoutTruncated":`...)
		b = strconv.AppendBool(b, *e.StdoutTruncated)
	}
	if e.Stderr != nil {
		b = append(b, `,"stderr":`...)
		b = appendString(b, *e.Stderr)
	}
	if e.StderrTruncated != nil {
		b = append(b, `,"stderrTruncated":`...)
		b = strconv.AppendBool(b, *e.StderrTruncated)
	}
	if e.Detail != "" {
		b = append(b, `,"detail":`...)
		b = appendString(b, e.Detail)
	}
	b = append(b, `,"durationMs":`...)
	b = strconv.AppendInt(b, e.DurationMs, 10)
	if len(e.Ignored) > 0 {
		b = append(b, `,"ignored":[`...)
		for i, s := range e.Ignored {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, s)
		}
		b = append(b, ']')
	}
	if u := e.Usage; u != nil {
		b = append(b, `,"usage":`...)
		b = u.appendJSON(b)
	}
	if e.Cause != "" {
		b = append(b, `,"cause":`...)
		b = appendString(b, e.Cause)
	}
	if e.Limit != "" {
		b = append(b, `,"limit":`...)
		b = appendString(b, e.Limit)
	}
	if len(e.Limits) > 0 {
		l, err := json.Marshal(e.Limits)
		if err != nil {
			return nil, err
		}
		b = append(b, `,"limits":`...)
		b = append(b, l...)
	}
	if e.Session != "" {
		b = append(b, `,"session":`...)
		b = appendString(b, e.Session)
	}
	if e.Cwd != "" {
		b = append(b, `,"cwd":`...)
		b = appendString(b, e.Cwd)
	}
	if e.SessionEnded {
		b = append(b, `,"sessionEnded":true`...)
	}
	return append(b, '}'), nil
}

// appendJSON appends u as json.Marshal writes it.
func (u *Usage) appendJSON(b []byte) []byte {
	b = append(b, `{"cpuUserMs":`...)
	b = strconv.AppendInt(b, u.CPUUserMs, 10)
	b = append(b, `,"cpuSystemMs":`...)
	b = strconv.AppendInt(b, u.CPUSystemMs, 10)
	b = append(b, `,"maxRssBytes":`...)
	b = strconv.AppendInt(b, u.MaxRSSBytes, 10)
	b = append(b, `,"processes":`...)
	b = strconv.AppendInt(b, u.Processes, 10)
	b = append(b, `,"readBytes":`...)
	b = strconv.AppendInt(b, u.ReadBytes, 10)
	b = append(b, `,"writeBytes":`...)
	b = strconv.AppendInt(b, u.WriteBytes, 10)
	return append(b, '}')
}

// appendRaw appends a raw JSON value as json.Marshal writes a
// json.RawMessage: a plain number or a string of safe characters as it is,
// anything else through json.Marshal (which compacts, escapes and checks
// it).
func appendRaw(b []byte, raw json.RawMessage) ([]byte, error) {
	if plainRaw(raw) {
		return append(b, raw...), nil
	}
	m, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	return append(b, m...), nil
}

// plainRaw is whether json.Marshal writes raw as it is: a valid number, or
// a string whose characters it writes as they are.
func plainRaw(raw []byte) bool {
	if n := len(raw); n >= 2 && raw[0] == '"' && raw[n-1] == '"' {
		for _, c := range raw[1 : n-1] {
			if !htmlSafe(c) {
				return false
			}
		}
		return true
	}
	for _, c := range raw {
		if (c < '0' || c > '9') && c != '-' && c != '.' && c != 'e' && c != 'E' && c != '+' {
			return false
		}
	}
	return len(raw) > 0 && json.Valid(raw)
}

// htmlSafe is whether encoding/json writes the ASCII byte c inside a
// string as it is (it escapes controls, '"', '\\', and, as json.Marshal
// does by default, '<', '>' and '&').
func htmlSafe(c byte) bool {
	return c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' && c < utf8.RuneSelf
}

// appendString appends s as a JSON string, as json.Marshal writes it.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	b = appendStringBody(b, s)
	return append(b, '"')
}

const hexDigits = "0123456789abcdef"

// appendStringBody appends s escaped as json.Marshal escapes a string,
// without the quotes: invalid UTF-8 becomes U+FFFD, U+2028 and U+2029 are
// escaped, and so are '<', '>' and '&'.
func appendStringBody(b []byte, s string) []byte {
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if htmlSafe(c) {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(b, s[start:]...)
}
