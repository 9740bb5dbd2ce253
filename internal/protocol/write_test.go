package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// WriteLine writes exactly json.Marshal's bytes and a newline, for executed
// replies streamed in pieces too: every byte value, multi-byte runes and
// invalid UTF-8 across piece boundaries, HTML characters and U+2028.
func TestWriteLineMatchesMarshal(t *testing.T) {
	defer func(a, p int) { streamAbove, pieceBytes = a, p }(streamAbove, pieceBytes)
	streamAbove, pieceBytes = 8, 7
	truncated := true
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "\x00", "\n", `"`, `\`, "<", ">", "&", "é", "€", "𝄞", "\u2028", "\xff", "\x80", "\xe2\x82", "\t", "\x1f"}
	for i := 0; i < 2000; i++ {
		var sb strings.Builder
		for j := rng.IntN(60); j > 0; j-- {
			sb.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		e := Executed{Token: "tok", Kind: "executed", ID: json.RawMessage(`{"stdout":"x"}`), Termination: Exited,
			ExitCode: i % 3, Stdout: sb.String(), Diagnostic: countedDiagnostic(DiagOversize, []byte("x")),
			Execution: "x-1", Settlement: SettleNone, Scope: ScopeInfo{Mechanism: "cgroup"}, DurationMs: 7}
		switch i % 4 {
		case 1:
			e.Survivors = []Survivor{{PID: 3, Argv: []string{"sleep", "<9>"}}}
			e.SurvivorsOmitted = 2
			e.Signal = "SIGKILL"
		case 2:
			e.StdoutTruncated = &truncated
			e.Detail = "d"
			e.Token, e.ID = "", nil
		}
		want, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := WriteLine(&got, e); err != nil {
			t.Fatal(err)
		}
		if got.String() != string(want)+"\n" {
			t.Fatalf("stdout %q:\nWriteLine %s\nMarshal   %s", e.Stdout, got.String(), want)
		}
	}
}

// The fields before and after stdout are Executed's, in order and with the
// same tags: a field added to Executed and not to them fails here, also one
// that is omitted when empty (which marshalling a zero Executed would not
// show).
func TestExecutedPartsCoverExecuted(t *testing.T) {
	tags := func(v any) []string {
		var out []string
		rt := reflect.TypeOf(v)
		for i := 0; i < rt.NumField(); i++ {
			out = append(out, rt.Field(i).Name+" "+rt.Field(i).Tag.Get("json"))
		}
		return out
	}
	parts := append(append(tags(executedHead{}), "Stdout stdout"), tags(executedTail{})...)
	if whole := tags(Executed{}); !slices.Equal(whole, parts) {
		t.Fatalf("Executed has the fields\n%q\nhead, stdout and tail have\n%q", whole, parts)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("peer gone") }

// A failed write is reported.
func TestWriteLineReportsFailure(t *testing.T) {
	e := Executed{Kind: "executed", Stdout: strings.Repeat("\x00", 1<<20)}
	if err := WriteLine(failWriter{}, e); err == nil {
		t.Fatal("WriteLine to a failing writer reported no error")
	}
}

// Memory of a 1 MiB stdout of NULs (6 MiB once escaped): json.Marshal
// against WriteLine. Run with -benchmem.
func BenchmarkWriteLine(b *testing.B) {
	e := Executed{Kind: "executed", Stdout: strings.Repeat("\x00", 1<<20)}
	b.Run("marshal", func(b *testing.B) {
		for b.Loop() {
			out, _ := json.Marshal(e)
			_ = append(out, '\n')
		}
	})
	b.Run("WriteLine", func(b *testing.B) {
		for b.Loop() {
			_ = WriteLine(discard{}, e)
		}
	})
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// An encoding failure is ErrEncoding, and nothing is written.
func TestWriteLineEncodingFailure(t *testing.T) {
	for _, v := range []any{
		Executed{Kind: "executed", ID: json.RawMessage(`{bad`)},
		Executed{Kind: "executed", ID: json.RawMessage(`{bad`), Stdout: strings.Repeat("x", 1<<20)},
	} {
		var out bytes.Buffer
		err := WriteLine(&out, v)
		if !errors.Is(err, ErrEncoding) || out.Len() != 0 {
			t.Fatalf("WriteLine = %v, wrote %d bytes; want ErrEncoding and nothing written", err, out.Len())
		}
	}
}
