package session

import (
	"context"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	relayclient "github.com/relayd/relayd/client"
)

// BenchmarkBody puts and gets one file as a raw body (section 4.6) through
// the Go client and an in-process relayd over loopback TCP, for profiling
// both sides of a transfer:
//
//	go test -run '^$' -bench Body -benchtime 3x -cpuprofile cpu.out ./internal/session/
func BenchmarkBody(b *testing.B) {
	const n = 256 << 20
	ws := b.TempDir()
	src := filepath.Join(ws, "source.bin")
	f, err := os.Create(src)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(f, io.LimitReader(rand.NewChaCha8([32]byte{30}), n)); err != nil {
		b.Fatal(err)
	}
	f.Close()
	c := filesClient(b, ws, n)
	ctx := context.Background()
	for _, way := range []string{"put", "get"} {
		b.Run(way, func(b *testing.B) {
			b.SetBytes(n)
			for i := 0; i < b.N; i++ {
				if way == "put" {
					f, err := os.Open(src)
					if err != nil {
						b.Fatal(err)
					}
					_, err = c.PutFile(ctx, "put.bin", f, relayclient.PutOptions{})
					f.Close()
					if err != nil {
						b.Fatal(err)
					}
					continue
				}
				o, err := os.Create(filepath.Join(ws, "got.bin"))
				if err != nil {
					b.Fatal(err)
				}
				_, err = c.GetFile(ctx, "put.bin", "", o)
				o.Close()
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
