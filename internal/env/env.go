// Package env describes the target environment a subject runs in: the
// workspace, the subject's environment variables (relayd's own, less its
// configuration, plus what the controller sends), program lookup against that
// environment, and what the host offers (PID 1, child subreaper).
//
// It does not start processes or track them; that is internal/exec.
package env

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ConfigPrefix marks relayd's own configuration variables, which a subject never sees.
const ConfigPrefix = "RELAYD_"

// ResultTokenVar carries the result token to a subject in carrier mode.
const ResultTokenVar = "MAKA_EVAL_RESULT_TOKEN"

// DefaultPath is the search path used when the subject's environment has no PATH,
// the same one execvp falls back to.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

var (
	// ErrNotFound means a program could not be found.
	ErrNotFound = errors.New("env: program not found")
	// ErrNotExecutable means a program exists but cannot be executed.
	ErrNotExecutable = errors.New("env: program not executable")
	// ErrBadDir means a working directory does not exist or is not a directory.
	ErrBadDir = errors.New("env: not a directory")
)

// Workspace resolves dir ("" means the current directory) to an absolute path
// of an existing directory.
func Workspace(dir string) (string, error) {
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("env.Workspace: %w", err)
		}
		dir = wd
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("env.Workspace %q: %w", dir, err)
	}
	if err := CheckDir(abs); err != nil {
		return "", err
	}
	return abs, nil
}

// CheckDir reports whether dir is an existing directory. Its error reads
// "DIR: no such directory", "DIR: not a directory" or "DIR: " and the
// system's reason (permission denied), for a caller to put after a flag's
// name; it wraps ErrBadDir and the cause (fs.ErrNotExist when nothing is
// there).
func CheckDir(dir string) error {
	info, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &dirError{dir: dir, problem: "no such directory", cause: err}
	case err != nil:
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return &dirError{dir: dir, problem: pe.Err.Error(), cause: pe.Err}
		}
		return &dirError{dir: dir, problem: err.Error(), cause: err}
	case !info.IsDir():
		return &dirError{dir: dir, problem: "not a directory", cause: syscall.ENOTDIR}
	}
	return nil
}

// dirError is CheckDir's error: the path and what is wrong with it, without
// ErrBadDir's "env:" prefix, which no person needs to read.
type dirError struct {
	dir     string
	problem string
	cause   error
}

func (e *dirError) Error() string   { return e.dir + ": " + e.problem }
func (e *dirError) Unwrap() []error { return []error{ErrBadDir, e.cause} }

// Cwd resolves an execution's cwd against the workspace: "" is the workspace,
// a relative path is taken from it.
func Cwd(workspace, cwd string) string {
	switch {
	case cwd == "":
		return workspace
	case filepath.IsAbs(cwd):
		return filepath.Clean(cwd)
	default:
		return filepath.Join(workspace, cwd)
	}
}

// Base is relayd's own environment without its configuration variables: the
// environment every subject starts from. Compute it once at startup.
func Base(environ []string) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		if strings.HasPrefix(kv, ConfigPrefix) {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// Subject builds a subject's environment: base, then environment, then
// credentials, then the result token when there is one. Later names replace
// earlier ones, so a controller's variable wins over relayd's own.
func Subject(base []string, environment, credentials map[string]string, resultToken string) []string {
	extra := len(environment) + len(credentials)
	if resultToken != "" {
		extra++
	}
	if extra == 0 {
		return base
	}
	override := make(map[string]bool, extra)
	for k := range environment {
		override[k] = true
	}
	for k := range credentials {
		override[k] = true
	}
	if resultToken != "" {
		override[ResultTokenVar] = true
	}
	out := make([]string, 0, len(base)+extra)
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		if override[name] {
			continue
		}
		out = append(out, kv)
	}
	out = appendSorted(out, environment)
	out = appendSorted(out, credentials)
	if resultToken != "" {
		out = append(out, ResultTokenVar+"="+resultToken)
	}
	return out
}

func appendSorted(out []string, vars map[string]string) []string {
	names := make([]string, 0, len(vars))
	for k := range vars {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		out = append(out, k+"="+vars[k])
	}
	return out
}

// Lookup returns the value of name in an environment list.
func Lookup(environ []string, name string) (string, bool) {
	for i := len(environ) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(environ[i], "="); ok && k == name {
			return v, true
		}
	}
	return "", false
}

// LookPath finds command the way execvp would for a subject running with
// cred (nil: relayd's own rights): a name with a slash is taken as a path
// (relative to dir), any other name is searched in the PATH of environ.
// Every look is made as the subject (lookAs: its uid, gid and groups, no
// capabilities), so a directory of PATH the subject cannot search is
// skipped as execvp skips it, and the program found is one the subject
// can execute (protocol 4.2). Errors wrap ErrNotFound or ErrNotExecutable.
func LookPath(command string, environ []string, dir string, cred *syscall.Credential) (string, error) {
	var path string
	var err error
	if serr := lookAs(cred, func() {
		path, err = lookPath(command, environ, dir, cred)
	}); serr != nil {
		return "", fmt.Errorf("%w: %s (its user's rights could not be taken: %v)", ErrNotExecutable, command, serr)
	}
	return path, err
}

func lookPath(command string, environ []string, dir string, cred *syscall.Credential) (string, error) {
	if strings.Contains(command, "/") {
		path := command
		if !filepath.IsAbs(path) {
			path = filepath.Join(dir, path)
		}
		if err := executable(path, cred); err != nil {
			return "", fmt.Errorf("%w: %s", err, command)
		}
		return command, nil
	}
	pathVar, ok := Lookup(environ, "PATH")
	if !ok {
		pathVar = DefaultPath
	}
	denied := false
	for _, d := range filepath.SplitList(pathVar) {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		path := filepath.Join(d, command)
		switch err := executable(path, cred); {
		case err == nil:
			return path, nil
		case errors.Is(err, ErrNotExecutable):
			denied = true
		}
	}
	if denied {
		return "", fmt.Errorf("%w: %s (found in PATH, but not executable)", ErrNotExecutable, command)
	}
	return "", fmt.Errorf("%w: %s (not in PATH)", ErrNotFound, command)
}

// executable reports whether the file at path is one a process with the
// calling thread's file-system rights could execute: the stat is made
// with them (so a directory on the way it cannot search answers EACCES),
// and the permission asked with faccessat2(AT_EACCESS), which the kernel
// decides with the thread's fsuid, fsgid and groups. Where the kernel or a
// seccomp filter refuses faccessat2 (before Linux 5.8, old Docker
// profiles), the mode bits are read as the kernel would for cred.
func executable(path string, cred *syscall.Credential) error {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return ErrNotFound
		}
		return ErrNotExecutable
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return ErrNotExecutable
	}
	err := unix.Faccessat2(unix.AT_FDCWD, path, unix.X_OK, unix.AT_EACCESS)
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		switch {
		case cred == nil:
			err = unix.Access(path, unix.X_OK)
		case cred.Uid == 0:
			if st.Mode&0o111 == 0 {
				err = unix.EACCES
			}
		default:
			if ok, _ := permits(path, &st, cred, 1); !ok {
				err = unix.EACCES
			}
		}
	}
	if err != nil {
		return ErrNotExecutable
	}
	return nil
}
