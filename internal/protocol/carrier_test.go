package protocol

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// frame builds a frame line for payload, with its "\n".
func frame(token, payload string, padded bool) string {
	enc := base64.RawURLEncoding
	if padded {
		enc = base64.URLEncoding
	}
	sum := sha256.Sum256([]byte(payload))
	return fmt.Sprintf("%s %s %d %s %s\n", FramePrefix, token, len(payload), hex.EncodeToString(sum[:]), enc.EncodeToString([]byte(payload)))
}

// frameFields builds a frame line from its fields as given.
func frameFields(length, digest, payload string) string {
	return FramePrefix + " " + testToken + " " + length + " " + digest + " " + payload + "\n"
}

func digestOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func counted(category, of string) Diagnostic {
	return Diagnostic{Category: category, Bytes: int64(len(of)), SHA256: digestOf(of), Counted: true}
}

func TestParseCarrier(t *testing.T) {
	const result = `{"kind":"settled","status":"completed"}`
	good := frame(testToken, result, false)
	goodDigest := digestOf(result)
	goodB64 := base64.RawURLEncoding.EncodeToString([]byte(result))

	// A carrier of exactly CarrierLimit bytes, with a valid frame in it.
	filler := strings.Repeat("x", CarrierLimit-len(good)-1) + "\n"
	atLimit := filler + good
	overLimit := filler + "y" + good

	tests := []carrierCase{
		// oversize
		{"oversize by one", overLimit, "", counted(DiagOversize, overLimit)},
		{"oversize without a frame", strings.Repeat("z", CarrierLimit+1), "", counted(DiagOversize, strings.Repeat("z", CarrierLimit+1))},
		{"exactly at the limit", atLimit, result, counted(DiagUnstructured, filler)},

		// missing
		{"empty carrier", "", "", counted(DiagMissing, "")},
		{"ordinary output", "hello\nworld\n", "", counted(DiagMissing, "hello\nworld\n")},
		{"other token", frame("ffffffffffffffffffffffffffffffff", result, false), "", counted(DiagMissing, frame("ffffffffffffffffffffffffffffffff", result, false))},
		{"not at line start", "say " + good, "", counted(DiagMissing, "say "+good)},
		{"prefix without trailing space", FramePrefix + " " + testToken + "\n", "", counted(DiagMissing, FramePrefix+" "+testToken+"\n")},
		{"lower-case prefix", strings.ToLower(FramePrefix) + good[len(FramePrefix):], "", counted(DiagMissing, strings.ToLower(FramePrefix)+good[len(FramePrefix):])},

		// ambiguous
		{"two identical frames", good + good, "", counted(DiagAmbiguous, good+good)},
		{"valid and invalid frame", good + frameFields("1", goodDigest, "x"), "", counted(DiagAmbiguous, good+frameFields("1", goodDigest, "x"))},
		{"second frame unterminated", good + strings.TrimSuffix(good, "\n"), "", counted(DiagAmbiguous, good+strings.TrimSuffix(good, "\n"))},

		// invalid (each rule has its own table below)
		{"length empty", frameFields("", goodDigest, goodB64), "", counted(DiagInvalid, frameFields("", goodDigest, goodB64))},
		{"length wrong", frameFields("38", goodDigest, goodB64), "", counted(DiagInvalid, frameFields("38", goodDigest, goodB64))},
		{"length huge", frameFields("99999999999999999999999", goodDigest, goodB64), "", counted(DiagInvalid, frameFields("99999999999999999999999", goodDigest, goodB64))},
		{"payload over MaxPayload", frame(testToken, strings.Repeat("a", MaxPayload+1), false), "", counted(DiagInvalid, frame(testToken, strings.Repeat("a", MaxPayload+1), false))},
		{"cr inside payload", frameFields("3", digestOf("aaa"), "YW\rFh"), "", counted(DiagInvalid, frameFields("3", digestOf("aaa"), "YW\rFh"))},

		// unstructured-output: counts of the carrier without the frame line
		{"output before", "thinking...\n" + good, result, counted(DiagUnstructured, "thinking...\n")},
		{"output after", good + "bye\n", result, counted(DiagUnstructured, "bye\n")},
		{"output around, crlf frame", "a\n" + strings.TrimSuffix(good, "\n") + "\r\nb", result, counted(DiagUnstructured, "a\nb")},
		{"only a blank line besides", good + "\n", result, counted(DiagUnstructured, "\n")},
		{"other token's frame is output", frame("ffffffffffffffffffffffffffffffff", "x", false) + good, result,
			counted(DiagUnstructured, frame("ffffffffffffffffffffffffffffffff", "x", false))},

		// none
		{"frame alone", good, result, NoneDiagnostic()},
		{"frame alone, crlf", strings.TrimSuffix(good, "\n") + "\r\n", result, NoneDiagnostic()},
		{"frame alone, no newline", strings.TrimSuffix(good, "\n"), result, NoneDiagnostic()},
		{"frame alone, cr at the end", strings.TrimSuffix(good, "\n") + "\r", result, NoneDiagnostic()},
		{"padded", frame(testToken, "ab", true), "ab", NoneDiagnostic()},
		{"unpadded", frame(testToken, "ab", false), "ab", NoneDiagnostic()},
		{"empty payload", frame(testToken, "", false), "", NoneDiagnostic()},
		{"payload of MaxPayload", frame(testToken, strings.Repeat("é", MaxPayload/2), true), strings.Repeat("é", MaxPayload/2), NoneDiagnostic()},
		{"payload with newline and NUL", frame(testToken, "a\nb\x00c", false), "a\nb\x00c", NoneDiagnostic()},
	}
	runCarrierCases(t, tests)
}

// carrierCase is a carrier and what the reference relay answers for it.
type carrierCase struct {
	name       string
	carrier    string
	wantStdout string
	wantDiag   Diagnostic
}

// runCarrierCases checks each case with ParseCarrier, and with a Carrier
// that gets the same bytes in pieces of several sizes.
func runCarrierCases(t *testing.T, tests []carrierCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, diag := ParseCarrier([]byte(tt.carrier), testToken)
			if stdout != tt.wantStdout {
				t.Errorf("stdout: got %q; want %q", stdout, tt.wantStdout)
			}
			if diag != tt.wantDiag {
				t.Errorf("diagnostic: got %+v; want %+v", diag, tt.wantDiag)
			}
			// The Carrier writer agrees, however the bytes arrive.
			for _, chunk := range []int{1, 7, 4096, len(tt.carrier) + 1} {
				c := NewCarrier()
				for b := []byte(tt.carrier); len(b) > 0; {
					n := min(chunk, len(b))
					if w, err := c.Write(b[:n]); w != n || err != nil {
						t.Fatalf("Write: got %d, %v; want %d, nil", w, err, n)
					}
					b = b[n:]
				}
				cs, cd := c.Result(testToken)
				if cs != tt.wantStdout || cd != tt.wantDiag {
					t.Errorf("Carrier in chunks of %d: got %q, %+v; want %q, %+v", chunk, cs, cd, tt.wantStdout, tt.wantDiag)
				}
			}
		})
	}
}

// valid, invalid and missing build the three answers a rule table needs.
func valid(name, carrier, payload string) carrierCase {
	return carrierCase{name, carrier, payload, NoneDiagnostic()}
}

func noisy(name, carrier, payload, noise string) carrierCase {
	return carrierCase{name, carrier, payload, counted(DiagUnstructured, noise)}
}

func invalid(name, carrier string) carrierCase {
	return carrierCase{name, carrier, "", counted(DiagInvalid, carrier)}
}

func missing(name, carrier string) carrierCase {
	return carrierCase{name, carrier, "", counted(DiagMissing, carrier)}
}

// The reference relay splits the carrier with Python's str.splitlines on the
// text its framework decoded (invalid UTF-8 replaced, so a stray byte is never
// a line break), takes the frame line with its line break, and strips only
// "\r" and "\n" from its end before reading the fields.
func TestCarrierLines(t *testing.T) {
	const result = `{"kind":"settled"}`
	good := frame(testToken, result, false)
	line := strings.TrimSuffix(good, "\n")
	breaks := []string{"\n", "\r\n", "\r", "\v", "\f", "\x1c", "\x1d", "\x1e", "\u0085", "\u2028", "\u2029"}
	var tests []carrierCase
	for _, brk := range breaks {
		tests = append(tests,
			noisy(fmt.Sprintf("output ended by %q, then the frame", brk), "x"+brk+good, result, "x"+brk),
			noisy(fmt.Sprintf("frame, then output after %q", brk), "x"+brk+good+"y", result, "x"+brk+"y"),
			carrierCase{fmt.Sprintf("two frames apart by %q", brk), line + brk + good, "", counted(DiagAmbiguous, line+brk+good)})
	}
	for _, notBreak := range []string{
		"\x1f", "\t", "\x00",
		"\x85",         // U+0085 is C2 85; a lone 85 byte is invalid UTF-8, replaced, not a break
		"\xc2",         // a lead byte without its 85
		"\xe2\x80",     // U+2028 cut short
		"\xe2\x80\xaa", // U+202A, not a break
		"\u00a0", "\u200b", "\u0084", "\u0086",
	} {
		tests = append(tests, missing(fmt.Sprintf("output ended by %q is no line break", notBreak), "x"+notBreak+good))
	}
	tests = append(tests,
		// The conformance cases: progress output and a form feed before the frame.
		noisy("progress then cr then frame", "progress 50%\r"+good, result, "progress 50%\r"),
		noisy("form feed then frame", "x\f"+good, result, "x\f"),
		// Invalid UTF-8 right before a break is replaced on its own: the break stays.
		noisy("truncated sequence before U+0085", "\xe2\xc2\x85"+good, result, "\xe2\xc2\x85"),
		noisy("truncated sequence before U+2028", "\xf0\x9f\xe2\x80\xa8"+good, result, "\xf0\x9f\xe2\x80\xa8"),
		noisy("invalid byte before lf", "\xff\n"+good, result, "\xff\n"),

		// How the frame line ends.
		valid("frame ended by lf", line+"\n", result),
		valid("frame ended by crlf", line+"\r\n", result),
		valid("frame ended by cr", line+"\r", result),
		valid("frame without a line break", line, result),
		noisy("frame ended by cr, then output", line+"\rnext\n", result, "next\n"),
		noisy("frame, cr, crlf", line+"\r\r\n", result, "\r\n"),
		noisy("frame, lf, cr", line+"\n\r", result, "\r"),
		noisy("frame, lf, lf", line+"\n\n", result, "\n"),
	)
	// Any other break ends the line but is not stripped: it stays in the
	// payload field, where it is not base64.
	for _, brk := range breaks[3:] {
		tests = append(tests,
			invalid(fmt.Sprintf("frame ended by %q", brk), line+brk),
			invalid(fmt.Sprintf("frame ended by %q, then output", brk), line+brk+"after\n"))
	}
	// A break inside the frame cuts it: the first line is the frame line.
	tests = append(tests,
		invalid("break inside the payload", line[:len(line)-3]+"\v"+line[len(line)-3:]+"\n"),
		missing("break inside the prefix", FramePrefix[:4]+"\r"+good[4:]),
		missing("break between prefix and token", FramePrefix+"\u2028"+good[len(FramePrefix)+1:]),
	)
	runCarrierCases(t, tests)
}

// The frame line, its end stripped, splits at single spaces into exactly five
// fields (Python's split(" ", 4), and the fifth must then be base64).
func TestCarrierFields(t *testing.T) {
	d, p := digestOf("aaa"), "YWFh"
	runCarrierCases(t, []carrierCase{
		valid("five fields", frameFields("3", d, p), "aaa"),
		valid("five fields, empty payload", frameFields("0", digestOf(""), ""), ""),
		invalid("four fields", FramePrefix+" "+testToken+" 3 "+d+"\n"),
		invalid("three fields", FramePrefix+" "+testToken+" 3\n"),
		invalid("prefix and token only", FramePrefix+" "+testToken+" \n"),
		invalid("six fields", frameFields("3", d, p+" extra")),
		invalid("double space before the payload", frameFields("3", d, " "+p)),
		invalid("double space before the length", FramePrefix+" "+testToken+"  3 "+d+" "+p+"\n"),
		invalid("trailing space", frameFields("3", d, p+" ")),
		invalid("tab instead of a space", FramePrefix+" "+testToken+" 3\t"+d+" "+p+"\n"),
		invalid("no-break space instead of a space", FramePrefix+" "+testToken+" 3\u00a0"+d+" "+p+"\n"),
	})
}

// <length> is read as Python's int() reads a str, then 0 <= length <=
// MaxPayload.
func TestCarrierLength(t *testing.T) {
	three := func(length string) string { return frameFields(length, digestOf("aaa"), "YWFh") }
	zero := func(length string) string { return frameFields(length, digestOf(""), "") }
	full := strings.Repeat("a", MaxPayload)
	fullB64 := base64.RawURLEncoding.EncodeToString([]byte(full))
	var tests []carrierCase
	for _, l := range []string{
		"3", "+3", "003", "0_3", "0_0_3", "+0_3",
		"\t3", "3\t", "\t+3\t", "\t\t3\t\t", // white space around it (a space would split the field)
		"\u00a03", "3\u00a0", "\u16803", "\u20003", "\u200a3", "\u202f3", "\u205f3", "\u30003", "\u3000+3\t",
		"\u0663", "\u06f3", "\u0969", "\u0e53", "\uff13", "\U0001d7d1", "\U0001d7f9", "\U00011f53", // other decimal digits
		"0\u0663", "\u0660_\u0663", "+\uff10\uff13",
		strings.Repeat("0", 4299) + "3", // 4300 digits: Python's default limit
		strings.Repeat("0_", 4299) + "3",
	} {
		tests = append(tests, valid(fmt.Sprintf("length %+q", trunc(l)), three(l), "aaa"))
	}
	for _, l := range []string{"0", "-0", "+0", "00", "0_0", "-0_0", "-00", "\t-0", "\u0660", "-\u0660", strings.Repeat("0", 4300)} {
		tests = append(tests, valid(fmt.Sprintf("length %+q", trunc(l)), zero(l), ""))
	}
	for _, l := range []string{"2048", "+2048", "2_048", "0002048", "\u0662\u0660\u0664\u0668"} {
		tests = append(tests, valid(fmt.Sprintf("length %+q", l), frameFields(l, digestOf(full), fullB64), full))
	}
	for _, l := range []string{
		"", "+", "-", "_", "\t", "\u00a0",
		"-3", "-0_3", "3_", "_3", "0__3", "+_3", "3_\t", "+-3", "-+3", "++3", "+\t3", "\t_3",
		"\x1f3", "3\x1f", "\x003", "3\x00", "\x7f3", // ASCII separators are not white space to int()
		"\u200b3", "\u180e3", "\ufeff3", "3\u200b", // neither are these
		"\u00b3", "\u2083", "\u2163", "\u2462", "\u4e09", "\u00bd", // numbers, but not decimal digits
		"\xff3", "3\xff", "\xef\xbf\xbd3", // invalid UTF-8 and U+FFFD
		"3.0", "3e0", "0x3", "0o3", "0b11", "3a", "three",
		strings.Repeat("0", 4300) + "3", // 4301 digits: over Python's default limit
		strings.Repeat("0_", 4300) + "3",
		"99999999999999999999999",
	} {
		tests = append(tests, invalid(fmt.Sprintf("length %+q", trunc(l)), three(l)))
	}
	tests = append(tests,
		invalid("length 2049", frame(testToken, full+"a", false)),
		invalid("length one short", three("2")),
		invalid("length one over", three("4")),
		invalid("length 4301 zeros", zero(strings.Repeat("0", 4301))),
	)
	runCarrierCases(t, tests)
}

// trunc shortens a long test value for a test name.
func trunc(s string) string {
	if len(s) > 12 {
		return fmt.Sprintf("%s...(%d bytes)", s[:8], len(s))
	}
	return s
}

// Every set of decimal digits is a run of ten from zero, and unicode.Nd
// holds whole runs: decimalDigit relies on it.
func TestDecimalDigitRanges(t *testing.T) {
	check := func(lo, hi, stride uint32) {
		if stride != 1 || (hi-lo+1)%10 != 0 {
			t.Errorf("unicode.Nd range %U-%U stride %d is not whole runs of ten", lo, hi, stride)
		}
	}
	for _, r := range unicode.Nd.R16 {
		check(uint32(r.Lo), uint32(r.Hi), uint32(r.Stride))
	}
	for _, r := range unicode.Nd.R32 {
		check(r.Lo, r.Hi, r.Stride)
	}
}

// <payload> is decoded as Python's base64.b64decode(payload + padding,
// altchars=b"-_", validate=True) decodes it, padding making the length a
// multiple of four: either alphabet, even mixed, padding optional or
// partial, never excess, and nothing else.
func TestCarrierBase64(t *testing.T) {
	// "?>>" is "Pz4+" in the standard alphabet and "Pz4-" in the URL-safe
	// one; "???" is "Pz8/" and "Pz8_".
	var tests []carrierCase
	for _, c := range []struct{ encoded, payload string }{
		{"Pz4-", "?>>"}, {"Pz4+", "?>>"}, {"Pz8_", "???"}, {"Pz8/", "???"},
		{"Pz4-Pz8/", "?>>???"}, {"Pz4+Pz8_", "?>>???"}, {"Pz4-Pz4+", "?>>?>>"}, // mixed alphabets
		{"YQ", "a"}, {"YQ=", "a"}, {"YQ==", "a"},
		{"YWI", "ab"}, {"YWI=", "ab"},
		{"YWFh", "aaa"}, {"", ""},
		{"YR", "a"}, {"YWJ", "ab"}, // bits past the last byte are ignored
	} {
		tests = append(tests, valid(fmt.Sprintf("payload %q", c.encoded),
			frameFields(strconv.Itoa(len(c.payload)), digestOf(c.payload), c.encoded), c.payload))
	}
	for _, c := range []struct{ encoded, payload string }{
		{"YQ===", "a"}, {"YWI==", "ab"}, {"YWFh=", "aaa"}, {"YWFh==", "aaa"}, {"YWFh====", "aaa"}, // excess padding
		{"=", ""}, {"==", ""}, {"=YQ", "a"}, // leading padding
		{"Y", ""}, {"Y=", ""}, {"Y==", ""}, {"YWFhY", "aaa"}, // one character past a group of four
		{"YQ==YQ", "aa"}, {"YQ=A", "a@"}, {"YQ==YQ==", "aa"}, // padding inside
		{"YQ\t", "a"}, {"Y\rQ", "a"}, {"YQ.", "a"}, {"YQ%3D", "a"}, {"YQ\x00", "a"}, {"Y\u00e9Q", "a"}, {"YQ\xff", "a"},
		{"YWFh", "aa"}, {"YWI", "a"}, // decodes, but not to the length given
	} {
		tests = append(tests, invalid(fmt.Sprintf("payload %q", c.encoded),
			frameFields(strconv.Itoa(len(c.payload)), digestOf(c.payload), c.encoded)))
	}
	runCarrierCases(t, tests)
}

// <sha256> is 64 lower-case hex digits, the digest of the decoded bytes.
func TestCarrierDigest(t *testing.T) {
	d := digestOf("aaa")
	runCarrierCases(t, []carrierCase{
		valid("digest", frameFields("3", d, "YWFh"), "aaa"),
		invalid("digest upper case", frameFields("3", strings.ToUpper(d), "YWFh")),
		invalid("digest with one upper-case letter", frameFields("3", strings.Replace(d, "f", "F", 1), "YWFh")),
		invalid("digest short", frameFields("3", d[:63], "YWFh")),
		invalid("digest long", frameFields("3", d+"0", "YWFh")),
		invalid("digest not hex", frameFields("3", d[:63]+"g", "YWFh")),
		invalid("digest of something else", frameFields("3", digestOf("aab"), "YWFh")),
		invalid("digest of the encoded text", frameFields("3", digestOf("YWFh"), "YWFh")),
		invalid("digest empty", frameFields("3", "", "YWFh")),
	})
}

// The decoded bytes must be UTF-8 (Python's strict decoder: no surrogates,
// no overlong forms).
func TestCarrierPayloadUTF8(t *testing.T) {
	var tests []carrierCase
	for _, p := range []string{"\xff\xfe", "\xed\xa0\x80", "\xc0\x80", "\xe2\x82", "a\x80", "\xf4\x90\x80\x80"} {
		tests = append(tests, invalid(fmt.Sprintf("payload %q", p), frame(testToken, p, false)))
	}
	for _, p := range []string{"\u00e9\u20ac\U0001f600", "\x00", "\ufffd", "\U0010ffff"} {
		tests = append(tests, valid(fmt.Sprintf("payload %q", p), frame(testToken, p, false), p))
	}
	runCarrierCases(t, tests)
}

// unstructured-output counts the carrier without the frame line as the
// reference computes it: carrier.replace(frame, "", 1), the first occurrence
// of the frame line's text, which is an earlier line's end when that line
// ends with the same text. Bytes are counted raw.
func TestCarrierNoise(t *testing.T) {
	const result = `{"kind":"settled"}`
	good := frame(testToken, result, false)
	line := strings.TrimSuffix(good, "\n")
	runCarrierCases(t, []carrierCase{
		noisy("output before and after", "a\n"+good+"b\n", result, "a\nb\n"),
		noisy("frame text ending an earlier line", "a"+good+"b\n"+good, result, "ab\n"+good),
		noisy("unterminated frame text inside an earlier line", "say "+line+" more\n"+line, result, "say  more\n"+line),
		noisy("cr-ended frame text before the lf of an earlier line", "a"+line+"\r\n"+line+"\rz", result, "a\n"+line+"\rz"),
		noisy("invalid UTF-8 counted raw", "\xff\xfe\n"+good, result, "\xff\xfe\n"),
		noisy("a lone 85 byte counted raw", "\x85\n"+good, result, "\x85\n"),
	})
}

func TestCarrierOversizeCountsEverything(t *testing.T) {
	c := NewCarrier()
	h := sha256.New()
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	const chunks = 160                                      // 10 MiB in all
	for i := 0; i < chunks; i++ {
		if n, err := c.Write(chunk); n != len(chunk) || err != nil {
			t.Fatalf("Write: got %d, %v; want %d, nil", n, err, len(chunk))
		}
		h.Write(chunk)
	}
	if cap(c.buf) > CarrierLimit+1 {
		t.Errorf("bytes held: got capacity %d; want at most %d", cap(c.buf), CarrierLimit+1)
	}
	stdout, diag := c.Result(testToken)
	want := Diagnostic{Category: DiagOversize, Bytes: int64(chunks * len(chunk)), SHA256: hex.EncodeToString(h.Sum(nil)), Counted: true}
	if stdout != "" || diag != want {
		t.Errorf("Result: got %q, %+v; want %q, %+v", stdout, diag, "", want)
	}
}

func TestCarrierResultWhileWriting(t *testing.T) {
	c := NewCarrier()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 1000; i++ {
			c.Write([]byte("noise\n"))
		}
	}()
	for i := 0; i < 100; i++ {
		c.Result(testToken)
	}
	<-done
	if _, diag := c.Result(testToken); diag.Category != DiagMissing || diag.Bytes != 6000 {
		t.Errorf("Result: got %+v; want %s with 6000 bytes", diag, DiagMissing)
	}
}

// An oversize carrier's digest is the SHA-256 of every byte, written in
// pieces of every size around the limit, with Result asked midway as well
// as at the end.
func TestCarrierOversizeDigest(t *testing.T) {
	data := make([]byte, 3*CarrierLimit+12345)
	for i := range data {
		data[i] = byte(i*7 + i/251)
	}
	for _, piece := range []int{7, 1000, CarrierLimit - 1, CarrierLimit, CarrierLimit + 1, 100000, len(data)} {
		{
			c := NewCarrier()
			written := 0
			for written < len(data) {
				end := min(written+piece, len(data))
				c.Write(data[written:end])
				written = end
				if written > CarrierLimit && written < 2*CarrierLimit+piece && written-piece <= 2*CarrierLimit {
					// midway: the digest of what was written so far
					_, d := c.Result("tok")
					if want := sha256.Sum256(data[:written]); d.SHA256 != hex.EncodeToString(want[:]) || d.Bytes != int64(written) {
						t.Fatalf("piece %d: midway Result %+v; want %d bytes with their SHA-256", piece, d, written)
					}
				}
			}
			_, d := c.Result("tok")
			want := sha256.Sum256(data)
			if d.Category != DiagOversize || d.Bytes != int64(len(data)) || d.SHA256 != hex.EncodeToString(want[:]) {
				t.Fatalf("piece %d: Result %+v; want oversize with %d bytes and their SHA-256", piece, d, len(data))
			}
		}
	}
}

// Writes and Results from two goroutines (run with -race).
func TestCarrierConcurrentResult(t *testing.T) {
	c := NewCarrier()
	done := make(chan struct{})
	go func() {
		defer close(done)
		p := bytes.Repeat([]byte("x"), 4096)
		for i := 0; i < 200; i++ {
			c.Write(p)
		}
	}()
	for i := 0; i < 50; i++ {
		c.Result("tok")
	}
	<-done
	_, d := c.Result("tok")
	want := sha256.Sum256(bytes.Repeat([]byte("x"), 200*4096))
	if d.SHA256 != hex.EncodeToString(want[:]) {
		t.Fatalf("digest %s; want %x", d.SHA256, want)
	}
}

// ParseCarrier runs once per carrier-mode execution, on up to CarrierLimit
// bytes: a frame alone costs one allocation (the returned stdout).
func BenchmarkParseCarrier(b *testing.B) {
	good := frame(testToken, strings.Repeat("r", 1500), false)
	noise := strings.Repeat("some progress output 50%\r", 2700)[:CarrierLimit-len(good)-1] + "\n"
	for _, c := range []struct{ name, carrier string }{{"frame", good}, {"noise and frame", noise + good}, {"noise", noise}} {
		b.Run(c.name, func(b *testing.B) {
			carrier := []byte(c.carrier)
			b.ReportAllocs()
			b.SetBytes(int64(len(carrier)))
			for b.Loop() {
				ParseCarrier(carrier, testToken)
			}
		})
	}
}
