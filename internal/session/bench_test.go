package session

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/relayd/relayd/internal/env"
	"github.com/relayd/relayd/internal/exec"
	"github.com/relayd/relayd/internal/testharness"
)

// BenchmarkExecuteTrue is the in-process twin of e2e's round-trip
// benchmark, for profiling the server's own path:
//
//	go test -run '^$' -bench ExecuteTrue -cpuprofile cpu.out ./internal/session/
func BenchmarkExecuteTrue(b *testing.B) {
	for _, mech := range []string{exec.ProcessGroup, exec.Cgroup} {
		b.Run(mech, func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
			testShims.Warm()
			newScope := exec.NewProcessGroups(testShims).NewScope
			if mech == exec.Cgroup {
				cg, err := env.FindCgroup2("")
				if err != nil {
					b.Skip(err)
				}
				c, err := exec.NewCgroups(ctx, testShims, cg.Base, cg.Base)
				if err != nil {
					b.Skip(err)
				}
				defer c.Release()
				newScope = c.NewScope
			}
			srv := New(Config{
				Token: []byte(testToken), Workspace: b.TempDir(), Version: "bench",
				TermGrace: time.Second, TeardownTimeout: 3 * time.Second, WriteTimeout: 5 * time.Second,
				MaxLineBytes: 1 << 20, MaxStdoutBytes: 1 << 20, BaseEnv: env.Base(os.Environ()),
				Shims: testShims, NewScope: newScope, Mechanism: mech, Log: zerolog.Nop(),
			})
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			go srv.Serve(ln)
			defer srv.Shutdown()
			w, err := testharness.DialWire(ln.Addr().String(), testToken, 5*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			defer w.Conn.Close()
			req := []byte(`{"token":"` + testToken + `","kind":"execute","command":"/bin/true"}` + "\n")
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := w.SendRaw(req); err != nil {
					b.Fatal(err)
				}
				line, err := w.ReadLine(30 * time.Second)
				if err != nil {
					b.Fatal(err)
				}
				var m map[string]any
				if json.Unmarshal(line, &m) != nil || m["exitCode"] != float64(0) {
					b.Fatalf("reply %s", line)
				}
			}
		})
	}
}
