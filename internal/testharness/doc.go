// Package testharness starts relayd for tests and benchmarks and reads what
// they need of /proc. It is the one launcher of the repository (e2e, the
// client's tests, relayctl's tests, relaybench), in the manner of
// tailscale's tstest/integration.
//
// It holds no assertions and does not import testing: a caller turns its
// errors into test failures. Wire is a raw line connection (maps and raw
// bytes) for tests that must send what a real controller never would:
// malformed lines, wrong tokens. How tests talk to relayd otherwise
// differs by package: the client's tests and relaybench go through
// package client, relayctl's tests through the relayctl binary, and
// internal/session's tests through Wire. e2e does not import package
// client: its tests drive relayd through their own raw-map client
// (e2e/harness_test.go, on a Wire), and a few dial raw connections by
// hand; moving their well-formed traffic to package client is still to
// do.
//
// Nothing here is for production: relayd itself never imports it.
package testharness
