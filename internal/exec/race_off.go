//go:build !race

package exec

// raceEnv is a seam of binaries built with the race detector (race_on.go):
// any other shim gets nothing of it.
func raceEnv() []string { return nil }
