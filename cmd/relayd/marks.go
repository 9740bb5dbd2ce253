package main

import (
	"errors"
	"os"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/relayd/relayd/internal/marks"
)

// openMarks opens the store of marks (protocol 4.9) in the state
// directory, making that directory (mode 0700) when it is missing. It
// holds no mark of relayd's own directories, socket or token file. When
// the state directory cannot be used there is no store: why says so, and
// ready does not list "marks".
func openMarks(o options, stateErr error, log zerolog.Logger) (*marks.Store, string) {
	if stateErr != nil {
		return nil, "--state-dir cannot be used: " + stateErr.Error()
	}
	old := unix.Umask(0o077)
	err := os.Mkdir(o.stateDir, 0o700)
	unix.Umask(old)
	if err != nil && !errors.Is(err, os.ErrExist) {
		log.Warn().Err(err).Str("stateDir", o.stateDir).Msg("marks are not served: the state directory cannot be made")
		return nil, "the state directory cannot be made: " + err.Error()
	}
	st, err := marks.Open(marks.Config{Dir: o.stateDir, Budget: int64(o.markBytes),
		Internal: []string{o.stateDir, o.artifactsDir, o.socket, o.tokenFile}})
	if err != nil {
		log.Warn().Err(err).Str("stateDir", o.stateDir).Msg("marks are not served: the store of marks cannot be opened")
		return nil, "the store of marks in --state-dir cannot be opened: " + err.Error()
	}
	return st, ""
}
