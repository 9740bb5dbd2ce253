// Package testharness starts relayd for tests and benchmarks and reads what
// they need of /proc. It is the one launcher of the repository (e2e, the
// client's tests, relayctl's tests, relaybench), in the manner of
// tailscale's tstest/integration.
//
// It holds no assertions and does not import testing: a caller turns its
// errors into test failures. Wire is a raw line connection for tests that
// must send what a real controller never would (malformed lines, wrong
// tokens); everything else talks to relayd through package client.
//
// Nothing here is for production: relayd itself never imports it.
package testharness
