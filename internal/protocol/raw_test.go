package protocol

import (
	"math/rand"
	"strings"
	"testing"
)

func TestRawCapture(t *testing.T) {
	tests := []struct {
		name          string
		max           int
		writes        []string
		wantStdout    string
		wantTruncated bool
	}{
		{"nothing written", 5, nil, "", false},
		{"under max", 5, []string{"abc"}, "abc", false},
		{"exactly max", 5, []string{"abcde"}, "abcde", false},
		{"exactly max in pieces", 5, []string{"ab", "", "cde"}, "abcde", false},
		{"max plus one", 5, []string{"abcdef"}, "abcde", true},
		{"max plus one in pieces", 5, []string{"abcde", "f"}, "abcde", true},
		{"empty write after max", 5, []string{"abcde", ""}, "abcde", false},
		{"far over max", 5, []string{"abc", strings.Repeat("x", 1<<20), "y"}, "abcxx", true},
		{"invalid UTF-8 replaced", 10, []string{"a\xffb\xc0"}, "a\uFFFDb\uFFFD", false},
		{"each invalid byte replaced", 10, []string{"\xff\xfe"}, "\uFFFD\uFFFD", false},
		{"valid multi-byte kept", 10, []string{"é€😀"}, "é€😀", false},
		{"character cut by the limit", 2, []string{"aé"}, "a\uFFFD", true},
		{"NUL kept", 10, []string{"a\x00b"}, "a\x00b", false},
		{"discard: max 0, nothing written", 0, nil, "", false},
		{"discard: max 0, empty write", 0, []string{""}, "", false},
		{"discard: max 0, output", 0, []string{"x"}, "", true},
		{"negative max is 0", -1, []string{"x"}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRawCapture(tt.max)
			for _, w := range tt.writes {
				if n, err := r.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write: got %d, %v; want %d, nil", n, err, len(w))
				}
			}
			stdout, truncated := r.Result()
			if stdout != tt.wantStdout || truncated != tt.wantTruncated {
				t.Errorf("Result: got %q, %v; want %q, %v", stdout, truncated, tt.wantStdout, tt.wantTruncated)
			}
			if max := max(tt.max, 0); cap(r.buf) > max {
				t.Errorf("bytes held: got capacity %d; want at most %d", cap(r.buf), max)
			}
		})
	}
}

// With outputKeep "tail" the capture holds the last max bytes of whatever
// came, in order, however the writes were cut.
func TestRawCaptureTail(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for _, max := range []int{1, 7, 64, 1000} {
		for trial := 0; trial < 200; trial++ {
			r := NewRawCaptureTail(max)
			var all []byte
			for n := rng.Intn(20); n > 0; n-- {
				p := make([]byte, rng.Intn(3*max+2))
				for i := range p {
					p[i] = 'a' + byte(rng.Intn(26))
				}
				all = append(all, p...)
				r.Write(p)
			}
			got, truncated := r.Result()
			want := all
			if len(want) > max {
				want = want[len(want)-max:]
			}
			if got != string(want) || truncated != (len(all) > max) {
				t.Fatalf("max %d, %d bytes written: got %q (truncated %v); want %q (%v)", max, len(all), got, truncated, want, len(all) > max)
			}
		}
	}
}

// TestRawCaptureResultCopiesNothing: the reply's stdout is the capture's
// own bytes, not a copy of up to --max-stdout-bytes (a 1 MiB copy was
// part of relayd's peak RSS); Result seals the capture, so what a
// background process writes afterwards cannot change the string handed out.
func TestRawCaptureResultCopiesNothing(t *testing.T) {
	for _, tail := range []bool{false, true} {
		r := NewRawCapture(1 << 20)
		if tail {
			r = NewRawCaptureTail(1 << 20)
		}
		chunk := []byte(strings.Repeat("a", 64<<10))
		for i := 0; i < 16; i++ {
			r.Write(chunk)
		}
		var out string
		allocs := testing.AllocsPerRun(1, func() { out, _ = r.Result() })
		if allocs != 0 {
			t.Errorf("tail %v: Result allocated %v times for 1 MiB of valid UTF-8; want none", tail, allocs)
		}
		r.Write([]byte(strings.Repeat("b", 64<<10)))
		if len(out) != 1<<20 || strings.Count(out, "a") != 1<<20 {
			t.Errorf("tail %v: a write after Result changed the result: %d bytes, %d of them a", tail, len(out), strings.Count(out, "a"))
		}
		if again, _ := r.Result(); again != out {
			t.Errorf("tail %v: a second Result differs from the first", tail)
		}
	}
}
