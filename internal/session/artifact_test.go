package session

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
)

// An artifact keeps the first --max-artifact-bytes of its stream, exactly,
// and takes every later write whole without keeping it, so that the drain
// never sees a failed copy and never stops reading.
func TestArtifactStopsAtLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x-1.stdout.txt")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	a := &artifact{f: f, left: 10, log: zerolog.Nop()}
	for _, p := range []string{"abcd", "efghij", "", "klm", "nopqrstuvwxyz"} {
		if n, err := a.Write([]byte(p)); n != len(p) || err != nil {
			t.Fatalf("Write(%q) = %d, %v; want %d, nil", p, n, err, len(p))
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); !bytes.Equal(b, []byte("abcdefghij")) {
		t.Fatalf("artifact holds %q; want the first 10 bytes, %q", b, "abcdefghij")
	}
}
