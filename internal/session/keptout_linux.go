package session

import (
	"github.com/relayd/relayd/internal/exec"
	"github.com/relayd/relayd/internal/protocol"
)

// keptOut is the part of a left scope that a trial boundary settles when
// it keeps some of the scope's processes (protocol 4.6): every member
// outside the kept processes' subtrees, an exec.Part (each process
// signalled on its own, through a pidfd).
type keptOut struct {
	*exec.Part
	mismatched []int // pids of keep found here with another start time: not kept
}

// newKeptOut takes members (a first look at scope, complete when looked
// is true) and the processes to keep: those that are members and started
// when keep says (rule 6.13: a pid is acted on only with its start time),
// and the members that descend from them, are kept; every other member is
// a target, a process that took a kept pid after its owner ended
// included. When the look failed, every pid of keep counts as possibly a
// member. The pids of keep that are here with another start time are
// listed in mismatched.
func newKeptOut(scope exec.Scope, members []exec.Member, looked bool, keep []protocol.Kept) *keptOut {
	k := &keptOut{}
	inScope := map[int]bool{}
	for _, m := range members {
		inScope[m.PID] = true
	}
	var kept []exec.Member
	for _, kp := range keep {
		if looked && !inScope[kp.PID] {
			continue
		}
		st, err := exec.ReadStat(kp.PID)
		if err != nil {
			continue
		}
		if ms, known := startMs(st.Start); known && ms == kp.Start {
			kept = append(kept, exec.Member{PID: kp.PID, Start: st.Start})
		} else {
			k.mismatched = append(k.mismatched, kp.PID)
		}
	}
	k.Part = exec.NewPart(scope, kept, nil)
	k.Sort(members)
	return k
}
