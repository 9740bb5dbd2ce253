package session

import (
	"context"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	relayclient "github.com/relayd/relayd/client"
	"github.com/relayd/relayd/internal/env"
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
	srv := New(Config{
		Token: []byte(testToken), Workspace: ws, Version: "bench",
		TermGrace: time.Second, TeardownTimeout: 3 * time.Second, WriteTimeout: 5 * time.Second,
		MaxLineBytes: 1 << 20, MaxStdoutBytes: 1 << 20, MaxFileBytes: n, BaseEnv: env.Base(os.Environ()),
		Shims: testShims, Log: zerolog.Nop(),
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Shutdown()
	ctx := context.Background()
	c, err := relayclient.Dial(ctx, ln.Addr().String(), testToken)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
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
