// Package exec is everything of relayd that touches a subject's processes
// and terminals, in five jobs:
//
//   - Starting a subject through a shim of its own: relayd's binary
//     re-executed as a child subreaper, whose subtree is the scope and
//     whose wait is the evidence. The package holds both sides: the shim
//     process (shimproc_linux.go; its wait in Go's poller and its raw system
//     calls, shimraw_linux.go), relayd's pool of idle shims and its bounded
//     requests (shimpool_linux.go), the frames between them
//     (shimwire_linux.go) and their binary bodies (wirecodec_linux.go),
//     and Start, which makes the output pipes and
//     hands the shim the start request (spawn_linux.go), or a terminal's
//     replica for a subject on a pty, whose master relayd keeps
//     (pty_linux.go, which also holds Terminal: the terminal ioctls relayd
//     makes on a master, a session's among them). drain_linux.go
//     drains a subject's output without ever waiting for EOF to report its
//     exit.
//   - The scope mechanisms: Mechanism and Scope (scope.go), what
//     internal/session and internal/teardown use; process groups, the shim's subtree
//     alone (pgroup_linux.go); cgroup v2, a leaf per execution besides the
//     subtree (cgroup_linux.go). Adding one is a type in a file of its own
//     and a case in cmd/relayd/scope.go.
//   - Reaping: relayd's one Reaper (reaper_linux.go) waits for its own
//     children only (the shims, the --destroy-command that RunBounded runs
//     in run_linux.go, orphans a dead shim leaves); each shim reaps its own
//     subtree. No other code of relayd calls wait.
//   - Reading /proc (proc_linux.go): stat (ReadStat, relayd's one reader
//     of /proc/PID/stat, its tests' too), children, argv, the members of
//     a subtree. Signalling a process only through a pidfd, after its
//     identity (pid and start time) is checked with the pid pinned
//     (pidfd_linux.go, SignalPinned); part of a scope, the rest of its
//     kept subtrees, settled process by process that way (part_linux.go,
//     Part: a trial boundary's kept-out processes, a session's command).
//     Waiting for a process that is not relayd's child to end, on a pidfd
//     with no polling (wait_linux.go, WaitGone: a session's subshell).
//   - What outlives relayd (protocol rule 6.10): --state-dir records of
//     running process-group scopes (state_linux.go), and the leftovers a
//     relayd that no longer runs left, found from those records or from
//     populated cgroup leaves (leftover_linux.go, leftover_cgroup_linux.go).
//
// Nothing of relayd's reaches a subject (rule 6.13): fds_linux.go marks
// what a process was given close-on-exec at its start.
//
// What an execution used, and its subject's resource limits set around
// the shim's fork, are usage_linux.go.
//
// fault_on.go and fault_off.go are test seams that only a binary built
// with the relayd_faults tag can reach; race_on.go ends the shims of a
// binary built with the race detector without its second's sleep at exit
// (race_off.go: the others, with os.Exit).
//
// It never invokes a shell: a command is a program and its arguments (the
// operator's --destroy-command, run with /bin/sh -c by cmd/relayd, is the
// one exception, and not a subject). It does not decide when a scope ends
// or how it is settled: that is internal/session's call and
// internal/teardown's algorithm (a shim whose relayd died runs
// teardown.Settle on its own subtree).
package exec
