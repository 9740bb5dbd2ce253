package exec

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A running process-group scope is recorded in the state directory (rule
// 6.10): relayd's pid and start time, and per scope its name, and its
// subject's session, pid and start time, as the shim read them. The directory is created, mode 0700, by
// the first record; the record is mode 0600. A record is not rewritten
// while nothing changes, and it goes at once when the scope is left alone
// (rule 6.1: its survivors are no successor's to settle), at the next
// interval when it is closed.
func TestStateRecordsRunningScopes(t *testing.T) {
	for _, end := range []string{"LeaveAlone", "Close"} {
		t.Run(end, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			const every = 20 * time.Millisecond
			tr := NewProcessGroups(testShims)
			dir := filepath.Join(t.TempDir(), "state")
			st, err := OpenState(dir)
			if err != nil {
				t.Fatalf("OpenState(%s) = %v; want a missing directory in a writable one accepted", dir, err)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Fatalf("OpenState created %s before anything was recorded (stat: %v)", dir, err)
			}
			tr.Record(ctx, st, every)
			scope, err := tr.NewScope("x-7")
			if err != nil {
				t.Fatal(err)
			}
			p := newPins(t)
			out := newBuffer()
			s := startSh(t, p, scope, "setsid sleep 600 & echo setsid $!; exec sleep 600", Spec{Stdout: out})
			escapee := waitNamed(t, p, out, "setsid")["setsid"]

			rec := waitRecord(t, st.Path(), func(r record) bool { return len(r.Scopes) == 1 && len(r.Scopes[0].Members) == 2 })
			self, _ := statOf(os.Getpid())
			if rec.Version != 1 || rec.PID != os.Getpid() || rec.Start != self.start || rec.BootID == "" || rec.PIDNamespace == "" {
				t.Errorf("record %+v; want version 1, pid %d, start %d, a boot id and a PID namespace", rec, os.Getpid(), self.start)
			}
			sr := rec.Scopes[0]
			subject, _ := statOf(s.PID)
			if sr.Name != "x-7" || sr.Session != s.PID || sr.SubjectStart != subject.start || sr.SubjectStart == 0 || sr.Began != subject.start {
				t.Errorf("scope %+v; want name x-7, session %d, subject start %d", sr, s.PID, subject.start)
			}
			esc, _ := statOf(escapee)
			if want := [][2]uint64{{uint64(s.PID), subject.start}, {uint64(escapee), esc.start}}; len(sr.Members) != 2 || sr.Members[0] != want[0] || sr.Members[1] != want[1] {
				t.Errorf("members %v; want the subject and the escapee %v, as the shim listed them", sr.Members, want)
			}
			if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
				t.Errorf("state directory: %v, %v; want mode 0700", fi.Mode(), err)
			}
			fi, err := os.Stat(st.Path())
			if err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("record: %v, %v; want mode 0600", fi.Mode(), err)
			}

			// Nothing changes: the record stays the same file (a rewrite is
			// a new file renamed over it: another inode, or at least another
			// modification time, as an inode number may be used again).
			ino, mtime := fi.Sys().(*syscall.Stat_t).Ino, fi.ModTime()
			time.Sleep(10 * every)
			if fi, err := os.Stat(st.Path()); err != nil || fi.Sys().(*syscall.Stat_t).Ino != ino || !fi.ModTime().Equal(mtime) {
				t.Fatalf("the record was rewritten while nothing changed (%v)", err)
			}

			if end == "LeaveAlone" {
				scope.LeaveAlone()
			} else {
				scope.Close()
			}
			if end == "LeaveAlone" {
				if _, err := os.Stat(st.Path()); !os.IsNotExist(err) {
					t.Fatalf("after %s the record is still there (stat: %v); want it gone at once", end, err)
				}
			} else {
				// A closed scope leaves at the next interval: its end waits
				// for no write.
				deadline := time.Now().Add(5 * time.Second)
				for _, err := os.Stat(st.Path()); !os.IsNotExist(err); _, err = os.Stat(st.Path()) {
					if time.Now().After(deadline) {
						t.Fatalf("5s after Close the record is still there (stat: %v)", err)
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
			if end == "LeaveAlone" {
				// Tracking goes on, and the scope stays out of the record.
				time.Sleep(5 * every)
				if _, err := os.Stat(st.Path()); !os.IsNotExist(err) {
					t.Fatalf("a scope left alone was recorded again (stat: %v)", err)
				}
			}
		})
	}
}

// A short execution never costs a write: a scope that ends before the next
// recording tick leaves no file behind and no directory either.
func TestStateShortScopeNotRecorded(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr := NewProcessGroups(testShims)
	dir := filepath.Join(t.TempDir(), "state")
	st, err := OpenState(dir)
	if err != nil {
		t.Fatal(err)
	}
	tr.Record(ctx, st, time.Hour)
	scope, err := tr.NewScope("x-1")
	if err != nil {
		t.Fatal(err)
	}
	p := newPins(t)
	s := startSh(t, p, scope, "exit 0", Spec{})
	waitExit(t, s)
	scope.Close()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("a scope that lived less than a recording interval made %s (stat: %v)", dir, err)
	}
}

// A state directory that another user could write to, or that is no
// directory, is refused: a planted record would name processes to kill.
func TestOpenStateRefusesUnsafeDirectories(t *testing.T) {
	base := t.TempDir()
	shared := filepath.Join(base, "shared")
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		shared:                                 "can be written by other users",
		file:                                   "is not a directory",
		filepath.Join(base, "no", "such", "x"): "does not exist",
	} {
		if _, err := OpenState(path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("OpenState(%s) = %v; want an error saying %q", path, err, want)
		}
	}
}

// waitRecord waits until the record at path exists and satisfies ok.
func waitRecord(t *testing.T, path string, ok func(record) bool) record {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var rec record
		if b, err := os.ReadFile(path); err == nil && json.Unmarshal(b, &rec) == nil && ok(rec) {
			return rec
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(path)
			t.Fatalf("no fitting record at %s within 10s; last %q", path, b)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestStateWritesBlockNoStart: a write of the record, which the end of a
// recorded scope waits for, keeps no other execution waiting: a scope
// starts while a write is under way, and scopes that end at once share
// writes. Every write was made under the one lock that starting and ending
// scopes take, so 32 sessions at once waited for each other's file I/O
// (relayd's mutex profile at 32 sessions: 78% of the delay in
// State.remove and State.save).
func TestStateWritesBlockNoStart(t *testing.T) {
	st, err := OpenState(filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	// Recorded scopes need their subject's pid and start time only; these
	// name no process, and nothing is signalled.
	scope := func(i int) *pgScope {
		return &pgScope{name: fmt.Sprintf("x-%d", i), run: &shimRun{pid: 1 << 22, start: uint64(i + 1)}}
	}
	const n = 32
	scopes := make([]*pgScope, n)
	for i := range scopes {
		scopes[i] = scope(i)
		st.add(scopes[i])
	}
	st.save()
	gate, entered := make(chan struct{}), make(chan struct{}, 1)
	st.writing = func() {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-gate
	}
	before := st.writes.Load()
	st.mu.Lock()
	asked0 := st.asked
	st.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range scopes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st.remove(s)
			b, _ := os.ReadFile(st.Path())
			if strings.Contains(string(b), `"name":"`+s.name+`"`) {
				t.Errorf("after removing %s the record still names it: %s", s.name, b)
			}
		}()
	}
	<-entered // a write is under way, and held
	added := make(chan struct{})
	go func() {
		st.add(scope(n))
		close(added)
	}()
	select {
	case <-added:
	case <-time.After(2 * time.Second):
		close(gate)
		t.Fatal("a scope's start waited for a write of the record")
	}
	// Every removal has asked for its write before the held one ends (on a
	// loaded machine a goroutine may not have run yet): they share the next.
	for waited := time.Duration(0); ; waited += time.Millisecond {
		st.mu.Lock()
		asked := st.asked - asked0
		st.mu.Unlock()
		if asked >= n {
			break
		}
		if waited > 10*time.Second {
			close(gate)
			t.Fatalf("%d of %d removals asked for a write in 10s", asked, n)
		}
		time.Sleep(time.Millisecond)
	}
	close(gate)
	wg.Wait()
	if w := st.writes.Load() - before; w > 3 {
		t.Fatalf("%d writes for %d removals at once; want at most 3", w, n)
	}
}
