package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
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

// The hand encoder (encode.go) writes json.Marshal's bytes with every
// field of Executed set, each alone and all together: a field added to
// Executed and not to the encoder fails here, also one that is omitted
// when empty.
func TestAppendExecutedIsMarshal(t *testing.T) {
	yes, no, stderr := true, false, "e<r>r\n"
	full := reflect.ValueOf(&Executed{}).Elem()
	set := func(v reflect.Value, name string) {
		switch name {
		case "ID":
			v.Set(reflect.ValueOf(json.RawMessage(`{"a": [1, "<b>"]}`)))
		case "Diagnostic":
			v.Set(reflect.ValueOf(countedDiagnostic(DiagOversize, []byte("x"))))
		case "Survivors":
			v.Set(reflect.ValueOf([]Survivor{{PID: 3, Argv: []string{"sleep", "<9>"}, Listens: []int{80}}}))
		case "Scope":
			v.Set(reflect.ValueOf(ScopeInfo{Mechanism: "cgroup"}))
		case "StdoutTruncated":
			v.Set(reflect.ValueOf(&yes))
		case "StderrTruncated":
			v.Set(reflect.ValueOf(&no))
		case "Stderr":
			v.Set(reflect.ValueOf(&stderr))
		case "Ignored":
			v.Set(reflect.ValueOf([]string{"timeoutMS", "\u2028"}))
		case "Usage":
			v.Set(reflect.ValueOf(&Usage{1, 2, 3, 4, 5, -6}))
		case "Limits":
			v.Set(reflect.ValueOf(Limits{"pids": 9, "cpuSeconds": 1}))
		default:
			switch v.Kind() {
			case reflect.String:
				v.SetString("v\u00e9\u2029<" + name)
			case reflect.Int, reflect.Int64:
				v.SetInt(-7)
			case reflect.Bool:
				v.SetBool(true)
			default:
				t.Fatalf("field %s (%s): give it a value here", name, v.Type())
			}
		}
	}
	check := func(what string, e Executed) {
		t.Helper()
		want, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := WriteLine(&got, e); err != nil {
			t.Fatal(err)
		}
		if got.String() != string(want)+"\n" {
			t.Fatalf("%s:\nWriteLine %s\nMarshal   %s", what, got.String(), want)
		}
	}
	check("zero", Executed{})
	rt := full.Type()
	for i := 0; i < rt.NumField(); i++ {
		one := reflect.ValueOf(&Executed{}).Elem()
		set(one.Field(i), rt.Field(i).Name)
		check(rt.Field(i).Name, one.Interface().(Executed))
		set(full.Field(i), rt.Field(i).Name)
	}
	check("all", full.Interface().(Executed))
}

// appendString escapes as encoding/json does, for any bytes.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "a", "\x00\n\"\\<>&\u2028\u2029\xff\x80é€𝄞\x7f\b\f\t\r", "\xe2\x80", "\xed\xa0\x80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := appendString(nil, s); string(got) != string(want) {
			t.Fatalf("appendString(%q) = %s; json.Marshal %s", s, got, want)
		}
		id := json.RawMessage(s)
		wantID, werr := json.Marshal(id)
		gotID, gerr := appendRaw(nil, id)
		if (werr == nil) != (gerr == nil) || (werr == nil && string(gotID) != string(wantID)) {
			t.Fatalf("appendRaw(%q) = %s, %v; json.Marshal %s, %v", s, gotID, gerr, wantID, werr)
		}
	})
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
