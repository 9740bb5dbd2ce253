package session

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/relayd/relayd/internal/env"
	"github.com/relayd/relayd/internal/exec"
)

// Artifact layouts (--artifacts-layout, protocol section 9).
const (
	// LayoutRelayd writes DIR/x-N.stdout.txt and DIR/x-N.stderr.txt, new
	// files per execution (openArtifact).
	LayoutRelayd = "relayd"
	// LayoutMaka writes the names Maka's relay writes and its controller
	// inventories, overwritten by every execution.
	LayoutMaka = "maka"
)

// The maka layout's files, as Maka's relay names them
// (packages/eval/harbor/relay_agent.py, SUBJECT_STDOUT_PATH and
// SUBJECT_STDERR_PATH, in /logs/artifacts).
const (
	MakaStdoutFile = "maka-subject.stdout.txt"
	MakaStderrFile = "maka-subject.stderr.txt"
)

// MakeMakaDir makes dir as Maka's relay does before it writes its
// artifacts, `mkdir -p DIR && chmod 700 DIR`: parents as needed, and mode
// 0700 whatever the directory had.
func MakeMakaDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.Chmod(dir, 0o700)
}

// makaFiles is the maka layout's one pair of files. Every execution
// truncates them when it begins and owns them from then on: a writer of an
// earlier execution still running (concurrent executions, or survivors of
// one) stops copying into them, so that they hold the output of the last
// execution to begin and nothing else (Maka's relay runs one subject at a
// time, so it never has to choose).
type makaFiles struct {
	mu    sync.Mutex
	owner string // the execution id whose output the files hold
}

// beforeStart is what an execution does before anything else: with the
// maka layout, take the artifact files over (truncated, so that an
// execution that does not start leaves no earlier one's output under these
// names); with --require-netns, check that the subject would still run in
// that network namespace. ok false: nothing may run, and detail says why
// (exit 111, execution-scope-unavailable).
func (s *Server) beforeStart(ex *execution) (detail string, ok bool) {
	if s.cfg.ArtifactsLayout == LayoutMaka {
		s.maka.mu.Lock()
		s.maka.owner = ex.id
		for _, name := range []string{MakaStdoutFile, MakaStderrFile} {
			f, err := s.openMaka(name)
			if err != nil {
				ex.log.Warn().Err(err).Str("artifact", name).Msg("cannot truncate artifact")
				continue
			}
			f.Close()
		}
		s.maka.mu.Unlock()
	}
	if s.cfg.RequireNetns.String() != "" {
		if err := env.RecheckNetns(s.cfg.RequireNetns); err != nil {
			ex.log.Error().Err(err).Msg("--require-netns no longer holds; nothing runs")
			return "the execution scope could not be set up: --require-netns " + s.cfg.RequireNetns.String() + ": " + err.Error(), false
		}
	}
	return "", true
}

// openMaka makes the directory as Maka's relay does before each write, and
// opens one of its files truncated, as its upload of a whole file replaces
// what was there. Called with s.maka.mu held. A subject may be able to
// write the directory (rule 6.13): it is reached without following a link
// anybody but root could have made, and a file that is not a regular one
// of one link (a FIFO, a link) is left alone, not opened, followed or
// truncated.
func (s *Server) openMaka(name string) (*os.File, error) {
	dir, err := filepath.Abs(s.cfg.ArtifactsDir)
	if err != nil {
		return nil, fmt.Errorf("--artifacts-dir %s: %w", s.cfg.ArtifactsDir, err)
	}
	d, err := env.OpenDir(dir, true, 0o700)
	if err != nil {
		return nil, fmt.Errorf("--artifacts-dir %s: %w", s.cfg.ArtifactsDir, err)
	}
	defer d.Close()
	if err := d.Chmod(0o700); err != nil {
		return nil, fmt.Errorf("--artifacts-dir %s: %w", s.cfg.ArtifactsDir, err)
	}
	return d.OpenWrite(name, 0o600, true)
}

// createIn creates the new file name in the directory dir, mode 0600,
// reaching dir as openMaka does (rule 6.13): a subject that can rename
// dir and put a link in its place has nothing made elsewhere.
func createIn(dir, name string) (*os.File, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	d, err := env.OpenDir(abs, false, 0)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.Create(name, 0o600)
}

// openArtifacts returns the copies of an execution's stdout and stderr
// (nil: none), in the configured layout.
func (s *Server) openArtifacts(ex *execution) (stdout, stderr io.WriteCloser) {
	switch {
	case s.cfg.ArtifactsDir == "":
		return nil, nil
	case s.cfg.ArtifactsLayout != LayoutMaka:
		return s.openArtifact(ex, "stdout"), s.openArtifact(ex, "stderr")
	}
	// Without captureStdout, Maka's relay sends the subject's stdout to
	// /dev/null, and its stdout file is empty: so is this one.
	if ex.req.CaptureStdout {
		stdout = s.openMakaArtifact(ex, MakaStdoutFile, "stdout")
	}
	return stdout, s.openMakaArtifact(ex, MakaStderrFile, "stderr")
}

func (s *Server) openMakaArtifact(ex *execution, name, stream string) io.WriteCloser {
	s.maka.mu.Lock()
	defer s.maka.mu.Unlock()
	if s.maka.owner != ex.id {
		return nil // a later execution began meanwhile: the files are its own
	}
	f, err := s.openMaka(name)
	if err != nil {
		ex.log.Warn().Err(err).Str("stream", stream).Msg("cannot write artifact; output is drained without a copy")
		return nil
	}
	return &makaArtifact{a: artifact{f: f, left: s.cfg.ArtifactLimit, log: ex.log.With().Str("stream", stream).Logger()},
		id: ex.id, files: &s.maka}
}

// makaArtifact is one stream's copy into a maka layout file, for as long as
// its execution owns the files; later writes are taken and dropped, as
// past --max-artifact-bytes.
type makaArtifact struct {
	a     artifact
	id    string
	files *makaFiles
}

func (m *makaArtifact) Write(p []byte) (int, error) {
	m.files.mu.Lock()
	defer m.files.mu.Unlock()
	if m.files.owner != m.id {
		return len(p), nil
	}
	return m.a.Write(p)
}

func (m *makaArtifact) Close() error { return m.a.Close() }

// asHarborGives routes an execution's stderr in the maka layout as
// Harbor's exec gives the subject's output to Maka's relay: merged into
// stdout (docs/protocol.md, section 9). With captureStdout, descriptors 1
// and 2 are one pipe, so the carrier, the reply's stdout and the stdout
// file hold both streams in the order written (the kernel's), and the
// stderr file stays empty; without it stdout is dropped, as the relay
// sends it to /dev/null, and stderr is what the stdout file holds. A
// session's shell and a program on a pty keep their own streams.
func (s *Server) asHarborGives(ex *execution, spec *exec.Spec) {
	if s.cfg.ArtifactsLayout != LayoutMaka || ex.shell != nil || ex.req.Pty != nil {
		return
	}
	closeAll(spec.StderrCopy)
	spec.StderrCopy = nil
	if ex.req.CaptureStdout {
		spec.MergeStderr, spec.Stderr = true, nil
		return
	}
	if s.cfg.ArtifactsDir != "" {
		spec.StderrCopy = s.openMakaArtifact(ex, MakaStdoutFile, "stderr")
	}
}
