package protocol

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// The execute fields of section 4.6: input (text or base64), stdin, user.
func TestExecuteStdinAndUser(t *testing.T) {
	tests := []struct {
		line     string
		input    []byte
		hasInput bool
		stdin    bool
		user     string
		wantErr  string
	}{
		{line: `{"command":"x"}`},
		{line: `{"command":"x","input":"a\u0000b"}`, input: []byte("a\x00b"), hasInput: true},
		{line: `{"command":"x","input":""}`, input: []byte{}, hasInput: true},
		{line: `{"command":"x","input":"/wA=","inputEncoding":"base64"}`, input: []byte{0xff, 0}, hasInput: true},
		{line: `{"command":"x","input":"hi","inputEncoding":"utf-8","stdin":true}`, input: []byte("hi"), hasInput: true, stdin: true},
		{line: `{"command":"x","stdin":true,"user":"agent:staff"}`, stdin: true, user: "agent:staff"},
		{line: `{"command":"x","input":null,"stdin":null,"user":null}`},
		{line: `{"command":"x","input":5}`, wantErr: `execute: "input" must be a string`},
		{line: `{"command":"x","input":"%%","inputEncoding":"base64"}`, wantErr: `execute: "input" is not base64`},
		{line: `{"command":"x","input":"x","inputEncoding":"hex"}`, wantErr: `execute: "inputEncoding" must be`},
		{line: `{"command":"x","stdin":1}`, wantErr: `execute: "stdin" must be true or false`},
		{line: `{"command":"x","user":""}`, wantErr: `execute: "user" must be`},
		{line: `{"command":"x","user":7}`, wantErr: `execute: "user" must be`},
		{line: `{"command":"x","user":"a\u0000"}`, wantErr: `execute: "user" must be`},
	}
	for _, tt := range tests {
		x, e := decodeExecute(t, tt.line)
		if tt.wantErr != "" {
			if e == nil || e.Category != CatBadRequest || !strings.HasPrefix(e.Message, tt.wantErr) {
				t.Errorf("Execute(%s): got %v; want a bad-request starting %q", tt.line, e, tt.wantErr)
			}
			continue
		}
		if e != nil {
			t.Fatalf("Execute(%s): %v", tt.line, e)
		}
		if !bytes.Equal(x.Input, tt.input) || x.HasInput != tt.hasInput || x.Stdin != tt.stdin || x.User != tt.user || x.Ignored != nil {
			t.Errorf("Execute(%s): got input %q (%v), stdin %v, user %q, ignored %v; want %q (%v), %v, %q, none",
				tt.line, x.Input, x.HasInput, x.Stdin, x.User, x.Ignored, tt.input, tt.hasInput, tt.stdin, tt.user)
		}
	}
}

func TestStdinMessage(t *testing.T) {
	tests := []struct {
		line    string
		want    StdinChunk
		wantErr string
	}{
		{line: `{"kind":"stdin","execution":"x-1","data":"hi"}`, want: StdinChunk{Execution: "x-1", Data: []byte("hi")}},
		{line: `{"kind":"stdin","execution":"x-1","data":"AAE=","encoding":"base64","eof":true}`, want: StdinChunk{Execution: "x-1", Data: []byte{0, 1}, EOF: true}},
		{line: `{"kind":"stdin","execution":"x-1","eof":true}`, want: StdinChunk{Execution: "x-1", EOF: true}},
		{line: `{"kind":"stdin","data":"hi"}`, wantErr: `stdin: "execution" must be`},
		{line: `{"kind":"stdin","execution":"x-1","data":7}`, wantErr: `stdin: "data" must be a string`},
		{line: `{"kind":"stdin","execution":"x-1","data":"%%","encoding":"base64"}`, wantErr: `stdin: "data" is not base64`},
		{line: `{"kind":"stdin","execution":"x-1","encoding":"rot13"}`, wantErr: `stdin: "encoding" must be`},
		{line: `{"kind":"stdin","execution":"x-1","eof":"yes"}`, wantErr: `stdin: "eof" must be true or false`},
	}
	for _, tt := range tests {
		m, e := Decode([]byte(tt.line))
		if e != nil {
			t.Fatalf("Decode(%s): %v", tt.line, e)
		}
		if ig := m.Ignored(); ig != nil {
			t.Errorf("Ignored(%s) = %v; want none: stdin reads each of its fields", tt.line, ig)
		}
		got, e := m.Stdin()
		switch {
		case tt.wantErr == "" && (e != nil || !reflect.DeepEqual(*got, tt.want)):
			t.Errorf("Stdin(%s): got %+v, %v; want %+v", tt.line, got, e, tt.want)
		case tt.wantErr != "" && (e == nil || e.Category != CatBadRequest || !strings.HasPrefix(e.Message, tt.wantErr)):
			t.Errorf("Stdin(%s): got %v; want a bad-request starting %q", tt.line, e, tt.wantErr)
		}
	}
}
