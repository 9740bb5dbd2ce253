package exec

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relayd/relayd/internal/env"
)

// Once the subject has ended, the look for survivors removes an empty leaf
// itself, the kernel's rmdir its evidence (one syscall where reading
// cgroup.events took three); a leaf a survivor holds is not removed and
// lists it; a removed leaf takes a signal as the empty leaf it was.
func TestCgroupLeafGoesAtTheExitLook(t *testing.T) {
	cg, err := env.FindCgroup2("")
	if err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := NewCgroups(ctx, testShims, cg.Base, cg.Base)
	if err != nil {
		t.Skip(err)
	}
	defer c.Release()
	for _, tc := range []struct {
		name, script string
		survivor     bool
	}{
		{"empty", "exit 0", false},
		{"survivor", "sleep 600 & echo $!", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			scope, err := c.NewScope("")
			if err != nil {
				t.Fatal(err)
			}
			leaf := scope.(*cgScope).dir
			p := newPins(t)
			out := newBuffer()
			s := startSh(t, p, scope, tc.script, Spec{Stdout: out})
			if st := waitExit(t, s); !st.Exited || st.Code != 0 {
				t.Fatalf("subject status %+v; want exit 0", st)
			}
			if _, err := os.Stat(leaf); err != nil {
				t.Fatalf("the leaf is gone before any look: %v", err)
			}
			var survivor int
			if tc.survivor {
				deadline := time.Now().Add(10 * time.Second)
				for survivor == 0 && time.Now().Before(deadline) {
					survivor, _ = strconv.Atoi(strings.TrimSpace(out.String()))
					time.Sleep(time.Millisecond)
				}
				p.pin(survivor)
			}
			m := memberSet(t, scope)
			_, statErr := os.Stat(leaf)
			switch {
			case tc.survivor && (!m[survivor] || len(m) != 1 || statErr != nil):
				t.Fatalf("Members %v, leaf %v; want the survivor %d listed, its leaf kept", m, statErr, survivor)
			case !tc.survivor && (len(m) != 0 || !os.IsNotExist(statErr)):
				t.Fatalf("Members %v, leaf %v; want none, the leaf removed by the look", m, statErr)
			}
			if !tc.survivor {
				if err := scope.Signal(syscall.SIGTERM); err != nil {
					t.Fatalf("Signal to the removed leaf: %v; want nil", err)
				}
				if err := scope.Signal(syscall.SIGKILL); err != nil {
					t.Fatalf("SIGKILL to the removed leaf: %v; want nil", err)
				}
			}
		})
	}
}
