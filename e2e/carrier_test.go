package e2e

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// printfScript is a shell script whose printf writes exactly b: every byte
// that is not a plain printable character as a three-digit octal escape.
func printfScript(b []byte) string {
	var s strings.Builder
	s.WriteString("printf '")
	for _, c := range b {
		switch {
		case c == '%':
			s.WriteString("%%")
		case c >= ' ' && c <= '~' && c != '\\' && c != '\'':
			s.WriteByte(c)
		default:
			fmt.Fprintf(&s, `\%03o`, c)
		}
	}
	s.WriteString("'")
	return s.String()
}

// The carrier rules of section 5 against bytes that a real subject writes:
// each case is a /bin/sh printf of exactly the carrier, and relayd's
// executed reply must be what Maka's reference relay answers for the same
// bytes (one case or more per rule; internal/protocol tests each rule in
// depth).
func TestCarrierReadsLikeTheReferenceRelay(t *testing.T) {
	d := startRelayd(t, opts{})
	c := d.connect()
	tok := strings.Repeat("0f", 16)

	// A UTF-8 payload whose standard base64 has '+' and '/'.
	data := `{"k":"??>>~~"}`
	std := base64.StdEncoding.EncodeToString([]byte(data))
	url := base64.RawURLEncoding.EncodeToString([]byte(data))
	if !strings.ContainsAny(std, "+/") {
		t.Fatalf("test payload %q must exercise the standard alphabet, got %s", data, std)
	}
	digest := func(b string) string { s := sha256.Sum256([]byte(b)); return hex.EncodeToString(s[:]) }
	line := func(length, sum, payload string) string {
		return "MAKA-EVAL-RESULT-V1 " + tok + " " + length + " " + sum + " " + payload
	}
	n := strconv.Itoa(len(data))
	f := line(n, digest(data), url) // the frame line, without a line break

	type want struct {
		stdout   string
		category string
		counted  string // the bytes counted: the carrier, or the carrier without the frame line
	}
	none := want{data, "none", ""}
	noisy := func(noise string) want { return want{data, "unstructured-output", noise} }
	tests := []struct {
		name    string
		carrier string
		want    want // counted "" for result-frame-* means the whole carrier
	}{
		// Lines split where str.splitlines() splits; the frame line loses its
		// trailing "\r"/"\n".
		{"progress then cr then frame", "progress 50%\r" + f + "\n", noisy("progress 50%\r")},
		{"form feed then frame", "x\f" + f + "\n", noisy("x\f")},
		{"vertical tab then frame", "x\v" + f + "\n", noisy("x\v")},
		{"file separator then frame", "x\x1c" + f + "\n", noisy("x\x1c")},
		{"record separator then frame", "x\x1e" + f + "\n", noisy("x\x1e")},
		{"U+0085 then frame", "x\u0085" + f + "\n", noisy("x\u0085")},
		{"U+2028 then frame", "x\u2028" + f + "\n", noisy("x\u2028")},
		{"U+2029 then frame", "x\u2029" + f + "\n", noisy("x\u2029")},
		{"a lone 85 byte is no break", "x\x85" + f + "\n", want{"", "result-frame-missing", ""}},
		{"unit separator is no break", "x\x1f" + f + "\n", want{"", "result-frame-missing", ""}},
		{"frame ended by crlf", f + "\r\n", none},
		{"frame ended by cr, then output", f + "\rafter\n", noisy("after\n")},
		{"frame, cr, crlf", f + "\r\r\n", noisy("\r\n")},
		{"frame ended by a form feed", f + "\f", want{"", "result-frame-invalid", ""}},
		{"frame ended by U+2028", f + "\u2028rest\n", want{"", "result-frame-invalid", ""}},
		{"two frames apart by cr", f + "\r" + f + "\n", want{"", "result-frame-ambiguous", ""}},

		// Exactly five fields, split at single spaces.
		{"six fields", f + " extra\n", want{"", "result-frame-invalid", ""}},
		{"tab for a space", strings.Replace(f, " "+n+" ", " "+n+"\t", 1) + "\n", want{"", "result-frame-invalid", ""}},

		// <length> as int() reads it.
		{"length with a plus sign", line("+"+n, digest(data), url) + "\n", none},
		{"length with an underscore", line(n[:1]+"_"+n[1:], digest(data), url) + "\n", none},
		{"length with leading zeros", line("000"+n, digest(data), url) + "\n", none},
		{"length between tabs", line("\t"+n+"\t", digest(data), url) + "\n", none},
		{"length after a no-break space", line("\u00a0"+n, digest(data), url) + "\n", none},
		{"length in Arabic-Indic digits", line(strings.Map(func(r rune) rune { return r - '0' + '\u0660' }, n), digest(data), url) + "\n", none},
		{"length minus zero", line("-0", digest(""), "") + "\n", want{"", "none", ""}},
		{"negative length", line("-"+n, digest(data), url) + "\n", want{"", "result-frame-invalid", ""}},
		{"double underscore", line(n[:1]+"__"+n[1:], digest(data), url) + "\n", want{"", "result-frame-invalid", ""}},
		{"length of 4301 digits", line(strings.Repeat("0", 4299)+n, digest(data), url) + "\n", want{"", "result-frame-invalid", ""}},

		// <payload> in either alphabet, padding optional or partial, never excess.
		{"standard alphabet", line(n, digest(data), std) + "\n", none},
		{"alphabets mixed", line("6", digest("?>>???"), "Pz4-Pz8/") + "\n", want{"?>>???", "none", ""}},
		{"partial padding", line("1", digest("a"), "YQ=") + "\n", want{"a", "none", ""}},
		{"excess padding", line("3", digest("aaa"), "YWFh=") + "\n", want{"", "result-frame-invalid", ""}},
		{"other character", line("1", digest("a"), "YQ.") + "\n", want{"", "result-frame-invalid", ""}},

		// <sha256>: 64 lower-case hex digits of the decoded bytes.
		{"digest in upper case", line(n, strings.ToUpper(digest(data)), url) + "\n", want{"", "result-frame-invalid", ""}},

		// The decoded bytes must be UTF-8.
		{"payload not UTF-8", line("2", digest("\xff\xfe"), "__4") + "\n", want{"", "result-frame-invalid", ""}},

		// unstructured-output counts the carrier without the first occurrence
		// of the frame line's text, in raw bytes.
		{"frame text ending an earlier line", "a" + f + "\nb\n" + f + "\n", noisy("ab\n" + f + "\n")},
		{"invalid UTF-8 counted raw", "\xff\xfe\n" + f + "\n", noisy("\xff\xfe\n")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := c.sh(printfScript([]byte(tc.carrier)), msg{"resultToken": tok})
			if r["stdout"] != tc.want.stdout {
				t.Errorf("stdout %q; want %q", r["stdout"], tc.want.stdout)
			}
			diag, _ := r["diagnostic"].(map[string]any)
			want := map[string]any{"category": tc.want.category}
			if tc.want.category != "none" {
				counted := tc.want.counted
				if tc.want.category != "unstructured-output" {
					counted = tc.carrier
				}
				want["bytes"] = json.Number(strconv.Itoa(len(counted)))
				want["sha256"] = digest(counted)
			}
			if fmt.Sprint(diag) != fmt.Sprint(want) {
				t.Errorf("diagnostic %v; want %v", diag, want)
			}
		})
	}
	d.stopClean()
}
