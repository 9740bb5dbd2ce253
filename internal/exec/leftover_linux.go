package exec

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Leftover is a scope that a relayd which no longer runs left running
// (protocol rule 6.10): a process-group scope recorded in a state
// directory, or a populated cgroup leaf. It is a scope to settle: Members
// and Signal, as teardown.Settle wants them. Finish removes what named it.
type Leftover struct {
	Name      string // the execution id; for a cgroup leaf, the leaf's name
	Mechanism string
	Relayd    int    // the pid of the relayd that left it
	Where     string // the record file, or the leaf's directory
	scope     interface {
		Members() ([]Member, error)
		Signal(sig syscall.Signal) error
	}
	finish func(settled bool) error
}

// Members lists the live processes of the leftover scope from one complete look.
func (l *Leftover) Members() ([]Member, error) { return l.scope.Members() }

// Signal sends sig to every live member, checked as a live scope's are.
func (l *Leftover) Signal(sig syscall.Signal) error { return l.scope.Signal(sig) }

// Finish says how settling the leftover ended. Once it is settled, what
// named it goes: its part of the record, or its leaf. An unsettled one
// stays for the next relayd to try again.
func (l *Leftover) Finish(settled bool) error { return l.finish(settled) }

// Leftovers reads the records in the state directory that relayds which no
// longer run left, and returns their scopes. A record whose relayd still
// runs (a process with its pid and start time) is another relayd's and is
// not touched. notes say, a line each, what was skipped or removed, and why.
func (st *State) Leftovers() (found []*Leftover, notes []string) {
	entries, err := os.ReadDir(st.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, []string{fmt.Sprintf("cannot list %s: %v", st.dir, err)}
	}
	for _, e := range entries {
		name := e.Name()
		if tmp, ok := strings.CutPrefix(name, "."); ok {
			// A write cut short by its relayd's death.
			if id, ok := parseRecordName(strings.TrimSuffix(tmp, ".tmp")); ok && strings.HasSuffix(tmp, ".tmp") && !relaydRuns(id) {
				os.Remove(filepath.Join(st.dir, name))
			}
			continue
		}
		id, ok := parseRecordName(name)
		if !ok || id == st.self {
			continue
		}
		path := filepath.Join(st.dir, name)
		if relaydRuns(id) {
			continue // another relayd with this state directory
		}
		rec, err := readRecord(path)
		if err != nil {
			notes = append(notes, fmt.Sprintf("%s: %v; left in place", path, err))
			continue
		}
		switch {
		case rec.PID != id.pid || rec.Start != id.start:
			notes = append(notes, fmt.Sprintf("%s: names relayd %d (start %d), not the one of its file name; left in place", path, rec.PID, rec.Start))
			continue
		case rec.BootID != st.boot:
			// Start times count from another boot: nothing it names runs now.
			os.Remove(path)
			notes = append(notes, fmt.Sprintf("%s: recorded before the last boot; removed", path))
			continue
		case rec.PIDNamespace != st.pidNS:
			notes = append(notes, fmt.Sprintf("%s: recorded in another PID namespace (%s), whose pids mean nothing here; left in place", path, rec.PIDNamespace))
			continue
		}
		found = append(found, st.leftoversOf(path, rec)...)
	}
	return found, notes
}

// leftoversOf turns one record into its scopes. The record is removed once
// every one of them is settled.
func (st *State) leftoversOf(path string, rec record) []*Leftover {
	if len(rec.Scopes) == 0 {
		os.Remove(path)
		return nil
	}
	var mu sync.Mutex
	pending, unsettled := len(rec.Scopes), false
	finish := func(settled bool) error {
		mu.Lock()
		defer mu.Unlock()
		pending--
		unsettled = unsettled || !settled
		if pending > 0 || unsettled {
			return nil
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("exec.Leftover: %w", err)
		}
		return nil
	}
	out := make([]*Leftover, 0, len(rec.Scopes))
	for _, sr := range rec.Scopes {
		rs := &recordedScope{procRoot: "/proc", self: st.self.pid, subject: sr.SubjectStart,
			s: lineage{sid: sr.Session, start: sr.Began, known: make(map[int]uint64, len(sr.Members))}}
		for _, m := range sr.Members {
			if m[0] > 1 && m[0] < 1<<31 && m[1] != 0 {
				rs.s.known[int(m[0])] = m[1]
			}
		}
		out = append(out, &Leftover{Name: sr.Name, Mechanism: ProcessGroup, Relayd: rec.PID, Where: path,
			scope: rs, finish: finish})
	}
	return out
}

// recordedScope is a process-group scope as its dead relayd recorded it,
// followed by lineage.update: the recorded
// members that still run with their recorded start time, the processes of
// the subject's session, and every descendant of a member.
type recordedScope struct {
	procRoot string
	self     int
	subject  uint64     // the subject's recorded start time; 0 when not known
	mu       sync.Mutex // a settlement looks and signals from two goroutines
	looks    uint64     // looks so far, for lineage.sids
	s        lineage
}

// lineage is what a successor knows of a recorded scope: the processes it
// counted as members (pid and start time), the sessions they are in, and a
// lower bound of the scope's start.
type lineage struct {
	sid   int
	start uint64
	known map[int]uint64 // members: pid and start time
	sids  map[int]uint64 // sessions of members, with the look that last saw one
}

// sidGrace is how many looks a session is remembered after the last one
// that saw a member in it.
const sidGrace = 1

// update recomputes the members from one process table of look number
// look: the members it knew that are still there, the processes of the
// sessions its members made that began after it, and their descendants.
func (s *lineage) update(table map[int]procEntry, children map[int][]int, look uint64) {
	members := make(map[int]uint64, len(s.known))
	var queue []int
	add := func(e procEntry) {
		if e.dead() {
			return
		}
		if _, ok := members[e.pid]; ok {
			return
		}
		members[e.pid] = e.start
		queue = append(queue, e.pid)
	}
	for pid, start := range s.known {
		if e, ok := table[pid]; ok && (start == 0 || e.start == start) {
			add(e)
		}
	}
	if len(s.sids) > 0 {
		for _, e := range table {
			if _, ok := s.sids[e.sid]; ok && e.start >= s.start {
				add(e)
			}
		}
	}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			if e := table[c]; e.start >= members[pid] {
				add(e)
			}
		}
	}
	s.known = members
	if s.sids == nil {
		s.sids = make(map[int]uint64, 1)
	}
	for pid := range members {
		s.sids[table[pid].sid] = look
	}
	for sid, last := range s.sids {
		if last+sidGrace < look {
			delete(s.sids, sid)
		}
	}
}

func (r *recordedScope) Members() ([]Member, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	table, err := procTable(r.procRoot)
	if err != nil {
		return nil, err
	}
	// Neither this relayd nor init is ever a member.
	delete(table, r.self)
	delete(table, 1)
	if sid := r.s.sid; sid > 0 {
		// While any process is in session S, the kernel does not hand out
		// pid S again; so a live process with pid S that is not the subject
		// means the subject's session is gone, and S names a new one.
		if e, ok := table[sid]; ok && !e.dead() {
			subject := e.sid == sid && (e.start == r.subject || r.subject == 0 && e.start >= r.s.start)
			if !subject {
				r.s.sid = 0
				delete(r.s.sids, sid)
			}
		}
	}
	if r.s.sid > 0 && r.s.sids == nil {
		r.s.sids = map[int]uint64{r.s.sid: r.looks} // update follows the sessions of the members from here
	}
	children := make(map[int][]int, len(table))
	for pid, e := range table {
		children[e.ppid] = append(children[e.ppid], pid)
	}
	r.looks++
	r.s.update(table, children, r.looks)
	out := make([]Member, 0, len(r.s.known))
	for pid, start := range r.s.known {
		out = append(out, Member{PID: pid, Start: start})
	}
	return out, nil
}

// Signal signals each member a fresh look finds, through a pidfd after
// checking its start time: a pid reused since is never signalled.
func (r *recordedScope) Signal(sig syscall.Signal) error {
	members, err := r.Members()
	if err != nil {
		return err
	}
	var first error
	for _, m := range members {
		if err := signalMember(r.procRoot, m, sig); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// parseRecordName reads relayd-PID-START.json.
func parseRecordName(name string) (relaydID, bool) {
	rest, ok := strings.CutPrefix(name, "relayd-")
	if !ok {
		return relaydID{}, false
	}
	rest, ok = strings.CutSuffix(rest, ".json")
	if !ok {
		return relaydID{}, false
	}
	pidText, startText, ok := strings.Cut(rest, "-")
	if !ok {
		return relaydID{}, false
	}
	pid, err1 := strconv.Atoi(pidText)
	start, err2 := strconv.ParseUint(startText, 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 {
		return relaydID{}, false
	}
	return relaydID{pid: pid, start: start}, true
}

// relaydRuns reports whether the relayd id still runs. Only a process
// that is gone, or whose start time differs (the pid was reused), counts
// as the relayd's death: a failed read is no evidence of it.
func relaydRuns(id relaydID) bool {
	e, err := readStat("/proc", id.pid, make([]byte, 1024))
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) {
		return false
	}
	return err != nil || (e.start == id.start && !e.dead())
}

// readRecord reads one record: a regular file owned by relayd's user, at
// most maxRecordBytes.
func readRecord(path string) (record, error) {
	var rec record
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return rec, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return rec, err
	}
	if sys, ok := fi.Sys().(*syscall.Stat_t); !fi.Mode().IsRegular() || !ok || int(sys.Uid) != os.Geteuid() {
		return rec, errors.New("not a regular file owned by relayd's user")
	}
	b, err := io.ReadAll(io.LimitReader(f, maxRecordBytes+1))
	if err != nil {
		return rec, err
	}
	if len(b) > maxRecordBytes {
		return rec, fmt.Errorf("larger than %d bytes", maxRecordBytes)
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("not a record: %v", err)
	}
	if rec.Version != recordVersion {
		return rec, fmt.Errorf("record version %d; this relayd reads %d", rec.Version, recordVersion)
	}
	return rec, nil
}
