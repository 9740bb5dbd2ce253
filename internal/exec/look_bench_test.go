package exec

import (
	"syscall"
	"testing"
)

// BenchmarkLookQuiet is one look at a quiet process-group scope: a subject
// that sleeps, as a long agent run does between its forks. The tracker's
// rescans and every Members call pay this.
func BenchmarkLookQuiet(b *testing.B) {
	scope, err := slowTracker.NewScope("")
	if err != nil {
		b.Fatal(err)
	}
	s, err := Start(testReaper, scope, Spec{Path: "/bin/sleep", Argv: []string{"sleep", "600"}, Env: shEnv, Dir: "/"})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = scope.Signal(syscall.SIGKILL)
		<-s.Exited()
		scope.Close()
	}()
	if _, err := scope.Members(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := scope.Members(); err != nil {
			b.Fatal(err)
		}
	}
}
