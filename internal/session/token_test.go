package session

import (
	"bytes"
	"sort"
	"testing"
	"time"
)

// The token comparison takes as long for a guess that is wrong in its
// first byte as for one wrong only in its last: a peer cannot learn the
// token byte by byte from response times. With a 1 MiB token an
// early-exit comparison differs by orders of magnitude, far above the noise
// a 5x bound allows.
func TestTokenComparedInConstantTime(t *testing.T) {
	token := bytes.Repeat([]byte("k"), 1<<20)
	s := &Server{cfg: Config{Token: token}}
	early := append([]byte("x"), token[1:]...)
	late := append(append([]byte{}, token[:len(token)-1]...), 'x')
	if s.tokenOK(string(early)) || s.tokenOK(string(late)) || !s.tokenOK(string(token)) || s.tokenOK(string(token[:10])) {
		t.Fatal("tokenOK accepts a wrong token or refuses the right one")
	}
	median := func(guess string) time.Duration {
		var d []time.Duration
		for i := 0; i < 101; i++ {
			began := time.Now()
			s.tokenOK(guess)
			d = append(d, time.Since(began))
		}
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return d[len(d)/2]
	}
	e, l := median(string(early)), median(string(late))
	if l > 5*e || e > 5*l {
		t.Fatalf("a guess wrong in its first byte takes %s, one wrong in its last %s: the comparison leaks where it differs", e, l)
	}
}
