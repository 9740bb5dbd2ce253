package marks

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// benchTree writes the shape of relaybench's marks section (scaled by
// dirs): leaf directories of 10 files, 50 to a top-level directory.
func benchTree(b *testing.B, root string, dirs int) []string {
	b.Helper()
	rng := rand.NewChaCha8([32]byte{42})
	buf := make([]byte, 256<<10)
	var paths []string
	n := 0
	for d := range dirs {
		leaf := filepath.Join(root, fmt.Sprintf("pkg%02d", d/50), fmt.Sprintf("mod%03d", d%50))
		if err := os.MkdirAll(leaf, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := range 10 {
			size := 256 + int(rng.Uint64()%6400)
			if n%100 == 99 {
				size = 64<<10 + int(rng.Uint64()%(192<<10))
			}
			_, _ = rng.Read(buf[:size])
			p := filepath.Join(leaf, fmt.Sprintf("file%02d.dat", f))
			if err := os.WriteFile(p, buf[:size], 0o644); err != nil {
				b.Fatal(err)
			}
			paths = append(paths, p)
			n++
		}
	}
	return paths
}

func benchChange(b *testing.B, paths []string) {
	for k := 0; k < 9; k++ {
		p := paths[(k*2003+7)%len(paths)]
		if err := os.WriteFile(p, []byte(fmt.Sprintf("changed %d", k)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// The relaybench shape: 2,000 directories of 10 files.
func BenchmarkMarks(b *testing.B) {
	dir := b.TempDir()
	tree := filepath.Join(dir, "tree")
	paths := benchTree(b, tree, 2000)
	time.Sleep(racyMargin + 100*time.Millisecond) // no entry changed during the mark
	s, err := Open(Config{Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("mark", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := s.Mark(Request{Name: "m", Paths: []string{tree}, Keep: []string{tree}}, nil); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := s.Unmark("m"); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
	if _, err := s.Mark(Request{Name: "m", Paths: []string{tree}, Keep: []string{tree}}, nil); err != nil {
		b.Fatal(err)
	}
	benchChange(b, paths)
	b.Run("changes", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			c, err := s.Changes("m", nil, 0, nil)
			if err != nil {
				b.Fatal(err)
			}
			if c.Count() != 9 {
				b.Fatalf("%d changes", c.Count())
			}
		}
	})
	b.Run("restore", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			benchChange(b, paths)
			r, err := s.Restore("m", nil, false)
			if err != nil {
				b.Fatal(err)
			}
			if r.Written != 9 {
				b.Fatalf("%d written", r.Written)
			}
		}
	})
}
