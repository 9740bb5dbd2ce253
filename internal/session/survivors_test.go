package session

import (
	"testing"

	"github.com/relayd/relayd/internal/exec"
	"github.com/relayd/relayd/internal/protocol"
)

// describe lists each pid once, in pid order, without the subject, at most
// protocol.MaxSurvivors of them, and counts the rest.
func TestDescribeCapsSurvivors(t *testing.T) {
	const subject = 7
	var members []exec.Member
	for pid := 3*protocol.MaxSurvivors + 1; pid > 0; pid-- {
		members = append(members, exec.Member{PID: pid}, exec.Member{PID: pid}) // each twice, as from two scopes
	}
	list, omitted := describe(members, subject)
	if len(list) != protocol.MaxSurvivors || omitted != 2*protocol.MaxSurvivors {
		t.Fatalf("describe listed %d and omitted %d; want %d and %d", len(list), omitted, protocol.MaxSurvivors, 2*protocol.MaxSurvivors)
	}
	want := 1
	for _, s := range list {
		if want == subject {
			want++
		}
		if s.PID != want || s.Argv == nil {
			t.Fatalf("survivor %+v; want pid %d with a non-nil argv", s, want)
		}
		want++
	}
	if list, omitted := describe(members[:4], subject); len(list) != 2 || omitted != 0 {
		t.Fatalf("describe of two pids listed %d and omitted %d; want 2 and 0", len(list), omitted)
	}
}
