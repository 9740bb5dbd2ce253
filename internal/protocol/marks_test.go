package protocol

import (
	"slices"
	"strings"
	"testing"
)

// Mark, unmark, changes, restore and verify's files (section 4.9) are
// validated field by field, each refusal naming the field.
func TestMarkMessages(t *testing.T) {
	for _, tt := range []struct {
		line, want string // want: a fragment of the error, "" for valid
	}{
		{`{"kind":"mark","name":"start","paths":["/"],"exclude":["/proc"],"keep":["/app"]}`, ""},
		{`{"kind":"mark","paths":["/"]}`, `"name" is required`},
		{`{"kind":"mark","name":".hidden","paths":["/"]}`, `"name" must be 1 to 64`},
		{`{"kind":"mark","name":"a/b","paths":["/"]}`, `"name" must be 1 to 64`},
		{`{"kind":"mark","name":"s"}`, `"paths" is required`},
		{`{"kind":"mark","name":"s","paths":[]}`, `at least one`},
		{`{"kind":"mark","name":"s","paths":["app"]}`, `"paths"[0] must be an absolute path`},
		{`{"kind":"mark","name":"s","paths":["/a/../b"]}`, `".."`},
		{`{"kind":"mark","name":"s","paths":["/"],"keep":[1]}`, `"keep"[0] must be a string`},
		{`{"kind":"mark","name":"s","paths":["/"],"keep":"/app"}`, `"keep" must be an array`},
		{`{"kind":"changes","mark":"s","paths":["/x"]}`, ""},
		{`{"kind":"restore"}`, `"mark" is required`},
		{`{"kind":"unmark","name":"s"}`, ""},
		{`{"kind":"verify","all":true,"files":{"mark":"s","protect":["/tests"],"restore":true}}`, ""},
		{`{"kind":"verify","files":{"mark":"s","protect":["/tests"]}}`, `needs "all": true`},
		{`{"kind":"verify","all":true,"files":{"protect":["/tests"]}}`, `lacks "mark"`},
		{`{"kind":"verify","all":true,"files":{"mark":"s"}}`, `lacks "protect"`},
		{`{"kind":"verify","all":true,"files":{"mark":"s","protect":["/t"],"restore":"yes"}}`, `"restore" must be true or false`},
		{`{"kind":"verify","all":true,"files":{"mark":"s","protect":["/t"],"extra":1}}`, `holds "extra"`},
	} {
		m, perr := Decode([]byte(tt.line))
		if perr != nil {
			t.Fatalf("Decode(%s): %v", tt.line, perr)
		}
		var err *Error
		switch m.Kind {
		case "mark":
			_, err = m.Mark()
		case "unmark":
			_, err = m.Unmark()
		case "verify":
			_, err = m.Verify()
		default:
			_, err = m.MarkUse(m.Kind)
		}
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v; want it valid", tt.line, err)
		case tt.want != "" && (err == nil || err.Category != CatBadRequest || !strings.Contains(err.Message, tt.want)):
			t.Errorf("%s: %v; want a bad-request with %q", tt.line, err, tt.want)
		}
	}
	// Their fields are read, not ignored; another kind's are.
	m, _ := Decode([]byte(`{"kind":"changes","mark":"s","paths":["/"],"name":"x","keep":["/"]}`))
	if got := m.Ignored(); !slices.Equal(got, []string{"name", "keep"}) {
		t.Errorf("changes ignores %q; want name and keep", got)
	}
	m, _ = Decode([]byte(`{"kind":"mark","name":"s","paths":["/"],"Keep":["/"]}`))
	if err := m.CaseVariant(); err == nil || !strings.Contains(err.Message, `"keep"`) {
		t.Errorf("mark with Keep: %v; want a bad-request naming keep", err)
	}
}
