// Package e2e holds black-box tests of the relayd binary: each test builds
// nothing itself (TestMain builds the binary once), starts a real relayd on
// a loopback port, and drives it over TCP with real subjects, signals and
// process trees. Tests only ever signal processes they created.
package e2e
