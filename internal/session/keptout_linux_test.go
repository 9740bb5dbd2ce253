package session

import (
	osexec "os/exec"
	"slices"
	"testing"

	"github.com/relayd/relayd/internal/exec"
	"github.com/relayd/relayd/internal/protocol"
)

// listedScope is a scope whose looks list fixed members; newKeptOut and
// keptOut.Members call nothing else of it.
type listedScope struct {
	exec.Scope
	members []exec.Member
}

func (s listedScope) Members() ([]exec.Member, error) { return s.members, nil }

// Rule 6.13: a kept pid is acted on only with its start time. A process
// whose start time differs from the one keep names (the pid reused) is not
// kept: it is a target like any other member.
func TestKeptOutNeedsStartTime(t *testing.T) {
	cmd := osexec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	pid := cmd.Process.Pid
	st, err := exec.ReadStat(pid)
	if err != nil {
		t.Fatal("cannot read the sleep's /proc stat:", err)
	}
	start, ok := startMs(st.Start)
	if !ok {
		t.Fatal("boot time unknown")
	}
	// The reported start: what describe lists for the same process.
	if list, _ := describe([]exec.Member{{PID: pid}}, 0); len(list) != 1 || list[0].Start != start {
		t.Fatalf("describe lists %+v; want start %d", list, start)
	}
	scope := listedScope{members: []exec.Member{{PID: pid}}}
	for _, tt := range []struct {
		name string
		keep []protocol.Kept
		kept bool
	}{
		{"its start", []protocol.Kept{{PID: pid, Start: start}}, true},
		{"a tick later", []protocol.Kept{{PID: pid, Start: start + 10}}, false},
		{"a tick earlier", []protocol.Kept{{PID: pid, Start: start - 10}}, false},
		{"start 0", []protocol.Kept{{PID: pid, Start: 0}}, false},
		{"another pid", []protocol.Kept{{PID: pid + 1, Start: start}}, false},
	} {
		for _, looked := range []bool{true, false} {
			k := newKeptOut(scope, scope.members, looked, tt.keep)
			members, err := k.Members()
			k.Close()
			if err != nil {
				t.Fatal(err)
			}
			target := slices.ContainsFunc(members, func(m exec.Member) bool { return m.PID == pid })
			if k.Keeps() != tt.kept || target == tt.kept {
				t.Errorf("%s (look complete %v): keeps %v, a target %v; want kept %v", tt.name, looked, k.Keeps(), target, tt.kept)
			}
			mismatched := slices.Contains(k.mismatched, pid)
			if want := !tt.kept && tt.keep[0].PID == pid; mismatched != want {
				t.Errorf("%s (look complete %v): mismatched %v; want %v", tt.name, looked, k.mismatched, want)
			}
		}
	}
}
