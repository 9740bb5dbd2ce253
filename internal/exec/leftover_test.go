package exec

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Leftovers takes only the records of relayds that no longer run, from
// this boot and PID namespace; a record of a running relayd is another
// relayd's. Records that say nothing, from another boot, and temporary files
// of dead relayds go; what cannot be read stays, with a note.
func TestLeftoversOnlyOfDeadRelayds(t *testing.T) {
	dir := t.TempDir()
	st, err := OpenState(dir)
	if err != nil {
		t.Fatal(err)
	}
	self, _ := statOf(os.Getpid())
	dead := deadPid(t)
	write := func(name string, rec record) string {
		t.Helper()
		b, _ := json.Marshal(rec)
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	scope := []scopeRecord{{Name: "x-3", Session: dead, Began: 1, Members: [][2]uint64{{uint64(dead), 42}}}}
	rec := func(pid int, start uint64) record {
		return record{Version: 1, PID: pid, Start: start, BootID: st.boot, PIDNamespace: st.pidNS, Scopes: scope}
	}
	// The test's parent (go test) stands for another relayd that runs.
	parent, _ := statOf(os.Getppid())
	running := write(fmt.Sprintf("relayd-%d-%d.json", os.Getppid(), parent.start), rec(os.Getppid(), parent.start))
	// The same pid with another start time: that relayd is dead, and its pid reused.
	reused := write(fmt.Sprintf("relayd-%d-%d.json", os.Getpid(), self.start-1), rec(os.Getpid(), self.start-1))
	empty := rec(dead, 8)
	empty.Scopes = nil
	emptyPath := write(fmt.Sprintf("relayd-%d-8.json", dead), empty)
	otherBoot := rec(dead, 9)
	otherBoot.BootID = "another-boot"
	otherBootPath := write(fmt.Sprintf("relayd-%d-9.json", dead), otherBoot)
	otherNS := rec(dead, 10)
	otherNS.PIDNamespace = "pid:[1]"
	otherNSPath := write(fmt.Sprintf("relayd-%d-10.json", dead), otherNS)
	garbled := filepath.Join(dir, fmt.Sprintf("relayd-%d-11.json", dead))
	if err := os.WriteFile(garbled, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, fmt.Sprintf(".relayd-%d-12.json.tmp", dead))
	if err := os.WriteFile(tmp, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}

	found, notes := st.Leftovers()
	if len(found) != 1 {
		t.Fatalf("Leftovers found %d scopes; want the one of the relayd whose pid was reused", len(found))
	}
	l := found[0]
	if l.Name != "x-3" || l.Mechanism != ProcessGroup || l.Relayd != os.Getpid() || l.Where != reused {
		t.Errorf("leftover %+v; want x-3, process-group, relayd %d, at %s", l, os.Getpid(), reused)
	}
	for path, want := range map[string]bool{running: true, reused: true, emptyPath: false, otherBootPath: false,
		otherNSPath: true, garbled: true, tmp: false} {
		if _, err := os.Stat(path); (err == nil) != want {
			t.Errorf("%s: exists %v; want %v", filepath.Base(path), err == nil, want)
		}
	}
	joined := strings.Join(notes, "\n")
	for _, want := range []string{"before the last boot", "another PID namespace", "not a record"} {
		if !strings.Contains(joined, want) {
			t.Errorf("notes %q; want one saying %q", notes, want)
		}
	}
	if m, err := l.Members(); err != nil || len(m) != 0 {
		t.Fatalf("Members() = %v, %v; want none: the recorded process is gone", m, err)
	}
	if err := l.Finish(true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(reused); !os.IsNotExist(err) {
		t.Fatalf("the record of a settled scope is still there (stat: %v)", err)
	}
}

// A recorded scope's members are the recorded processes that still run
// with their recorded start time and their descendants (here one that left
// the session); a pid that names another process now is no member, and
// neither is the session it leads. Settling kills the members and removes
// the record.
func TestLeftoverMembers(t *testing.T) {
	p := newPins(t)
	scope, err := testPG.NewScope("")
	if err != nil {
		t.Fatal(err)
	}
	out := newBuffer()
	s := startSh(t, p, scope, "setsid sleep 600 & echo child $!; wait", Spec{Stdout: out})
	child := waitNamed(t, p, out, "child")["child"]
	waitEscaped(t, child, false)
	sh, _ := statOf(s.PID)

	dir := t.TempDir()
	st, err := OpenState(dir)
	if err != nil {
		t.Fatal(err)
	}
	dead := deadPid(t)
	scopes := []scopeRecord{
		{Name: "x-1", Session: s.PID, SubjectStart: sh.start, Began: sh.start, Members: [][2]uint64{{uint64(s.PID), sh.start}}},
		{Name: "x-2", Session: s.PID, SubjectStart: sh.start + 1, Began: 0, Members: [][2]uint64{{uint64(s.PID), sh.start + 1}}},
	}
	b, _ := json.Marshal(record{Version: 1, PID: dead, Start: 5, BootID: st.boot, PIDNamespace: st.pidNS, Scopes: scopes})
	path := filepath.Join(dir, fmt.Sprintf("relayd-%d-5.json", dead))
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	found, notes := st.Leftovers()
	if len(found) != 2 || len(notes) != 0 {
		t.Fatalf("Leftovers = %d scopes, notes %q; want 2, none", len(found), notes)
	}
	slices.SortFunc(found, func(a, b *Leftover) int { return strings.Compare(a.Name, b.Name) })
	live, reused := found[0], found[1]

	if m, err := reused.Members(); err != nil || len(m) != 0 {
		t.Fatalf("Members of x-2 = %v, %v; want none: its pid and session name another process now", m, err)
	}
	m, err := live.Members()
	if err != nil {
		t.Fatal(err)
	}
	pids := []int{}
	for _, x := range m {
		pids = append(pids, x.PID)
	}
	slices.Sort(pids)
	if want := []int{s.PID, child}; !slices.Equal(pids, want) {
		t.Fatalf("Members of x-1 = %v; want the recorded subject and its setsid child %v", pids, want)
	}
	if err := reused.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if p.gone(s.PID) {
		t.Fatal("signalling x-2 killed the process whose pid it recorded with another start time")
	}
	if err := live.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if alive := p.waitGone(10*time.Second, s.PID, child); len(alive) > 0 {
		t.Fatalf("processes %v survived SIGKILL", alive)
	}
	waitExit(t, s)
	for _, l := range found {
		if err := l.Finish(true); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the record is still there once both scopes are settled (stat: %v)", err)
	}
}

// deadPid returns a pid that no process has now.
func deadPid(t *testing.T) int {
	t.Helper()
	for pid := 4000000; pid > 3000000; pid -= 7 {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); os.IsNotExist(err) {
			return pid
		}
	}
	t.Fatal("no free pid found")
	return 0
}
