package session

import (
	"bytes"
	"maps"
	"os"
	"slices"
	"strconv"
	"syscall"
	"time"

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

// What a session's command used (protocol 4.8 on a session's executed).
// A command's processes are the shell's children: the shell reaps them,
// so the kernel accounts their CPU time and storage I/O to the shell
// (/proc/PID/stat's cutime and cstime, /proc/PID/io), beside the shell's
// own (a builtin loop runs in it); what the shim reaps (processes orphaned
// to it, and the shell once it exits) comes with the shim's sums. The
// usage is the difference of both between the command's start and its end.

// shellUse is one look at a session's use so far.
type shellUse struct {
	cpuUser, cpuSystem time.Duration // the shell's own and its reaped children's
	read, write        int64         // storage I/O of the shell and its reaped children; -1: unreadable
	shim               exec.Usage    // what the shim reaped
}

// lookShellUse reads the shell's counters (pid) and the shim's sums.
func lookShellUse(pid int, subj *exec.Subject) shellUse {
	u := shellUse{read: -1, write: -1}
	u.shim, _ = subj.Usage()
	if st, err := exec.ReadStat(pid); err == nil {
		t := func(n int64) time.Duration { return time.Duration(n) * time.Second / exec.ClockTicks }
		u.cpuUser, u.cpuSystem = t(int64(st.UTime)+st.CUTime), t(int64(st.STime)+st.CSTime)
	}
	dir := "/proc/" + strconv.Itoa(pid)
	if b, err := os.ReadFile(dir + "/io"); err == nil {
		for _, line := range bytes.Split(b, []byte("\n")) {
			k, v, _ := bytes.Cut(line, []byte(": "))
			n, err := strconv.ParseInt(string(v), 10, 64)
			switch {
			case err != nil:
			case string(k) == "read_bytes":
				u.read = n
			case string(k) == "write_bytes":
				u.write = n
			}
		}
	}
	return u
}

// commandUsage is what was used between a (the command's start) and b
// (its end). exited: the shell has exited, so the shim's sums hold it
// whole (what a counted of it included).
func commandUsage(a, b shellUse, exited bool) *protocol.Usage {
	d := func(x, y time.Duration) time.Duration { return max(0, y-x) }
	di := func(x, y int64) int64 { return max(0, y-x) }
	u := exec.Usage{
		CPUUser:    d(a.shim.CPUUser, b.shim.CPUUser),
		CPUSystem:  d(a.shim.CPUSystem, b.shim.CPUSystem),
		Processes:  di(a.shim.Processes, b.shim.Processes),
		ReadBytes:  di(a.shim.ReadBytes, b.shim.ReadBytes),
		WriteBytes: di(a.shim.WriteBytes, b.shim.WriteBytes),
	}
	if b.shim.MaxRSS > a.shim.MaxRSS {
		u.MaxRSS = b.shim.MaxRSS
	}
	if exited {
		// The shim's sums took the shell whole: less what it had used
		// when the command began.
		u.CPUUser, u.CPUSystem = max(0, u.CPUUser-a.cpuUser), max(0, u.CPUSystem-a.cpuSystem)
		if a.read >= 0 {
			u.ReadBytes, u.WriteBytes = max(0, u.ReadBytes-a.read), max(0, u.WriteBytes-a.write)
		}
	} else {
		u.CPUUser += d(a.cpuUser, b.cpuUser)
		u.CPUSystem += d(a.cpuSystem, b.cpuSystem)
		if a.read >= 0 && b.read >= 0 {
			u.ReadBytes += di(a.read, b.read)
			u.WriteBytes += di(a.write, b.write)
		}
	}
	return usageOf(u)
}
