package main

import (
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/spf13/pflag"
)

// bridgeMain is `relayd bridge` (protocol 4.6): it copies its stdin to a
// connection to relayd's Unix socket and relayd's replies to its stdout,
// so that a controller reaches relayd through any exec channel it has
// (docker exec -i C relayd bridge, kubectl exec -i POD -c task --
// /opt/relayd/relayd bridge).
// It neither reads nor adds the token. The end of its stdin is a
// half-close: relayd handles what it read, writes the replies owed, and
// treats the end as transport loss for whatever still runs (rule 6.4),
// exactly as for a TCP controller that half-closes. The bridge exits 0
// when relayd closes the connection, 1 when its stdout fails, 2 when it
// cannot reach relayd. Its death closes the connection: transport loss.
func bridgeMain(args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("relayd bridge", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	def := defaultOptions().socket
	if v := getenv(envName("socket")); v != "" {
		def = v
	}
	path := fs.String("socket", def, "relayd's Unix socket (relayd --socket)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprintf(stdout, "Usage: relayd bridge [--socket PATH]\n\nCopies stdin to relayd's Unix socket and the replies to stdout.\n\n%s", fs.FlagUsages())
			return 0
		}
		fmt.Fprintf(stderr, "relayd bridge: %v (relayd bridge --help)\n", err)
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "relayd bridge: unexpected argument %q: it takes only --socket\n", fs.Arg(0))
		return exitUsage
	}
	c, err := net.Dial("unix", *path)
	if err != nil {
		fmt.Fprintf(stderr, "relayd bridge: %v (is relayd running in listen mode, with this --socket?)\n", err)
		return exitUsage
	}
	defer c.Close()
	widenPipe(stdin)
	widenPipe(stdout)
	go func() {
		// Through a buffer of its own: io.Copy's would be 32 KiB, as a
		// socket takes no sendfile from a pipe.
		_, _ = io.CopyBuffer(onlyWriter{c}, onlyReader{stdin}, make([]byte, bridgeBufBytes))
		_ = c.(*net.UnixConn).CloseWrite() // the end of stdin is the end of the controller's stream
	}()
	// Through a buffer too, not spliced: a spliced socket write stays a
	// pipe buffer of its own (the kernel merges no spliced pages), and
	// docker's end of the pipe then read a body in pieces. A 1 GiB get
	// through docker exec -i took half the CPU this way, at 1.4 to 1.8
	// times the rate (docs/performance.md).
	if _, err := io.CopyBuffer(onlyWriter{stdout}, onlyReader{c}, make([]byte, bridgeBufBytes)); err != nil {
		var oe *net.OpError
		if !errors.As(err, &oe) { // not the socket's error: stdout's
			return 1
		}
	}
	return 0
}

// bridgeBufBytes is the buffer the bridge's stdin goes through: a pipe
// widened by widenPipe holds as much.
const bridgeBufBytes = 1 << 20

// onlyReader and onlyWriter hide a ReaderFrom or WriterTo, so that
// io.CopyBuffer uses the buffer given.
type onlyReader struct{ io.Reader }
type onlyWriter struct{ io.Writer }
