package protocol

import (
	"slices"
	"strings"
	"testing"
)

func TestPutDecodes(t *testing.T) {
	m, perr := Decode([]byte(`{"token":"t","kind":"put","id":5,"path":"/tests/run.sh","data":"AAEC/w==","more":true,"mode":"0755","user":"agent:staff","parents":true,"mdoe":"1"}`))
	if perr != nil {
		t.Fatal(perr)
	}
	buf := make([]byte, 0, 64)
	p, perr := m.Put(buf, false)
	if perr != nil {
		t.Fatalf("Put: %v", perr)
	}
	if p.Path != "/tests/run.sh" || string(p.Data) != "\x00\x01\x02\xff" || !p.More || p.Mode != 0o755 || !p.HasMode ||
		p.User != "agent:staff" || !p.Parents || !slices.Equal(p.Ignored, []string{"mdoe"}) {
		t.Fatalf("Put = %+v", p)
	}
	if &p.Data[0] != &buf[:1][0] {
		t.Error("Put did not decode into the buffer it was given")
	}
	// A later chunk may leave out path; defaults.
	m, _ = Decode([]byte(`{"token":"t","kind":"put"}`))
	if p, perr = m.Put(nil, true); perr != nil || p.Path != "" || len(p.Data) != 0 || p.More || p.Mode != DefaultFileMode || p.HasMode {
		t.Fatalf("a bare later chunk: %+v, %v", p, perr)
	}
}

func TestPutAndGetRefusals(t *testing.T) {
	cases := []struct{ line, names string }{
		{`{"kind":"put","data":"eA=="}`, `"path" is required`},
		{`{"kind":"put","path":""}`, `"path" must be a non-empty string`},
		{`{"kind":"put","path":"a\u0000b"}`, `"path" holds a NUL byte`},
		{`{"kind":"put","path":"a","data":"eA"}`, `"data" is not valid base64`},
		{`{"kind":"put","path":"a","data":"e A=="}`, `"data" is not valid base64`},
		{`{"kind":"put","path":"a","data":7}`, `"data" must be a string`},
		{`{"kind":"put","path":"a","more":"yes"}`, `"more" must be true or false`},
		{`{"kind":"put","path":"a","parents":1}`, `"parents" must be true or false`},
		{`{"kind":"put","path":"a","mode":"0999"}`, `"mode"`},
		{`{"kind":"put","path":"a","mode":"17777"}`, `"mode"`},
		{`{"kind":"put","path":"a","mode":755}`, `"mode"`},
		{`{"kind":"put","path":"a","user":""}`, `"user"`},
		{`{"kind":"get"}`, `get: "path" is required`},
		{`{"kind":"get","path":"a","user":3}`, `get: "user"`},
	}
	for _, tc := range cases {
		m, perr := Decode([]byte(tc.line))
		if perr != nil {
			t.Fatalf("Decode(%s): %v", tc.line, perr)
		}
		if m.Kind == "get" {
			_, perr = m.Get()
		} else {
			_, perr = m.Put(nil, false)
		}
		if perr == nil || perr.Category != CatBadRequest || !strings.Contains(perr.Message, tc.names) {
			t.Errorf("%s: got %v; want bad-request with %q", tc.line, perr, tc.names)
		}
	}
}

func TestParseMode(t *testing.T) {
	for s, want := range map[string]uint32{"0": 0, "644": 0o644, "0755": 0o755, "04755": 0o4755, "7777": 0o7777} {
		if got, ok := parseMode(s); !ok || got != want {
			t.Errorf("parseMode(%q) = %o, %v; want %o", s, got, ok, want)
		}
	}
	for _, s := range []string{"", "8", "-1", "0x1", "010000", "000000"} {
		if _, ok := parseMode(s); ok {
			t.Errorf("parseMode(%q) accepted", s)
		}
	}
}
