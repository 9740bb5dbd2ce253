package protocol

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math/rand"
	"os/exec"
	"strings"
	"testing"
)

// pythonText answers, with Python's own codec, what Maka's relay counts
// of each input: len and sha256 of b.decode("utf-8", "replace").encode().
const pythonText = `
import hashlib, json, sys
out = []
for h in json.load(sys.stdin):
    t = bytes.fromhex(h).decode("utf-8", errors="replace").encode()
    out.append([len(t), hashlib.sha256(t).hexdigest()])
json.dump(out, sys.stdout)
`

// The text counts (the maka layout's, Carrier.CountText) are Python's, for
// inputs rich in ill-formed UTF-8, counted whole and written in random
// pieces; 13 bytes of the kind count 17.
func TestTextCountsAgreeWithPython(t *testing.T) {
	if testing.Short() {
		t.Skip("starts python3")
	}
	python := pythonForTest(t)
	rng := rand.New(rand.NewSource(7))
	pieces := []string{"a", "\n", "é", "\u2028", "\uFFFD", "\xff", "\x80", "\xc0", "\xc1\xbf", "\xc2", "\xdf", "\xe0", "\xe0\x80",
		"\xe0\xa0", "\xe2\x82", "\xe2\x82\xac", "\xed\x9f", "\xed\xa0", "\xef\xbf", "\xf0", "\xf0\x8f", "\xf0\x90",
		"\xf0\x9f\x98", "\xf0\x9f\x98\x80", "\xf4\x8f\xbf", "\xf4\x90", "\xf5", "\xbf"}
	inputs := [][]byte{[]byte("result: \xff\xfe ok"), {}, []byte("\xe2\x82")}
	for i := 0; i < 3000; i++ {
		var b []byte
		for k := rng.Intn(10); k > 0; k-- {
			b = append(b, pieces[rng.Intn(len(pieces))]...)
		}
		inputs = append(inputs, b)
	}
	hexes := make([]string, len(inputs))
	for i, b := range inputs {
		hexes[i] = hex.EncodeToString(b)
	}
	q, _ := json.Marshal(hexes)
	cmd := exec.Command(python, "-c", pythonText)
	cmd.Stdin = bytes.NewReader(q)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3: %v", err)
	}
	var want [][2]any
	if err := json.Unmarshal(out, &want); err != nil {
		t.Fatal(err)
	}
	if len(inputs[0]) != 13 || want[0][0] != float64(17) {
		t.Fatalf("the issue's 13-byte input: Python counts %v; want 17", want[0][0])
	}
	for i, b := range inputs {
		n, h := replacedCounts(b)
		got := [2]any{float64(n), hex.EncodeToString(h.Sum(nil))}
		if got != want[i] {
			t.Fatalf("%q: counted %v; Python %v", b, got, want[i])
		}
		tc := newTextCount()
		for rest := b; len(rest) > 0; {
			k := 1 + rng.Intn(len(rest))
			tc.write(rest[:k])
			rest = rest[k:]
		}
		if n, sum := tc.result(); float64(n) != want[i][0] || sum != want[i][1] {
			t.Fatalf("%q written in pieces: counted %d %s; Python %v", b, n, sum, want[i])
		}
	}
}

// In text mode every count of the carrier rules is the text's: a missing
// frame, noise beside a valid frame, and a carrier whose bytes fit the
// limit but whose text does not.
func TestCarrierCountText(t *testing.T) {
	tok := strings.Repeat("ab", 16)
	text := func(s string) (int64, string) {
		n, h := replacedCounts([]byte(s))
		return n, hex.EncodeToString(h.Sum(nil))
	}
	raw := "result: \xff\xe2\x82 ok" // 14 bytes, 17 as text: "\xe2\x82" is one U+FFFD
	c := NewCarrier()
	c.CountText()
	c.Write([]byte(raw[:9]))
	c.Write([]byte(raw[9:10])) // splits "\xe2" from "\x82"
	c.Write([]byte(raw[10:]))
	_, d := c.Result(tok)
	if n, sum := text(raw); d.Category != DiagMissing || d.Bytes != 17 || n != 17 || d.SHA256 != sum || len(raw) != 14 {
		t.Fatalf("missing frame: %+v; want bytes 17 and the text's digest %s", d, sum)
	}

	payload := []byte(`{"ok":1}`)
	sum := sha256.Sum256(payload)
	frame := FramePrefix + " " + tok + " 8 " + hex.EncodeToString(sum[:]) + " eyJvayI6MX0\n"
	got, d := ParseCarrierText([]byte("\xff\n"+frame+"x\xe2\x82"), tok)
	if n, digest := text("\xff\nx\xe2\x82"); got != string(payload) || d.Category != DiagUnstructured || d.Bytes != n || d.SHA256 != digest || n != 8 {
		t.Fatalf("noise beside a frame: %q %+v; want the payload, unstructured-output, bytes 8", got, d)
	}

	big := strings.Repeat("\xff", CarrierLimit/2) // 32 KiB, 96 KiB as text
	c = NewCarrier()
	c.CountText()
	c.Write([]byte(big))
	_, d = c.Result(tok)
	if n, digest := text(big); d.Category != DiagOversize || d.Bytes != n || d.SHA256 != digest {
		t.Fatalf("text over the limit: %+v; want result-frame-oversize with the text's counts", d)
	}
	// Without CountText the counts are the bytes'.
	if _, d := ParseCarrier([]byte(raw), tok); d.Bytes != 14 {
		t.Fatalf("raw counts: %+v; want bytes 14", d)
	}
}
