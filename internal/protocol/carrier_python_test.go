package protocol

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"math/rand"
	"os"
	"os/exec"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// pythonRules answers, with Python's own builtins, the three questions the
// carrier rules leave to Python: how int() reads a length, how
// b64decode(..., altchars=b"-_", validate=True) reads a payload padded to a
// multiple of four, and where str.splitlines() splits bytes decoded with
// errors="replace". Input and output are one JSON document each.
const pythonRules = `
import base64, binascii, json, sys, unicodedata

q = json.load(sys.stdin)

def length(s):
    try:
        n = int(s)
    except ValueError:
        return None
    return n if 0 <= n <= 2048 else None

def payload(s):
    try:
        return base64.b64decode(s + "=" * (-len(s) % 4), altchars=b"-_", validate=True).hex()
    except (ValueError, binascii.Error):
        return None

def lines(h):
    text = bytes.fromhex(h).decode("utf-8", errors="replace")
    return [l.replace("\ufffd", "").encode().hex() for l in text.splitlines(keepends=True)]

# Code points that int() reads alone, before "5", or after "5" (only when
# Python's Unicode is Go's: otherwise they are not compared).
alone, before, after = {}, [], []
for c in range(0x110000 if unicodedata.unidata_version == q["unicode"] else 0):
    if 0xD800 <= c < 0xE000:
        continue
    ch = chr(c)
    if length(ch) is not None:
        alone[c] = length(ch)
    if length(ch + "5") is not None:
        before.append(c)
    if length("5" + ch) is not None:
        after.append(c)

json.dump({
    "version": list(sys.version_info[:3]),
    "unicode": unicodedata.unidata_version,
    "lengths": [length(s) for s in q["lengths"]],
    "payloads": [payload(s) for s in q["payloads"]],
    "lines": [lines(h) for h in q["lines"]],
    "alone": alone, "before": before, "after": after,
}, sys.stdout)
`

// pythonForTest finds a python3 to compare with: $RELAYD_TEST_PYTHON, or
// python3 on PATH.
func pythonForTest(t *testing.T) string {
	if p := os.Getenv("RELAYD_TEST_PYTHON"); p != "" {
		return p
	}
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 to compare with")
	}
	return p
}

// The length, payload and line rules give, for many inputs, what Python's
// builtins give. Parts that depend on the Python release are compared only
// where the release is one the reference runs on: base64 padding from
// 3.12.4 (before it, "YWFh=" decoded), Unicode digits and white space where
// Python's Unicode version is Go's.
func TestCarrierRulesAgreeWithPython(t *testing.T) {
	if testing.Short() {
		t.Skip("starts python3")
	}
	python := pythonForTest(t)

	// Lengths: every string of up to four pieces.
	var lengths []string
	lengthPieces := []string{"0", "3", "_", "+", "-", "\t", "\u00a0", "\u3000", "\u0663", "\U0001d7d1", "x", "\x1f", "\u200b", "\xff"}
	var grow func(s string, k int)
	grow = func(s string, k int) {
		lengths = append(lengths, s)
		if k == 0 {
			return
		}
		for _, p := range lengthPieces {
			grow(s+p, k-1)
		}
	}
	grow("", 4)
	lengths = append(lengths, strings.Repeat("0", 4299)+"7", strings.Repeat("0", 4300)+"7", strings.Repeat("0_", 4299)+"7",
		strings.Repeat("0_", 4300)+"7", "2048", "2049", "+2_048", "-0", "-1")

	// Payloads: every string of up to five characters from both alphabets,
	// padding and a few strangers.
	var payloads []string
	payloadChars := []string{"Y", "Q", "W", "-", "_", "+", "/", "=", ".", " "}
	var growP func(s string, k int)
	growP = func(s string, k int) {
		payloads = append(payloads, s)
		if k == 0 {
			return
		}
		for _, c := range payloadChars {
			growP(s+c, k-1)
		}
	}
	growP("", 5)
	payloads = append(payloads, "Pz4-Pz8/", "Pz4+Pz8_", "YWFh====", "YQ==YQ==", "Y\u00e9Q", "YQ\x00")

	// Lines: random byte strings of breaks, near-breaks and invalid UTF-8.
	rng := rand.New(rand.NewSource(1))
	linePieces := []string{"a", "M", " ", "\n", "\r", "\r\n", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x1f", "\t",
		"\u0085", "\u2028", "\u2029", "\x85", "\xc2", "\xe2", "\xe2\x80", "\x80", "\xa8", "\xf0\x9f", "\xff", "é", "\u202a"}
	var lineInputs [][]byte
	for i := 0; i < 3000; i++ {
		var b []byte
		for k := rng.Intn(12); k > 0; k-- {
			b = append(b, linePieces[rng.Intn(len(linePieces))]...)
		}
		lineInputs = append(lineInputs, b)
	}
	lineHex := make([]string, len(lineInputs))
	for i, b := range lineInputs {
		lineHex[i] = hex.EncodeToString(b)
	}

	query, err := json.Marshal(map[string]any{"lengths": lengths, "payloads": payloads, "lines": lineHex, "unicode": unicode.Version})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, "-c", pythonRules)
	cmd.Stdin = bytes.NewReader(query)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", python, err)
	}
	var py struct {
		Version  []int
		Unicode  string
		Lengths  []*int
		Payloads []*string
		Lines    [][]string
		Alone    map[string]int
		Before   []rune
		After    []rune
	}
	if err := json.Unmarshal(out, &py); err != nil {
		t.Fatal(err)
	}
	t.Logf("Python %v, Unicode %s; Go's Unicode %s", py.Version, py.Unicode, unicode.Version)
	sameUnicode := py.Unicode == unicode.Version

	for i, s := range lengths {
		if !sameUnicode && !isASCII(s) {
			continue
		}
		n, ok := parseLength([]byte(s))
		if want := py.Lengths[i]; ok != (want != nil) || ok && n != *want {
			t.Errorf("parseLength(%+q): got %d, %v; Python's int() gives %v", s, n, ok, deref(want))
		}
	}

	if v := py.Version; v[0] > 3 || v[0] == 3 && (v[1] > 12 || v[1] == 12 && v[2] >= 4) {
		var buf [MaxPayload]byte
		for i, s := range payloads {
			n, ok := decodeBase64([]byte(s), &buf)
			got := hex.EncodeToString(buf[:n])
			if want := py.Payloads[i]; ok != (want != nil) || ok && got != *want {
				t.Errorf("decodeBase64(%q): got %s, %v; Python's b64decode gives %v", s, got, ok, deref(want))
			}
		}
	} else {
		t.Logf("base64 not compared: Python %v reads excess padding as Python 3.12.4 and later do not", py.Version)
	}

	for i, b := range lineInputs {
		// Line by line, each line's characters (invalid bytes dropped, as
		// Python's U+FFFD are).
		var got []string
		starts := map[int]bool{}
		for pos := 0; pos < len(b); {
			starts[pos] = true
			_, next := lineEnd(b, pos)
			got = append(got, hex.EncodeToString(dropInvalid(b[pos:next])))
			pos = next
		}
		if strings.Join(got, ",") != strings.Join(py.Lines[i], ",") {
			t.Errorf("lines of %q: got %q; Python's splitlines gives %q", b, got, py.Lines[i])
		}
		for j := range b {
			if b[j] == 'M' && startsLine(b, j) != starts[j] {
				t.Errorf("startsLine(%q, %d): got %v; want %v", b, j, startsLine(b, j), starts[j])
			}
		}
	}

	if !sameUnicode {
		t.Logf("code points not compared: Python's Unicode is %s, Go's %s", py.Unicode, unicode.Version)
		return
	}
	alone := map[rune]int{}
	for k, v := range py.Alone {
		alone[rune(atoi(t, k))] = v
	}
	before, after := runeSet(py.Before), runeSet(py.After)
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if r >= 0xd800 && r < 0xe000 {
			continue
		}
		c := string(r)
		n, ok := parseLength([]byte(c))
		if want, wantOK := alone[r]; ok != wantOK || n != want {
			t.Errorf("parseLength(%+q): got %d, %v; Python's int() gives %d, %v", c, n, ok, want, wantOK)
		}
		if _, ok := parseLength([]byte(c + "5")); ok != before[r] {
			t.Errorf("parseLength(%+q): got %v; Python's int() gives %v", c+"5", ok, before[r])
		}
		if _, ok := parseLength([]byte("5" + c)); ok != after[r] {
			t.Errorf("parseLength(%+q): got %v; Python's int() gives %v", "5"+c, ok, after[r])
		}
	}
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func deref[T any](p *T) any {
	if p == nil {
		return "an error"
	}
	return *p
}

func dropInvalid(b []byte) []byte {
	var out []byte
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r != utf8.RuneError || size > 1 {
			out = append(out, b[:size]...)
		}
		b = b[size:]
	}
	return out
}

func runeSet(rs []rune) map[rune]bool {
	m := make(map[rune]bool, len(rs))
	for _, r := range rs {
		m[r] = true
	}
	return m
}

func atoi(t *testing.T, s string) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			t.Fatalf("not a code point: %q", s)
		}
		n = n*10 + int(c-'0')
	}
	return n
}
