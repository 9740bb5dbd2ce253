package client_test

import (
	"context"
	"fmt"
	"log"
	"path/filepath"
	"sync"
	"time"

	"github.com/relayd/relayd/client"
	"github.com/relayd/relayd/internal/testharness"
)

// exampleRelayd starts the relayd the examples talk to (stopped by
// TestMain): what make run is in the README.
var exampleRelayd = sync.OnceValue(func() *testharness.Relayd {
	r, err := testharness.Start(testharness.Options{Bin: relaydBin,
		Args: []string{"--scope", "process-group", "--term-grace", "300ms", "--state-dir", filepath.Join(tmpDir, "example-state")}})
	if err != nil {
		log.Fatal(err)
	}
	stopAtEnd = append(stopAtEnd, func() { r.Stop(15 * time.Second) })
	return r
})

// The README's Go controller (section "Controllers"): the lines from the
// README mark to the end of the function are printed there as they are
// (TestReadmeGoExampleIsTested in e2e checks it).
func Example() {
	addr, token := exampleRelayd().Addr, exampleRelayd().Token
	// README begin
	ctx := context.Background()
	conn, err := client.Dial(ctx, addr, token)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	e, err := conn.Execute(ctx, client.Request{
		Command: "sh", Args: []string{"-c", "echo hello; exit 7"},
	})
	if err != nil {
		log.Fatal(err) // relayd could not answer: no exit code to report
	}
	fmt.Printf("%s %d %q settlement=%s\n", e.Termination, e.ExitCode, e.Stdout, e.Settlement)

	e, err = conn.Execute(ctx, client.Request{
		Command: "sleep", Args: []string{"30"}, Timeout: time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s %d settlement=%s trustworthy=%t\n",
		e.Termination, e.ExitCode, e.Settlement, e.Settlement.Trustworthy())

	v, err := conn.Verify(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("quiescent=%t survivors=%d\n", v.Quiescent, len(v.Survivors))
	// Output:
	// exited 7 "hello\n" settlement=none
	// framework_timeout 124 settlement=settled trustworthy=true
	// quiescent=true survivors=0
}
