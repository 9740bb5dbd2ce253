// Package exec starts subjects in tracked scopes, drains their output and
// waits for them.
//
// It never invokes a shell: a command is a program and its arguments.
// Every subject is started by a shim of its own, relayd's binary
// re-executed as a child subreaper, whose subtree is the scope and whose
// wait is the evidence; the package holds both sides of it. Where to look:
//
//	spawn_linux.go      Start: pipes, the shim's start request, the Subject
//	shim_linux.go       the shim process: fork, reap, walk, signal, settle on relayd's death
//	shims_linux.go      relayd's side: the pool of shims, requests and their bounds
//	shimwire_linux.go   the frames between them
//	scope.go            Mechanism and Scope, what the session and teardown use
//	pgroup_linux.go     the process-group mechanism: the shim's subtree
//	cgroup_linux.go     the cgroup v2 mechanism: a leaf per execution, plus the shim's subtree
//	reaper_linux.go     relayd's one reaper (its shims, and what a dead shim leaves)
//	proc_linux.go       reading /proc: stat, children, argv; signalMember
//	state_linux.go      --state-dir records; leftover*_linux.go: what a dead relayd left
//	drain_linux.go      output drains; run_linux.go: the destroy command
//
// One component reaps each process: relayd's Reaper its own children (the
// shims, the destroy command, orphans of a dead shim), each shim its
// subtree. It does not decide when a scope ends; settling is
// internal/teardown.
package exec
