package marks

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"sync"

	"golang.org/x/sys/unix"
)

// The store, in the state directory (protocol 4.9, rule 6.13): root's,
// mode 0700, reached by no subject.
//
//	marks/objects/<sha256>       kept content, once per content
//	marks/m/<name>/meta.json     a mark's request, start and counts, written last
//	marks/m/<name>/index         its entries, in walk order (index.go)
//	marks/m/<name>/refs/<sha256> a hard link to each object it keeps
//
// An object whose only link is the store's own is kept by no mark and is
// removed with the last mark that kept it.

// DefaultBudget is --mark-bytes' default: the kept content of every mark
// together.
const DefaultBudget = 2 << 30

// Config says where the store lives and what no mark holds.
type Config struct {
	Dir      string // the state directory; the store is its "marks"
	Budget   int64  // --mark-bytes; 0: DefaultBudget
	Internal []string
}

// Store holds every mark. Its methods may be called from any goroutine.
type Store struct {
	dir      string
	budget   int64
	internal []string

	markMu sync.Mutex // one mark (or unmark) at a time: the budget is checked and spent under it

	mu    sync.Mutex
	names map[string]*sync.RWMutex // a mark's lock: readers are changes, writers mark, restore, unmark
	used  int64                    // bytes of objects
}

// Errors a caller tells apart: a bad request, no such mark, busy.
var (
	ErrNotFound = errors.New("no such mark")
	ErrBusy     = errors.New("busy")
)

// BadRequest is a request the store refuses, saying why.
type BadRequest struct{ Msg string }

func (e *BadRequest) Error() string { return e.Msg }

func bad(format string, args ...any) error { return &BadRequest{fmt.Sprintf(format, args...)} }

// Open opens (making it when missing) the store in cfg.Dir.
func Open(cfg Config) (*Store, error) {
	if cfg.Budget <= 0 {
		cfg.Budget = DefaultBudget
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, err
	}
	s := &Store{dir: filepath.Join(dir, "marks"), budget: cfg.Budget, names: map[string]*sync.RWMutex{}}
	for _, p := range cfg.Internal {
		if p != "" {
			if abs, err := filepath.Abs(p); err == nil {
				s.internal = append(s.internal, abs)
			}
		}
	}
	s.internal = append(s.internal, s.dir)
	old := unix.Umask(0o077)
	defer unix.Umask(old)
	for _, d := range []string{s.dir, s.path("objects"), s.path("m")} {
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, err
		}
		if err := checkPrivate(d); err != nil {
			return nil, err
		}
	}
	// A mark whose meta.json is missing was cut short: it is removed.
	names, _ := os.ReadDir(s.path("m"))
	for _, n := range names {
		if _, err := os.Lstat(s.path("m", n.Name(), "meta.json")); err != nil {
			_ = os.RemoveAll(s.path("m", n.Name()))
		}
	}
	objs, err := os.ReadDir(s.path("objects"))
	if err != nil {
		return nil, err
	}
	for _, o := range objs {
		if fi, err := o.Info(); err == nil {
			if len(o.Name()) != 64 {
				_ = os.Remove(s.path("objects", o.Name())) // a temporary file of a mark cut short
				continue
			}
			s.used += fi.Size()
		}
	}
	s.collect()
	return s, nil
}

// checkPrivate refuses a directory that is not relayd's alone.
func checkPrivate(d string) error {
	var st unix.Stat_t
	if err := unix.Lstat(d, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s is not a directory of relayd's user", d)
	}
	if st.Mode&0o077 != 0 {
		return unix.Chmod(d, 0o700)
	}
	return nil
}

// Dir is the store's directory (no mark holds it).
func (s *Store) Dir() string { return s.dir }

func (s *Store) path(parts ...string) string {
	return filepath.Join(append([]string{s.dir}, parts...)...)
}

// Internal is what no mark holds: the store and relayd's own directories.
func (s *Store) Internal() []string { return s.internal }

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$`)

// CheckName refuses a mark name that is not 1 to 64 letters, digits, '_',
// '.', '-', starting with a letter, a digit or '_'.
func CheckName(name string) error {
	if !nameRE.MatchString(name) {
		return bad(`a mark's name must be 1 to 64 letters, digits, "_", "." or "-", not starting with "." or "-"`)
	}
	return nil
}

// lock takes the mark name's lock: shared for a reader. With wait false
// a lock held elsewhere is ErrBusy.
func (s *Store) lock(name string, shared, wait bool) (func(), error) {
	s.mu.Lock()
	l := s.names[name]
	if l == nil {
		l = &sync.RWMutex{}
		s.names[name] = l
	}
	s.mu.Unlock()
	switch {
	case shared && wait:
		l.RLock()
		return l.RUnlock, nil
	case shared:
		if !l.TryRLock() {
			return nil, ErrBusy
		}
		return l.RUnlock, nil
	case wait:
		l.Lock()
		return l.Unlock, nil
	}
	if !l.TryLock() {
		return nil, ErrBusy
	}
	return l.Unlock, nil
}

// Meta is a mark's record beside its index.
type Meta struct {
	Name      string   `json:"name"`
	Paths     []string `json:"paths"`
	Exclude   []string `json:"exclude"`
	Keep      []string `json:"keep"`
	Internal  []string `json:"internal"`
	Start     int64    `json:"start"` // ns; an entry whose change time is not before it is compared by content
	Entries   int64    `json:"entries"`
	Bytes     int64    `json:"bytes"`
	KeptBytes int64    `json:"keptBytes"`
}

func (s *Store) meta(name string) (*Meta, error) {
	b, err := os.ReadFile(s.path("m", name, "meta.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	var m Meta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("the mark's record is corrupt: %w", err)
	}
	return &m, nil
}

// Unmark frees the mark name and the kept content no other mark keeps.
func (s *Store) Unmark(name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	unlock, err := s.lock(name, false, false)
	if err != nil {
		return err
	}
	defer unlock()
	s.markMu.Lock()
	defer s.markMu.Unlock()
	if _, err := s.meta(name); err != nil {
		return err
	}
	// meta.json first: a mark without it is gone, whatever is left.
	if err := os.Remove(s.path("m", name, "meta.json")); err != nil {
		return err
	}
	err = os.RemoveAll(s.path("m", name))
	s.collect()
	return err
}

// collect removes the objects no mark links.
func (s *Store) collect() {
	fd, err := unix.Open(s.path("objects"), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	names, err := readNames(fd, make([]byte, direntsBuf))
	if err != nil {
		return
	}
	for _, name := range names {
		var st unix.Stat_t
		if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Nlink == 1 && st.Mode&unix.S_IFMT == unix.S_IFREG {
			if unix.Unlinkat(fd, name, 0) == nil {
				s.mu.Lock()
				s.used -= st.Size
				s.mu.Unlock()
			}
		}
	}
}

// Names lists the marks, sorted.
func (s *Store) Names() []string {
	ents, _ := os.ReadDir(s.path("m"))
	var out []string
	for _, e := range ents {
		if _, err := os.Lstat(s.path("m", e.Name(), "meta.json")); err == nil {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out
}

func randomName(prefix string) string {
	var r [12]byte
	_, _ = rand.Read(r[:])
	return prefix + hex.EncodeToString(r[:])
}

// excluded reports whether p is one of roots or inside one.
func excluded(p string, roots []string) bool {
	for _, r := range roots {
		if Under(p, r) {
			return true
		}
	}
	return false
}
