package protocol

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// WriteLine writes v as one line of JSON: exactly the bytes of
// json.Marshal(v) and a newline.
//
// An executed reply with a long stdout is written as it is encoded, in
// pieces, instead of being built whole first: escaping can make stdout six
// times longer (a NUL is \u0000), and building the line whole (json.Marshal,
// whose MarshalJSON output json.Marshal copies again, then the newline
// appended) held about twenty times the capture in memory at once. Written
// in pieces it holds the capture and one piece.
//
// A failure to encode (nothing is written then) wraps ErrEncoding; any
// other error is the writer's.
func WriteLine(w io.Writer, v any) error {
	if e, ok := v.(Executed); ok && len(e.Stdout) > streamAbove {
		return writeExecuted(w, e)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrEncoding, err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// ErrEncoding is a reply that could not be encoded.
var ErrEncoding = errors.New("protocol: a reply could not be encoded")

// streamAbove is the stdout length past which an executed reply is
// streamed; pieceBytes is the length of stdout escaped at a time. Tests
// make them small.
var (
	streamAbove = 64 << 10
	pieceBytes  = 32 << 10
)

// The fields of Executed before and after stdout, in the same order and
// with the same tags. TestWriteLineMatchesMarshal keeps them in step.
type executedHead struct {
	Token       string          `json:"token,omitempty"`
	Kind        string          `json:"kind"`
	ID          json.RawMessage `json:"id,omitempty"`
	Termination string          `json:"termination"`
	ExitCode    int             `json:"exitCode"`
}

type executedTail struct {
	Diagnostic       Diagnostic `json:"diagnostic"`
	Execution        string     `json:"execution"`
	Settlement       string     `json:"settlement"`
	Survivors        []Survivor `json:"survivors"`
	SurvivorsOmitted int        `json:"survivorsOmitted,omitempty"`
	Scope            ScopeInfo  `json:"scope"`
	Signal           string     `json:"signal,omitempty"`
	StdoutTruncated  *bool      `json:"stdoutTruncated,omitempty"`
	Stderr           *string    `json:"stderr,omitempty"`
	StderrTruncated  *bool      `json:"stderrTruncated,omitempty"`
	Detail           string     `json:"detail,omitempty"`
	DurationMs       int64      `json:"durationMs"`
	Ignored          []string   `json:"ignored,omitempty"`
	Usage            *Usage     `json:"usage,omitempty"`
	Cause            string     `json:"cause,omitempty"`
	Limit            string     `json:"limit,omitempty"`
	Limits           Limits     `json:"limits,omitempty"`
	Session          string     `json:"session,omitempty"`
	Cwd              string     `json:"cwd,omitempty"`
	SessionEnded     bool       `json:"sessionEnded,omitempty"`
}

func writeExecuted(w io.Writer, e Executed) error {
	if e.Survivors == nil {
		e.Survivors = []Survivor{}
	}
	head, err := json.Marshal(executedHead{e.Token, e.Kind, e.ID, e.Termination, e.ExitCode})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrEncoding, err)
	}
	tail, err := json.Marshal(executedTail{e.Diagnostic, e.Execution, e.Settlement, e.Survivors, e.SurvivorsOmitted, e.Scope,
		e.Signal, e.StdoutTruncated, e.Stderr, e.StderrTruncated, e.Detail, e.DurationMs, e.Ignored,
		e.Usage, e.Cause, e.Limit, e.Limits, e.Session, e.Cwd, e.SessionEnded})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrEncoding, err)
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.Write(head[:len(head)-1])
	bw.WriteString(`,"stdout":"`)
	var piece bytes.Buffer
	enc := json.NewEncoder(&piece)
	for s := e.Stdout; len(s) > 0; {
		n := runeCut(s, pieceBytes)
		piece.Reset()
		_ = enc.Encode(s[:n]) // a string always encodes
		b := piece.Bytes()
		bw.Write(b[1 : len(b)-2]) // less the quotes and Encode's newline
		s = s[n:]
	}
	bw.WriteString(`",`)
	bw.Write(tail[1:])
	bw.WriteByte('\n')
	return bw.Flush() // a failed write is kept and reported here
}

// runeCut returns a length of at most n (n when s is longer) that does not
// split a UTF-8 sequence of s, so that each piece escapes as it would
// inside the whole: a sequence is at most 4 bytes, so its first byte is at
// most 3 bytes back.
func runeCut(s string, n int) int {
	if len(s) <= n {
		return len(s)
	}
	for i := 0; i < utf8.UTFMax && i < n; i++ {
		if utf8.RuneStart(s[n-i]) {
			return n - i
		}
	}
	return n
}
