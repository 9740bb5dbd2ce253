package protocol

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// readAll reads lines until an error and returns them with that error.
func readAll(lr *LineReader) ([]string, error) {
	var lines []string
	for {
		line, err := lr.ReadLine()
		if err != nil {
			return lines, err
		}
		lines = append(lines, string(line))
	}
}

func TestLineReader(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		max     int
		want    []string
		wantErr error
	}{
		{"lines", "a\nbc\n", 10, []string{"a", "bc"}, io.EOF},
		{"empty input", "", 10, nil, io.EOF},
		{"crlf", "a\r\nbc\r\n", 10, []string{"a", "bc"}, io.EOF},
		{"blank lines skipped", "\n\r\n\na\n\r\n\nb\n", 10, []string{"a", "b"}, io.EOF},
		{"spaces are not blank", "  \n", 10, []string{"  "}, io.EOF},
		{"lone cr inside kept", "a\rb\n", 10, []string{"a\rb"}, io.EOF},
		{"only one cr dropped", "a\r\r\n", 10, []string{"a\r"}, io.EOF},
		{"exactly max", "abcd\n", 4, []string{"abcd"}, io.EOF},
		{"exactly max with crlf", "abcd\r\n", 4, []string{"abcd"}, io.EOF},
		{"max plus one", "abcde\n", 4, nil, ErrLineTooLong},
		{"max plus one with crlf", "abcde\r\n", 4, nil, ErrLineTooLong},
		{"max plus cr without lf", "abcd\rx\n", 4, nil, ErrLineTooLong},
		{"good line then too long", "ab\nabcde\nab\n", 4, []string{"ab"}, ErrLineTooLong},
		{"partial line at EOF dropped", "a\nbc", 10, []string{"a"}, io.EOF},
		{"partial cr at EOF dropped", "a\n\r", 10, []string{"a"}, io.EOF},
		{"too long partial line at EOF", "a\nabcdefgh", 4, []string{"a"}, ErrLineTooLong},
		{"max of one", "a\n\nb\r\nc\n", 1, []string{"a", "b", "c"}, io.EOF},
		{"nul bytes kept", "a\x00b\n", 10, []string{"a\x00b"}, io.EOF},
	}
	readers := []struct {
		name string
		wrap func(io.Reader) io.Reader
	}{
		{"whole", func(r io.Reader) io.Reader { return r }},
		{"one byte", iotest.OneByteReader},
		{"half", iotest.HalfReader},
		{"data with EOF", iotest.DataErrReader},
	}
	for _, tt := range tests {
		for _, rd := range readers {
			t.Run(tt.name+"/"+rd.name, func(t *testing.T) {
				lr := NewLineReader(rd.wrap(strings.NewReader(tt.in)), tt.max)
				got, err := readAll(lr)
				if !equalStrings(got, tt.want) {
					t.Errorf("lines: got %q; want %q", got, tt.want)
				}
				if err != tt.wantErr {
					t.Errorf("error: got %v; want %v", err, tt.wantErr)
				}
				// Every error is final.
				if _, again := lr.ReadLine(); again != tt.wantErr {
					t.Errorf("error after the end: got %v; want %v", again, tt.wantErr)
				}
			})
		}
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestLineReaderLongLines(t *testing.T) {
	const max = 1 << 20
	tests := []struct {
		name    string
		length  int
		ending  string
		wantErr error
	}{
		{"exactly max", max, "\n", nil},
		{"exactly max crlf", max, "\r\n", nil},
		{"max plus one", max + 1, "\n", ErrLineTooLong},
		{"max plus one crlf", max + 1, "\r\n", ErrLineTooLong},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := strings.Repeat("x", tt.length) + tt.ending + "next\n"
			lr := NewLineReader(strings.NewReader(in), max)
			line, err := lr.ReadLine()
			if err != tt.wantErr {
				t.Fatalf("error: got %v; want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if len(line) != tt.length {
				t.Errorf("line length: got %d; want %d", len(line), tt.length)
			}
			if line, err := lr.ReadLine(); err != nil || string(line) != "next" {
				t.Errorf("next line: got %q, %v; want %q, nil", line, err, "next")
			}
		})
	}
}

// endless yields an endless line of 'x' (one that never ends, as far as
// the reader is concerned, before limit bytes) and counts what was read.
type endless struct {
	read  int64
	limit int64
}

func (e *endless) Read(p []byte) (int, error) {
	if e.read >= e.limit {
		return 0, io.EOF
	}
	if rest := e.limit - e.read; int64(len(p)) > rest {
		p = p[:rest]
	}
	for i := range p {
		p[i] = 'x'
	}
	e.read += int64(len(p))
	return len(p), nil
}

func TestLineReaderMemoryBound(t *testing.T) {
	const max = 1 << 20
	src := &endless{limit: 100 << 20}
	lr := NewLineReader(src, max)
	_, err := lr.ReadLine()
	if err != ErrLineTooLong {
		t.Fatalf("error: got %v; want %v", err, ErrLineTooLong)
	}
	if bound := int64(max + 1 + lineBufSize); src.read > bound {
		t.Errorf("bytes read: got %d; want at most %d (max+1 plus one buffer)", src.read, bound)
	}
	if cap(lr.line) > max+1 {
		t.Errorf("line capacity: got %d; want at most %d", cap(lr.line), max+1)
	}
}

func TestLineReaderReadError(t *testing.T) {
	boom := errors.New("boom")
	r := io.MultiReader(strings.NewReader("a\nb"), iotest.ErrReader(boom))
	lr := NewLineReader(r, 10)
	got, err := readAll(lr)
	if !equalStrings(got, []string{"a"}) {
		t.Errorf("lines: got %q; want %q", got, []string{"a"})
	}
	if err != boom {
		t.Errorf("error: got %v; want %v", err, boom)
	}
}

type stuck struct{}

func (stuck) Read([]byte) (int, error) { return 0, nil }

func TestLineReaderNoProgress(t *testing.T) {
	_, err := NewLineReader(stuck{}, 10).ReadLine()
	if err != io.ErrNoProgress {
		t.Errorf("error: got %v; want %v", err, io.ErrNoProgress)
	}
}

func TestLineReaderSliceValidUntilNextCall(t *testing.T) {
	lr := NewLineReader(bytes.NewReader([]byte("first\nsecond\n")), 10)
	first, _ := lr.ReadLine()
	if string(first) != "first" {
		t.Fatalf("first line: got %q; want %q", first, "first")
	}
	kept := string(first)
	second, _ := lr.ReadLine()
	if string(second) != "second" || kept != "first" {
		t.Errorf("lines: got %q, %q; want %q, %q", kept, second, "first", "second")
	}
}

func TestNewLineReaderPanicsOnBadMax(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Errorf("NewLineReader(r, 0): got no panic; want a panic")
		}
	}()
	NewLineReader(strings.NewReader(""), 0)
}

// CopyBody hands over exactly n raw bytes after a line, those the reader
// had buffered first, and ReadLine goes on right after them; a stream
// that ends inside the body is io.ErrUnexpectedEOF.
func TestLineReaderCopyBody(t *testing.T) {
	body := bytes.Repeat([]byte("\nab\r\n"), 20000) // 100000 bytes of line ends
	in := append(append([]byte("{\"kind\":\"put\"}\n"), body...), "next\n"...)
	for _, r := range []io.Reader{bytes.NewReader(in), iotest.OneByteReader(bytes.NewReader(in))} {
		lr := NewLineReader(r, 64)
		if l, err := lr.ReadLine(); err != nil || string(l) != `{"kind":"put"}` {
			t.Fatalf("first line %q, %v", l, err)
		}
		var got bytes.Buffer
		if err := lr.CopyBody(&got, int64(len(body)), make([]byte, 7)); err != nil || !bytes.Equal(got.Bytes(), body) {
			t.Fatalf("body: %d bytes, %v; want the %d sent", got.Len(), err, len(body))
		}
		if l, err := lr.ReadLine(); err != nil || string(l) != "next" {
			t.Fatalf("line after the body %q, %v", l, err)
		}
	}
	lr := NewLineReader(bytes.NewReader([]byte("x\nabc")), 64)
	_, _ = lr.ReadLine()
	if err := lr.CopyBody(io.Discard, 10, make([]byte, 4)); err != io.ErrUnexpectedEOF {
		t.Fatalf("a body cut short: %v; want io.ErrUnexpectedEOF", err)
	}
	if _, err := lr.ReadLine(); err != io.ErrUnexpectedEOF {
		t.Fatalf("after a body cut short, ReadLine: %v; want the same error", err)
	}
}
