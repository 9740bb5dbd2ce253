package session

import (
	"bytes"
	"sort"
	"strings"
	"testing"
	"time"
)

// medianTime is the median time of 101 calls of tokenOK(guess).
func medianTime(s *Server, guess string) time.Duration {
	var d []time.Duration
	for i := 0; i < 101; i++ {
		began := time.Now()
		s.tokenOK(guess)
		d = append(d, time.Since(began))
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2]
}

func TestTokenOK(t *testing.T) {
	s := New(Config{Token: []byte("tok-0123456789")})
	tests := []struct {
		guess string
		want  bool
	}{
		{"tok-0123456789", true},
		{"tok-012345678", false},   // a prefix
		{"tok-01234567890", false}, // longer
		{"tok-0123456788", false},  // same length, last byte wrong
		{"Tok-0123456789", false},  // case matters
		{"", false},
		{"tok-0123456789\n", false},
		{strings.Repeat("x", 1<<16), false},
	}
	for _, tt := range tests {
		if got := s.tokenOK(tt.guess); got != tt.want {
			t.Errorf("tokenOK(%.20q) = %v; want %v", tt.guess, got, tt.want)
		}
	}
}

// The token comparison takes as long for a guess that is wrong in its
// first byte as for one wrong only in its last: a peer cannot learn the
// token byte by byte from response times. With a 1 MiB token an
// early-exit comparison differs by orders of magnitude, far above the noise
// a 5x bound allows.
func TestTokenComparedInConstantTime(t *testing.T) {
	token := bytes.Repeat([]byte("k"), 1<<20)
	s := New(Config{Token: token})
	early := append([]byte("x"), token[1:]...)
	late := append(append([]byte{}, token[:len(token)-1]...), 'x')
	if s.tokenOK(string(early)) || s.tokenOK(string(late)) || !s.tokenOK(string(token)) || s.tokenOK(string(token[:10])) {
		t.Fatal("tokenOK accepts a wrong token or refuses the right one")
	}
	e, l := medianTime(s, string(early)), medianTime(s, string(late))
	if l > 5*e || e > 5*l {
		t.Fatalf("a guess wrong in its first byte takes %s, one wrong in its last %s: the comparison leaks where it differs", e, l)
	}
}

// Nor does the time tell the token's length (protocol section 9): a guess
// of the token's length takes as long as one a byte longer or shorter. A
// comparison of the tokens themselves returns at once when the lengths
// differ, so with a 1 MiB token the guess of the right length would take
// orders of magnitude longer than the others.
func TestTokenLengthNotLeaked(t *testing.T) {
	token := bytes.Repeat([]byte("k"), 1<<20)
	s := New(Config{Token: token})
	same := string(append(append([]byte{}, token[:len(token)-1]...), 'x'))
	longer := string(token) + "k"
	shorter := string(token[:len(token)-1])
	m, lo, sh := medianTime(s, same), medianTime(s, longer), medianTime(s, shorter)
	for name, d := range map[string]time.Duration{"a byte longer": lo, "a byte shorter": sh} {
		if m > 5*d || d > 5*m {
			t.Fatalf("a wrong guess of the token's length takes %s, one %s %s: the comparison leaks the length", m, name, d)
		}
	}
}
