// Package exec starts subjects in tracked scopes, drains their output and
// waits for them.
//
// It never invokes a shell: a command is a program and its arguments. It
// owns the only wait in relayd: one Reaper reaps every child, subjects and
// adopted orphans alike, so no exit status is lost to a second waiter. It
// does not decide when a scope ends; settling is internal/teardown.
package exec
