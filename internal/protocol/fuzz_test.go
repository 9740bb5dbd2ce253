package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"unicode/utf8"
)

// modelLines is the LineReader's contract written the simple way, on a
// whole input at once.
func modelLines(data []byte, max int) ([]string, error) {
	var lines []string
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			if len(data) > max+1 {
				return lines, ErrLineTooLong
			}
			return lines, io.EOF
		}
		line := bytes.TrimSuffix(data[:i], []byte("\r"))
		data = data[i+1:]
		if len(line) > max {
			return lines, ErrLineTooLong
		}
		if len(line) > 0 {
			lines = append(lines, string(line))
		}
	}
}

func FuzzLineReader(f *testing.F) {
	f.Add([]byte("a\nbc\r\n\n\r\nd"), uint16(4))
	f.Add([]byte("abcde\n"), uint16(4))
	f.Add([]byte("abcd\r\n"), uint16(4))
	f.Add([]byte("abcd\rx\n"), uint16(4))
	f.Add([]byte("\r\r\r\n\x00\n"), uint16(1))
	f.Add([]byte(strings.Repeat("x", 600)+"\n"), uint16(599))
	f.Add([]byte(`{"token":"T","kind":"ready"}`+"\n"), uint16(1024))
	f.Fuzz(func(t *testing.T, data []byte, max16 uint16) {
		max := int(max16)%1000 + 1
		wantLines, wantErr := modelLines(data, max)
		for _, wrap := range []func(io.Reader) io.Reader{
			func(r io.Reader) io.Reader { return r },
			iotest.OneByteReader,
			iotest.HalfReader,
			iotest.DataErrReader,
		} {
			lr := NewLineReader(wrap(bytes.NewReader(data)), max)
			got, err := readAll(lr)
			if !equalStrings(got, wantLines) || err != wantErr {
				t.Fatalf("ReadLine with max %d: got %q, %v; want %q, %v", max, got, err, wantLines, wantErr)
			}
			if cap(lr.line) > max+1 {
				t.Fatalf("held line capacity: got %d; want at most %d", cap(lr.line), max+1)
			}
		}
	})
}

var knownDecodeCategories = map[string]bool{CatBadJSON: true, CatBadRequest: true}

// referenceDecode is Decode written the simple way: encoding/json builds
// every top-level field, then the known ones are picked out. Decode must
// agree with it on every line (it was Decode until the token had to be
// checked before a message is built, rule 6.11).
func referenceDecode(line []byte) (*Message, *Error) {
	if !utf8.Valid(line) {
		return nil, newError(CatBadJSON, "message is not valid UTF-8 (bad byte at offset %d)", invalidUTF8Offset(line))
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(line, &fields); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return nil, newError(CatBadJSON, "message is not a JSON object (it is %s)", jsonKindName(line))
		}
		return nil, newError(CatBadJSON, "message is not JSON: %s", err.Error())
	}
	if fields == nil {
		return nil, newError(CatBadJSON, "message is not a JSON object (it is null)")
	}
	m := &Message{line: line}
	for i, n := range fieldNames {
		m.fields[i] = fields[n]
	}
	for k := range fields {
		if !slices.Contains(fieldNames[:], k) {
			m.unknown = true
		}
	}
	str := func(name string) (string, bool) {
		raw, ok := fields[name]
		if !ok || jsonKind(raw) != kindString {
			return "", false
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", false
		}
		return s, true
	}
	m.Kind, _ = str("kind")
	m.Token, m.HasToken = str("token")
	if raw, ok := fields["id"]; ok && jsonKind(raw) != kindNull {
		id, err := checkID(raw)
		if err != nil {
			return m, err
		}
		m.ID = id
	}
	return m, nil
}

// referenceIgnored is Message.Ignored written the simple way: encoding/json
// reads the top-level keys in order, and those kind does not read are
// kept, cut and counted by section 4.6's bounds.
func referenceIgnored(line []byte, kind string) []string {
	known := map[string]bool{"kind": true, "token": true, "id": true}
	switch kind {
	case "execute":
		for _, n := range []string{"command", "args", "environment", "credentials", "resultToken", "captureStdout", "cwd", "timeoutMs",
			"captureStderr", "stream", "onExit", "detachMs", "input", "inputEncoding", "stdin", "user", "maxOutputBytes", "outputKeep"} {
			known[n] = true
		}
	case "attach":
		known["execution"] = true
	case "stdin":
		for _, n := range []string{"execution", "data", "encoding", "eof"} {
			known[n] = true
		}
	case "verify":
		known["all"], known["survivors"], known["keep"] = true, true, true
	case "get", "put":
		known["path"], known["user"], known["body"], known["format"] = true, true, true, true
		if kind == "put" {
			known["data"], known["more"], known["mode"], known["parents"] = true, true, true, true
			known["replace"], known["owners"], known["links"] = true, true, true
		} else {
			known["exclude"] = true
		}
	}
	d := json.NewDecoder(bytes.NewReader(line))
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	var names []string
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return nil
		}
		var value json.RawMessage
		if err := d.Decode(&value); err != nil {
			return nil
		}
		name := tok.(string)
		if known[name] {
			continue
		}
		for len(name) > MaxIgnoredName || len(name) > 0 && !utf8.ValidString(name) {
			name = name[:len(name)-1] // a cut that split a character leaves it invalid
		}
		if len(names) < MaxIgnored && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names
}

func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		`{"token":"T","kind":"ready"}`,
		`{"token":"T","kind":"verify","id":"v"}`,
		`{"token":"T","kind":"execute","id":7,"command":"/usr/local/bin/agent","args":["--task","solve"],` +
			`"environment":{"LANG":"C.UTF-8"},"credentials":{"OPENAI_API_KEY":"sk-..."},` +
			`"resultToken":"0123456789abcdef0123456789abcdef","captureStdout":true,"cwd":"/workspace","timeoutMs":1800000}`,
		`{"command":"x","timeoutMs":1e400}`,
		`{"command":"x","timeoutMs":1e-400}`,
		`{"command":"x","timeoutMs":-0.0e+0}`,
		`{"command":"x","timeoutMs":9223372036854.000}`,
		`{"command":"x","timeoutMs":123456789012345678901234567890e-17}`,
		`{"id":1e99999999999999999999}`,
		`{"command":"x\u0000","args":["\u0000"],"environment":{"A\u0000":"\u0000"}}`,
		"{\"kind\":\"\x00\"}",
		"{\"kind\":\"\xff\xfe\"}",
		`{"command":"x","environment":{"A":"1"},"credentials":{"A":"2","MAKA_EVAL_RESULT_TOKEN":"3"}}`,
		`{"command":"x","args":null,"environment":null,"cwd":null,"id":null}`,
		`{"id":{},"token":"T"}`,
		`[1,2,3]`,
		`null`,
		``,
		`{"a":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`,
		`{"a":` + strings.Repeat(`{"a":`, 5000) + `1` + strings.Repeat("}", 5001),
		`{"command":"\ud800","environment":{"\udfff":"x"}}`,
		`{"\u0074oken":"T","kind":"a","\u006bind":"b","k\u0069nd":"c"}`,
		`{"token":"a\"b\\c\/\b\f\n\r\t\u00e9\ud83d\ude00\ud800x","kind":"\u0000"}`,
		`{"tOKEN":"T","Kind":"ready","ids":1,"id ":2," id":3}`,
		`{"x":{"token":"inner"},"y":["}","{\"",[{}]],"token":"outer"}`,
		` { "token" : "T" , "kind" : "ready" , "id" : -0 } `,
		`{"command":"a","args":["\u0041\ud800"],"cwd":"\ud834\udd1e","timeoutMs":1E3,"captureStdout":false}`,
		`{"command":"x","captureStderr":true,"stream":true,"onExit":"settle-on-failure","detachMs":1e4}`,
		`{"command":"x","onExit":"s\u0065ttle","detachMs":0.5e1,"stream":null}`,
		`{"token":"T","kind":"attach","id":9,"execution":"x-1"}`,
		`{"kind":"attach","\u0065xecution":"x-\u0031","execution":7}`,
		`{"token":"T","kind":"execute","command":"x","timeoutMS":500,"Kind":1,"timeoutMS":2,"execution":"x-1"}`,
		`{"token":"T","kind":"put","id":5,"path":"/tests/run.sh","data":"AAE\/","more":true,"mode":"0755","user":"agent","parents":true}`,
		`{"kind":"get","path":"a","user":"0:0","data":"x","command":"y"}`,
		`{"kind":"verify","command":"x","\u00e9":1,"\u00c3\u00a9":2,"\ud800":3,"\udfff":4,"a\"b":5}`,
		`{"kind":"execute","command":"x","input":"AA==","inputEncoding":"base64","stdin":true,"user":"agent:staff"}`,
		`{"kind":"stdin","execution":"x-1","data":"aGk=","encoding":"base64","eof":true,"\u0064ata":"x"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		m, e := Decode(line)
		rm, re := referenceDecode(line)
		if (e == nil) != (re == nil) || e != nil && *e != *re {
			t.Fatalf("Decode: got error %v; the reference decoder gives %v", e, re)
		}
		if (m == nil) != (rm == nil) || m != nil && (m.Kind != rm.Kind || m.Token != rm.Token || m.HasToken != rm.HasToken || !bytes.Equal(m.ID, rm.ID)) {
			t.Fatalf("Decode: got %+v; the reference decoder gives %+v", m, rm)
		}
		if m != nil {
			x, xe := m.Execute()
			rx, rxe := rm.Execute()
			if !reflect.DeepEqual(x, rx) || !reflect.DeepEqual(xe, rxe) {
				t.Fatalf("Execute: got %+v, %v; from the reference decoder %+v, %v", x, xe, rx, rxe)
			}
			p, pe := m.Put(nil, false)
			rp, rpe := rm.Put(nil, false)
			if !reflect.DeepEqual(p, rp) || !reflect.DeepEqual(pe, rpe) {
				t.Fatalf("Put: got %+v, %v; from the reference decoder %+v, %v", p, pe, rp, rpe)
			}
			if pe != nil && (pe.Category != CatBadRequest || !strings.HasPrefix(pe.Message, "put: ")) {
				t.Fatalf("Put: got %q, %q; want %q, \"put: ...\"", pe.Category, pe.Message, CatBadRequest)
			}
			g, ge := m.Get()
			rg, rge := rm.Get()
			if !reflect.DeepEqual(g, rg) || !reflect.DeepEqual(ge, rge) {
				t.Fatalf("Get: got %+v, %v; from the reference decoder %+v, %v", g, ge, rg, rge)
			}
			a, ae := m.Attach()
			ra, rae := rm.Attach()
			if a != ra || !reflect.DeepEqual(ae, rae) {
				t.Fatalf("Attach: got %q, %v; from the reference decoder %q, %v", a, ae, ra, rae)
			}
			c, ce := m.Stdin()
			rc, rce := rm.Stdin()
			if !reflect.DeepEqual(c, rc) || !reflect.DeepEqual(ce, rce) {
				t.Fatalf("Stdin: got %+v, %v; from the reference decoder %+v, %v", c, ce, rc, rce)
			}
			if got, want := m.Ignored(), referenceIgnored(line, m.Kind); !slices.Equal(got, want) || (got == nil) != (want == nil) {
				t.Fatalf("Ignored: got %q; the reference gives %q", got, want)
			}
			for i, n := range fieldNames {
				if !bytes.Equal(bytes.TrimSpace(m.fields[i]), bytes.TrimSpace(rm.fields[i])) {
					t.Fatalf("field %q: got %q; the reference decoder gives %q", n, m.fields[i], rm.fields[i])
				}
			}
		}
		if e != nil {
			if !knownDecodeCategories[e.Category] || e.Message == "" {
				t.Fatalf("Decode: got error %q, %q; want a known category and a message", e.Category, e.Message)
			}
			if (e.Category == CatBadJSON) != (m == nil) {
				t.Fatalf("Decode: got message %v with category %q; want a message exactly when the line is an object", m, e.Category)
			}
		} else if m == nil {
			t.Fatalf("Decode: got no message and no error")
		}
		if m == nil {
			return
		}
		if m.ID != nil {
			if k := jsonKind(m.ID); k != kindString && k != kindNumber {
				t.Fatalf("ID: got %s; want a string or a number", m.ID)
			}
			if _, err := json.Marshal(ErrorReply{Kind: "error", ID: m.ID, Error: &Error{}}); err != nil {
				t.Fatalf("echoing ID %s: got error %v; want none", m.ID, err)
			}
		}
		if m.HasToken == false && m.Token != "" {
			t.Fatalf("Token without HasToken: got %q", m.Token)
		}
		x, e := m.Execute()
		if e != nil {
			if x != nil || e.Category != CatBadRequest || !strings.HasPrefix(e.Message, "execute: ") {
				t.Fatalf("Execute: got %+v, %q, %q; want nil, %q, \"execute: ...\"", x, e.Category, e.Message, CatBadRequest)
			}
			return
		}
		if x.Command == "" || strings.Contains(x.Command, "\x00") || strings.Contains(x.Cwd, "\x00") {
			t.Fatalf("Execute: got command %q, cwd %q; want non-empty and no NUL", x.Command, x.Cwd)
		}
		if x.Args == nil || x.Environment == nil || x.Credentials == nil {
			t.Fatalf("Execute: got nil args, environment or credentials: %+v", x)
		}
		for _, a := range x.Args {
			if strings.Contains(a, "\x00") {
				t.Fatalf("Execute: got an arg with NUL: %q", a)
			}
		}
		for _, vars := range []map[string]string{x.Environment, x.Credentials} {
			for n, v := range vars {
				if !isVariableName(n) || n == resultTokenVar || strings.Contains(v, "\x00") {
					t.Fatalf("Execute: got variable %q with a bad name or value", n)
				}
			}
		}
		for n := range x.Credentials {
			if _, ok := x.Environment[n]; ok {
				t.Fatalf("Execute: got %q in both environment and credentials", n)
			}
		}
		if x.ResultToken != "" && !isResultToken(x.ResultToken) {
			t.Fatalf("Execute: got resultToken %q", x.ResultToken)
		}
		if x.TimeoutMs < 0 || x.TimeoutMs > maxTimeoutMs {
			t.Fatalf("Execute: got timeoutMs %d", x.TimeoutMs)
		}
	})
}

var knownCarrierCategories = map[string]bool{
	DiagNone: true, DiagOversize: true, DiagMissing: true, DiagAmbiguous: true, DiagInvalid: true, DiagUnstructured: true,
}

// modelCarrierLines is Python's str.splitlines(keepends=True) written the
// simple way, on bytes decoded one character at a time (an invalid byte is
// one character that is no line break, as U+FFFD is in the reference).
func modelCarrierLines(b []byte) [][]byte {
	var lines [][]byte
	start := 0
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		i += size
		switch r {
		case '\r':
			if i < len(b) && b[i] == '\n' {
				i++
			}
		case '\n', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
		default:
			continue
		}
		lines = append(lines, b[start:i])
		start = i
	}
	if start < len(b) {
		lines = append(lines, b[start:])
	}
	return lines
}

func FuzzParseCarrier(f *testing.F) {
	good := frame(testToken, `{"kind":"settled"}`, false)
	f.Add([]byte(good), []byte(`{"kind":"settled","status":"completed"}`), false)
	f.Add([]byte("noise\n"+good+"more"), []byte("é€😀"), true)
	f.Add([]byte(good[:len(good)/2]), []byte(""), false)
	f.Add([]byte(good+good), []byte("a\nb\r\nc\x00"), true)
	f.Add([]byte(strings.TrimSuffix(good, "\n")+"\r\n"), []byte("?>>???"), false)
	f.Add([]byte(frameFields("99999999999999999999", digestOf(""), "")), []byte("x"), false)
	f.Add([]byte(frameFields("2", digestOf("\xff\xfe"), "__4")), []byte("\xff\xfe"), false)
	f.Add([]byte(frameFields("3", digestOf("?>>"), "Pz4+")), []byte(strings.Repeat("z", MaxPayload)), true)
	f.Add([]byte(FramePrefix+" "+testToken+" "), []byte(strings.Repeat("z", MaxPayload+1)), false)
	f.Add([]byte("\x00\xff\r\r\n\n"), []byte("\x00"), true)
	// The reference's rules: other line breaks, Python's int(), either
	// alphabet with partial padding, and the first occurrence of the frame.
	f.Add([]byte("progress 50%\r"+good), []byte("\u2028\u0085"), false)
	f.Add([]byte("x\f"+strings.TrimSuffix(good, "\n")+"\u2029y\x1cz\x85\xc2\x85"), []byte("\v\f\x1c"), true)
	f.Add([]byte(frameFields("\t+0_0_3\u3000", digestOf("aaa"), "YWFh")), []byte("aaa"), false)
	f.Add([]byte(frameFields("\u0663", digestOf("?>>"), "Pz4+")), []byte("-_+/="), true)
	f.Add([]byte(frameFields("-0", digestOf(""), "")), []byte(""), true)
	f.Add([]byte(frameFields("1", digestOf("a"), "YQ=")), []byte("a"), false)
	f.Add([]byte("a"+good+"b\n"+good), []byte("b"), false)
	f.Fuzz(func(t *testing.T, carrier, payload []byte, padded bool) {
		stdout, diag := ParseCarrier(carrier, testToken)
		if !knownCarrierCategories[diag.Category] {
			t.Fatalf("ParseCarrier: got category %q", diag.Category)
		}
		if (diag.Category == DiagNone) == diag.Counted {
			t.Fatalf("ParseCarrier: got %+v; want counts exactly when the category is not none", diag)
		}
		if stdout != "" && diag.Category != DiagNone && diag.Category != DiagUnstructured {
			t.Fatalf("ParseCarrier: got stdout %q with category %q", stdout, diag.Category)
		}
		if !utf8.ValidString(stdout) || len(stdout) > MaxPayload || diag.Bytes > int64(len(carrier)) {
			t.Fatalf("ParseCarrier: got stdout %q, %+v from %d bytes", stdout, diag, len(carrier))
		}
		c := NewCarrier()
		c.Write(carrier)
		if cs, cd := c.Result(testToken); cs != stdout || cd != diag {
			t.Fatalf("Carrier.Result: got %q, %+v; want %q, %+v", cs, cd, stdout, diag)
		}

		// The fast scan for frame lines finds what splitting every line finds.
		prefix := []byte(FramePrefix + " " + testToken + " ")
		frames, first := 0, []byte(nil)
		for _, line := range modelCarrierLines(carrier) {
			if bytes.HasPrefix(line, prefix) {
				if frames++; frames == 1 {
					first = line
				}
			}
		}
		start, end, n := findFrameLine(carrier, testToken)
		if min(n, 2) != min(frames, 2) || n == 1 && !bytes.Equal(carrier[start:end], first) {
			t.Fatalf("findFrameLine: got %d lines, the first %q; the lines of the carrier hold %d, the first %q",
				n, carrier[start:end], frames, first)
		}

		// A frame made from any valid payload round-trips.
		if len(payload) > MaxPayload || !utf8.Valid(payload) {
			return
		}
		line := frame(testToken, string(payload), padded)
		if got, d := ParseCarrier([]byte(line), testToken); got != string(payload) || d != NoneDiagnostic() {
			t.Fatalf("ParseCarrier(frame of %q): got %q, %+v; want the payload, none", payload, got, d)
		}
		// With the fuzzed carrier as other output before it, when that holds
		// no frame line of its own, nor the frame line's text (whose first
		// occurrence would be the one removed), and the whole fits.
		noise := append([]byte(nil), carrier...)
		if len(noise) > 0 && noise[len(noise)-1] != '\n' {
			noise = append(noise, '\n')
		}
		if _, _, n := findFrameLine(noise, testToken); n > 0 || bytes.Contains(noise, []byte(line)) ||
			len(noise)+len(line) > CarrierLimit || len(noise) == 0 {
			return
		}
		got, d := ParseCarrier(append(noise, line...), testToken)
		want := counted(DiagUnstructured, string(noise))
		if got != string(payload) || d != want {
			t.Fatalf("ParseCarrier(noise + frame): got %q, %+v; want %q, %+v", got, d, payload, want)
		}
	})
}
