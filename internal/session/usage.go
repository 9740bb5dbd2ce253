package session

import (
	"maps"
	"slices"
	"syscall"

	"github.com/relayd/relayd/internal/env"
	"github.com/relayd/relayd/internal/exec"
	"github.com/relayd/relayd/internal/protocol"
)

// What an execution used, why it ended, and its limits (protocol 4.8).

// limits gives req the daemon's --default-limits when it names none, and
// says, for a bad-request, why a cgroup limit it names cannot be set.
func (s *Server) limits(req *protocol.Execute) string {
	if req.Limits == nil && len(s.cfg.DefaultLimits) > 0 {
		req.Limits = maps.Clone(s.cfg.DefaultLimits)
	}
	for _, name := range protocol.CgroupNames {
		if _, ok := req.Limits[name]; !ok {
			continue
		}
		if s.cfg.CanLimit == nil {
			return `execute: "limits": ` + name + ` needs the cgroup mechanism (relayd runs with --scope ` + s.cfg.Mechanism + `, which has no cgroup): ` + protocol.CgroupLimitHelp(name)
		}
		if err := s.cfg.CanLimit(name); err != nil {
			return `execute: "limits": ` + name + ` cannot be set: ` + err.Error() + `; ` + protocol.CgroupLimitHelp(name)
		}
	}
	return ""
}

// rlimits are req's resource limits for the subject's start.
func rlimits(lim protocol.Limits) []exec.Rlimit {
	var out []exec.Rlimit
	for _, name := range protocol.RlimitNames {
		if v, ok := lim[name]; ok {
			r, _ := exec.RlimitResource(name)
			out = append(out, exec.Rlimit{Resource: r, Value: v})
		}
	}
	return out
}

// oomWatch is the OOM kill counters read before the subject started: the
// scope's leaf's, and relayd's own memory cgroup's (a container's), with
// whether another execution started or ran meanwhile, which makes the
// latter no evidence for this one.
type oomWatch struct {
	leaf, own     uint64
	hasLeaf, hasO bool
	starts        uint64 // the Server's execution starts, this one's included
	alone         bool   // no other execution ran when this one started
}

func (s *Server) watchOOM(scope exec.Scope) oomWatch {
	w := oomWatch{starts: s.starts.Add(1), alone: s.alone()}
	w.leaf, w.hasLeaf = exec.ScopeOOMKills(scope)
	if w.alone {
		// relayd's own counter is evidence only for an execution that ran
		// alone (oomRose): not read for one that starts beside others.
		w.own, w.hasO = env.OOMKills()
	}
	return w
}

// usageOf is the wire form of u.
func usageOf(u exec.Usage) *protocol.Usage {
	return &protocol.Usage{CPUUserMs: u.CPUUser.Milliseconds(), CPUSystemMs: u.CPUSystem.Milliseconds(),
		MaxRSSBytes: u.MaxRSS, Processes: u.Processes, ReadBytes: u.ReadBytes, WriteBytes: u.WriteBytes}
}

// used fills the reply's usage, cause and limits once the execution's
// end is known (section 4.8). cause says "limit" when a process of the
// scope died of the signal of a limit that was set (SIGXCPU, or SIGKILL
// past cpuSeconds' hard value: cpuSeconds; SIGXFSZ: fileBytes), "oom" when
// a process of the scope died of SIGKILL and an OOM kill counter rose
// meanwhile (the leaf's; or relayd's own cgroup's while no other execution
// ran), and nothing otherwise.
func (s *Server) used(ex *execution, subj *exec.Subject, scope exec.Scope, w oomWatch, res *protocol.Executed) {
	u, _ := subj.Usage()
	res.Usage = usageOf(u)
	if peak, ok := exec.ScopeMemoryPeak(scope); ok && int64(peak) > res.Usage.MaxRSSBytes {
		// The leaf's memory cgroup (section 4.8): what the scope's
		// processes held together, page cache included.
		res.Usage.MaxRSSBytes = int64(peak)
	}
	lim := ex.req.Limits
	_, cpu := lim["cpuSeconds"]
	_, fsize := lim["fileBytes"]
	switch {
	case cpu && (u.KilledBy(syscall.SIGXCPU) || u.CPUKilled):
		res.Cause, res.Limit = protocol.CauseLimit, "cpuSeconds"
	case fsize && u.KilledBy(syscall.SIGXFSZ):
		res.Cause, res.Limit = protocol.CauseLimit, "fileBytes"
	case u.KilledBy(syscall.SIGKILL) && s.oomRose(scope, w):
		res.Cause = protocol.CauseOOM
	}
}

// oomRose reports the kernel's word that an OOM kill was counted for this
// execution since w was read.
func (s *Server) oomRose(scope exec.Scope, w oomWatch) bool {
	if w.hasLeaf {
		if n, ok := exec.ScopeOOMKills(scope); ok && n > w.leaf {
			return true
		}
	}
	if !w.hasO || !w.alone || s.starts.Load() != w.starts || !s.alone() {
		return false
	}
	n, ok := env.OOMKills()
	return ok && n > w.own
}

// ParseLimits reads --default-limits: "name=value,..." with the names and
// bounds of section 4.8; the error is one line that says which part is
// wrong.
func ParseLimits(s string) (protocol.Limits, error) { return protocol.ParseLimits(s) }

// keptUse is an execution whose subject exited with survivors left alone:
// its subject, whose usage grows as they end (section 4.8).
type keptUse struct {
	id   string
	subj *exec.Subject
}

// keepUsage records ex's subject for the survivors' usage of status and
// trial boundaries. Bounded (rule 6.11): past protocol.MaxSurvivorsUsage
// the oldest record goes.
func (s *Server) keepUsage(id string, subj *exec.Subject) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keptUse = append(s.keptUse, keptUse{id, subj})
	if len(s.keptUse) > protocol.MaxSurvivorsUsage {
		s.keptUse = slices.Delete(s.keptUse, 0, len(s.keptUse)-protocol.MaxSurvivorsUsage)
	}
}

// survivorsUsage lists the whole usage of each execution kept for its
// survivors, in execution order. A trial boundary (drop) lets go of
// those it reports complete: nothing of them can change any more.
func (s *Server) survivorsUsage(drop bool) []protocol.ExecutionUsage {
	s.mu.Lock()
	kept := slices.Clone(s.keptUse)
	s.mu.Unlock()
	var out []protocol.ExecutionUsage
	done := map[*exec.Subject]bool{}
	for _, k := range kept {
		u, complete := k.subj.Usage()
		out = append(out, protocol.ExecutionUsage{Execution: k.id, Usage: *usageOf(u), Complete: complete})
		if complete {
			done[k.subj] = true
		}
	}
	if drop && len(done) > 0 {
		s.mu.Lock()
		s.keptUse = slices.DeleteFunc(s.keptUse, func(k keptUse) bool { return done[k.subj] })
		s.mu.Unlock()
	}
	return out
}
