package protocol

import (
	"slices"
	"strings"
	"testing"
)

func TestVerify(t *testing.T) {
	for _, tt := range []struct {
		line string
		want Verify
		err  string // a part of the error message; "" for none
	}{
		{`{"kind":"verify"}`, Verify{}, ""},
		{`{"kind":"verify","all":true}`, Verify{All: true}, ""},
		{`{"kind":"verify","all":false}`, Verify{}, ""},
		{`{"kind":"verify","all":true,"survivors":"settle","keep":[42, 7]}`, Verify{All: true, Settle: true, Keep: []int{42, 7}}, ""},
		{`{"kind":"verify","all":true,"survivors":"leave"}`, Verify{All: true}, ""},
		{`{"kind":"verify","all":true,"survivors":null,"keep":null}`, Verify{All: true}, ""},
		{`{"kind":"verify","all":1}`, Verify{}, `"all"`},
		{`{"kind":"verify","all":true,"survivors":"kill"}`, Verify{}, `"survivors"`},
		{`{"kind":"verify","all":true,"survivors":true}`, Verify{}, `"survivors"`},
		{`{"kind":"verify","survivors":"settle"}`, Verify{}, `needs "all"`},
		{`{"kind":"verify","keep":[1]}`, Verify{}, `needs "all"`},
		{`{"kind":"verify","all":true,"keep":[0]}`, Verify{}, `"keep"`},
		{`{"kind":"verify","all":true,"keep":[1.5]}`, Verify{}, `"keep"`},
		{`{"kind":"verify","all":true,"keep":["1"]}`, Verify{}, `"keep"`},
		{`{"kind":"verify","all":true,"keep":1}`, Verify{}, `"keep"`},
	} {
		m, perr := Decode([]byte(tt.line))
		if perr != nil {
			t.Fatalf("Decode(%s): %v", tt.line, perr)
		}
		v, err := m.Verify()
		switch {
		case tt.err != "" && (err == nil || err.Category != CatBadRequest || !strings.Contains(err.Message, tt.err)):
			t.Errorf("Verify(%s): %v; want a bad-request naming %s", tt.line, err, tt.err)
		case tt.err == "" && err != nil:
			t.Errorf("Verify(%s): %v; want no error", tt.line, err)
		case tt.err == "" && (v.All != tt.want.All || v.Settle != tt.want.Settle || !slices.Equal(v.Keep, tt.want.Keep)):
			t.Errorf("Verify(%s) = %+v; want %+v", tt.line, *v, tt.want)
		}
		if ig := m.Ignored(); ig != nil {
			t.Errorf("Verify(%s): ignored %q; want none", tt.line, ig)
		}
	}
}
