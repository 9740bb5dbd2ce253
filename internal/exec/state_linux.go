package exec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// State is relayd's state directory (--state-dir, protocol rule 6.10): the
// process-group scopes of running executions are recorded there, so that a
// relayd started after this one was killed can settle what it left running.
// A cgroup scope needs no record: its leaf outlives relayd, and a successor
// finds it (CgroupLeftovers).
//
// Each execution's shim settles its own subtree when relayd dies, so a
// record adds something only when the shim died too (both were SIGKILLed,
// or the OOM killer took both): the successor then settles the recorded
// subject's session and every descendant of its recorded members, as far as
// /proc shows them (a process that left the session and whose ancestors
// are gone is beyond it).
//
// Each relayd writes one file, named after its pid and start time so that
// relayds sharing a directory never collide:
//
//	DIR/relayd-PID-START.json    the record: relayd's identity, and per running scope
//	                             its name, session and members (pid and start time)
//	DIR/.relayd-PID-START.json.tmp  the next record, renamed over it when complete
//
// A scope enters the record at the first recording interval it lives
// through (a short execution never costs a write). It leaves the record at
// once when it is left alone (rule 6.1: the survivors of an exited subject
// are no successor's to settle), and at the next interval when it is
// closed: then nothing of it runs (or what runs is its retiring shim's to
// settle), and a successor takes a recorded pid only with its recorded
// start time, so the record names nothing it would signal. An execution's
// end then waits for no write. Its record
// names the subject by pid and start time, both from its shim, which read
// them before the subject could have been reaped: a pid reused since never
// matches. When no scope is recorded the file is removed.
type State struct {
	dir   string
	self  relaydID
	boot  string // /proc/sys/kernel/random/boot_id: start times count from this boot
	pidNS string // /proc/self/ns/pid: pids mean something in this namespace only

	// mu guards what follows; it is never held across a write, so that
	// an execution that starts or ends never waits for another's I/O.
	mu       sync.Mutex
	running  map[*pgScope][][2]uint64 // the scopes to record, and their members as their shim last listed them
	last     []byte                   // the record as last written; nil when there is no file
	recorded map[*pgScope]bool        // the scopes the file may hold: in it, or in the write under way
	failing  bool                     // the last write failed; OnError has been told
	asked    uint64                   // saves begun
	written  uint64                   // the latest save a finished write covered
	wmu      sync.Mutex               // one write at a time
	writes   atomic.Int64             // records written or removed, for tests
	writing  func()                   // a test's seam: called before each write
	// OnError is told when a write fails, once per run of failures.
	OnError func(error)
}

// relaydID names one relayd process: its pid and start time.
type relaydID struct {
	pid   int
	start uint64
}

func (id relaydID) fileName() string {
	return "relayd-" + strconv.Itoa(id.pid) + "-" + strconv.FormatUint(id.start, 10) + ".json"
}

// Bounds of a record (rule 6.11): a record's size never grows with a
// subject's process count beyond these.
const (
	// maxRecordedMembers is the most members recorded per scope: the
	// oldest ones. Younger members are found by a successor as descendants
	// of recorded ones or as members of the subject's session.
	maxRecordedMembers = 1000
	// maxRecordedTotal bounds the members of all scopes of one record
	// (about 20 bytes each).
	maxRecordedTotal = 10000
	// maxRecordBytes bounds what a successor reads of one record.
	maxRecordBytes = 4 << 20
	recordVersion  = 1
)

// record is the file format.
type record struct {
	Version      int           `json:"version"`
	PID          int           `json:"pid"`   // the recording relayd
	Start        uint64        `json:"start"` // its start time, clock ticks since boot
	BootID       string        `json:"bootId"`
	PIDNamespace string        `json:"pidNamespace"`
	Scopes       []scopeRecord `json:"scopes"`
}

type scopeRecord struct {
	Name         string      `json:"name"`         // the execution id
	Session      int         `json:"session"`      // the subject's pid, which is its session id
	SubjectStart uint64      `json:"subjectStart"` // the subject's start time; 0 when not seen alive
	Began        uint64      `json:"began"`        // a lower bound of the subject's start time
	Members      [][2]uint64 `json:"members"`      // pid and start time, oldest first
	Omitted      int         `json:"omitted,omitempty"`
}

// OpenState checks that dir can hold relayd's records: an existing
// directory owned by relayd's user, writable by it and by no other user, or
// a missing one whose parent relayd can write (it is created, mode 0700,
// with the first record). Nothing is written yet.
func OpenState(dir string) (*State, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	st := &State{dir: abs, recorded: make(map[*pgScope]bool), running: make(map[*pgScope][][2]uint64)}
	if err := checkStateDir(abs); err != nil {
		return nil, err
	}
	self, err := readStat("/proc", os.Getpid(), make([]byte, 1024))
	if err != nil {
		return nil, fmt.Errorf("cannot read relayd's own start time: %w", err)
	}
	st.self = relaydID{pid: self.pid, start: self.start}
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return nil, fmt.Errorf("cannot read the boot id: %w", err)
	}
	st.boot = strings.TrimSpace(string(b))
	if st.pidNS, err = os.Readlink("/proc/self/ns/pid"); err != nil {
		return nil, fmt.Errorf("cannot read relayd's PID namespace: %w", err)
	}
	return st, nil
}

func checkStateDir(dir string) error {
	fi, err := os.Stat(dir)
	if errors.Is(err, os.ErrNotExist) {
		parent := filepath.Dir(dir)
		if pfi, perr := os.Stat(parent); perr != nil || !pfi.IsDir() {
			return fmt.Errorf("%s does not exist, nor does its parent directory", dir)
		}
		if unix.Access(parent, unix.W_OK|unix.X_OK) != nil {
			return fmt.Errorf("%s does not exist, and relayd cannot create it in %s", dir, parent)
		}
		return nil
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	sys, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int(sys.Uid) != os.Geteuid() {
		return fmt.Errorf("%s is not owned by relayd's user (uid %d)", dir, os.Geteuid())
	}
	if fi.Mode().Perm()&0o022 != 0 {
		// Another user could plant a record naming processes for relayd to kill.
		return fmt.Errorf("%s can be written by other users (mode %04o)", dir, fi.Mode().Perm())
	}
	if unix.Access(dir, unix.W_OK|unix.X_OK) != nil {
		return fmt.Errorf("relayd cannot write to %s", dir)
	}
	return nil
}

// Dir is the state directory.
func (st *State) Dir() string { return st.dir }

// Path is the file of this relayd's record.
func (st *State) Path() string { return filepath.Join(st.dir, st.self.fileName()) }

// Record makes m record its running scopes in st: at most once per every,
// and only when something changed, until ctx ends.
func (m *ProcessGroups) Record(ctx context.Context, st *State, every time.Duration) {
	m.state = st
	go func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			// The members are asked of each shim (a walk of its subtree)
			// every refreshEvery ticks only: a record matters only when a
			// shim died with relayd, and the walks of hundreds of running
			// executions every tick would be a cost for nothing.
			if n%refreshEvery == 0 {
				st.refresh()
			}
			st.save()
		}
	}()
}

// refreshEvery is how many recording intervals pass between two asks for
// the running scopes' members.
const refreshEvery = 10

func (st *State) add(s *pgScope) {
	st.mu.Lock()
	st.running[s] = nil
	st.mu.Unlock()
}

// refresh asks each running scope's shim for its members (one request
// each, answered from its own subtree), so that a successor can find the
// processes that left the subject's session too, as of the last record.
func (st *State) refresh() {
	st.mu.Lock()
	scopes := make([]*pgScope, 0, len(st.running))
	for s := range st.running {
		scopes = append(scopes, s)
	}
	st.mu.Unlock()
	for _, s := range scopes {
		if s.run == nil {
			continue
		}
		ms, err := s.run.members()
		if err != nil {
			continue // the last list stays
		}
		slices.SortFunc(ms, func(a, b Member) int { return cmpU(a.Start, b.Start) })
		ms = ms[:min(len(ms), maxRecordedMembers)]
		rec := make([][2]uint64, len(ms))
		for i, m := range ms {
			rec[i] = [2]uint64{uint64(m.PID), m.Start}
		}
		st.mu.Lock()
		if _, ok := st.running[s]; ok {
			st.running[s] = rec
		}
		st.mu.Unlock()
	}
}

// remove takes a scope out of the running ones and, if the record may hold
// it, returns once a record without it is written (rule 6.1: the survivors
// of a scope left alone are no successor's to settle).
func (st *State) remove(s *pgScope) {
	st.mu.Lock()
	delete(st.running, s)
	held := st.recorded[s]
	st.mu.Unlock()
	if held {
		st.save()
	}
}

// forget takes a closed scope out of the running ones; the next interval's
// write drops it from the record.
func (st *State) forget(s *pgScope) {
	st.mu.Lock()
	delete(st.running, s)
	st.mu.Unlock()
}

// save writes the record of the running scopes if it changed, and returns
// once a write that began after the call has finished. Saves that come
// while a write is under way share the next one: scopes that end at once
// cost a write or two, not one each.
func (st *State) save() {
	st.mu.Lock()
	st.asked++
	gen := st.asked
	st.mu.Unlock()
	st.wmu.Lock()
	defer st.wmu.Unlock()
	st.mu.Lock()
	if st.written >= gen {
		st.mu.Unlock()
		return
	}
	upTo := st.asked
	rec, scopes := st.snapshot()
	last := st.last
	for _, s := range scopes {
		st.recorded[s] = true // before the write: a removal from now on waits for the next one
	}
	st.mu.Unlock()
	var b []byte
	var err error
	if len(rec.Scopes) > 0 {
		if b, err = json.Marshal(rec); err == nil {
			b = append(b, '\n')
		}
	}
	if err == nil && !bytes.Equal(b, last) {
		if st.writing != nil {
			st.writing()
		}
		err = st.write(b)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.written = upTo
	if err != nil {
		st.fail(err) // the file keeps what it had: recorded stays wide, last stays, the next tick tries again
		return
	}
	st.failing = false
	st.last = b
	clear(st.recorded)
	for _, s := range scopes {
		st.recorded[s] = true
	}
}

func (st *State) fail(err error) {
	if !st.failing && st.OnError != nil {
		st.OnError(err)
	}
	st.failing = true
}

// snapshot records each running scope by its subject (its pid, which is
// its session, and its start time) and the members its shim last listed.
func (st *State) snapshot() (record, []*pgScope) {
	rec := record{Version: recordVersion, PID: st.self.pid, Start: st.self.start, BootID: st.boot, PIDNamespace: st.pidNS}
	var scopes []*pgScope
	total := 0
	for s, members := range st.running {
		if s.run == nil || s.run.pid <= 0 || s.run.start == 0 {
			continue
		}
		sr := scopeRecord{Name: s.name, Session: s.run.pid, SubjectStart: s.run.start,
			Began: s.run.start, Members: [][2]uint64{{uint64(s.run.pid), s.run.start}}}
		for _, m := range members {
			if m[0] != uint64(s.run.pid) && total < maxRecordedTotal {
				sr.Members = append(sr.Members, m)
				total++
			}
		}
		rec.Scopes = append(rec.Scopes, sr)
		scopes = append(scopes, s)
		if len(rec.Scopes) >= maxRecordedTotal {
			break
		}
	}
	slices.SortFunc(rec.Scopes, func(a, b scopeRecord) int { return strings.Compare(a.Name, b.Name) })
	return rec, scopes
}

func cmpU(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// write replaces the record with b (removes it when b is nil): a temporary
// file renamed over it, so that a reader sees the old record or the new.
func (st *State) write(b []byte) error {
	st.writes.Add(1)
	path := st.Path()
	if b == nil {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("exec.State: %w", err)
		}
		return nil
	}
	if err := os.Mkdir(st.dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("exec.State: %w", err)
	}
	tmp := filepath.Join(st.dir, "."+st.self.fileName()+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("exec.State: %w", err)
	}
	_, werr := f.Write(b)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("exec.State: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("exec.State: %w", err)
	}
	return nil
}
