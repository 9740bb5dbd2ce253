// Package client is a controller for relayd: it speaks relayd's wire
// protocol (newline-delimited JSON over TCP, protocol version 1) so that a Go
// harness does not have to.
//
// A Conn is one authenticated connection to one relayd. Dial makes one to a
// relayd that listens; a Listener accepts relayds that dial out
// (relayd --connect) and hands each to the trial that knows its token. On a
// Conn, Execute runs one command in a tracked scope and returns its Executed
// reply, and Ready probes. One word per meaning: Verify ends the subject's
// time on this connection (protocol 4.3), Boundary the whole trial's
// (protocol 4.6: every execution of relayd ends; relayctl verify), and
// Status looks at what runs and what was left without touching anything.
// VerifyWith, which draws the boundary with VerifyOptions.All, stays.
//
// The extensions of protocol section 4.5 are Request fields: CaptureStderr
// (Executed.Stderr), Output (live output, delivered in order before the
// reply) with Started, OnExit, and Detach, after which a lost connection
// leaves the execution running for a while and another Conn can take it
// over with Attach (ErrNotFound when relayd holds no such execution).
//
// Files (protocol section 4.6): PutFile stores a stream atomically on
// relayd's side and GetFile streams a file from it, each checking relayd's
// sha256 of the whole file. UploadDir and DownloadDir move a tree as a tar
// archive over them, unpacked by tar on relayd's side and, on this side,
// by a reader that refuses members landing outside the directory.
//
// Marks (protocol section 4.9): Mark records the files under some paths
// and keeps the content of some subtrees on relayd's side, Changes lists
// what differs since (a stat walk the agent cannot fake by setting times
// back), Restore puts the kept subtrees back, and Recycle is a trial
// boundary that settles every survivor followed by that restore: a used
// container handed to the next trial. VerifyOptions.Files lists the
// changes under protected paths at the boundary, and restores them.
//
// The protocol runs one execution at a time on a connection: a second
// Execute on a Conn whose execution is still running returns ErrBusy without
// asking relayd. A Pool keeps several connections to run several at once.
//
// Cancellation: when the ctx of a call is done before its reply arrives, the
// call closes the connection and returns the context's error. relayd treats
// the closed connection as transport loss: it settles whatever the
// connection was running (protocol rule 6.4). The Conn is then unusable.
//
// Waits are bounded. Execute with a Timeout waits for the reply at most
// Timeout plus relayd's teardown budget (Dialer.TeardownTimeout, relayd's
// --teardown-timeout, plus a small constant), then closes the connection and
// returns ErrReplyOverdue; without a Timeout it waits as long as ctx allows.
// The client never half-closes a connection: a reply owed is read before
// the connection is closed, by Close or by relayd.
//
// The package does not start relayd, run anything itself, or retry: a lost
// connection is reported (ErrConnLost) and the caller decides.
package client
