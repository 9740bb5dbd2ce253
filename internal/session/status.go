package session

import (
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/relayd/relayd/internal/protocol"
)

// Looking without touching (protocol 4.6): status answers at once with
// what runs or waits detached, the shell sessions, the survivors a trial
// boundary would list (trial.go's lister) and the boundaries drawn so far.
// It ends nothing and signals nothing, and it does not wait for a
// boundary in progress: it runs on its connection's loop like ready.
//
// Bounded: at most protocol.MaxStatusExecutions executions, each with at
// most protocol.MaxStatusArgsBytes of program and args, and the
// survivors capped as everywhere (protocol.MaxSurvivors, each argv at
// most 4 KiB). A look costs one look per scope kept for its survivors,
// as a boundary does.

// status answers a status request.
func (cn *conn) status(rq request) {
	s := cn.srv
	r := protocol.Status{Token: cn.token(), Kind: "status", ID: rq.id, Ignored: rq.ignored}
	r.Executions, r.ExecutionsOmitted = s.executionStatus(time.Now())
	r.Sessions = s.sessionStatus(time.Now())
	r.Survivors, r.SurvivorsOmitted, _ = s.trialSurvivors(cn.log, "status")
	r.Boundary = int(s.boundaries.Load())
	r.SurvivorsUsage = s.survivorsUsage(false)
	cn.write(r)
}

// executionStatus lists the executions that run, on any connection, and
// the detached ones (running, or ended with their reply waiting), in
// execution order.
func (s *Server) executionStatus(now time.Time) ([]protocol.ExecutionStatus, int) {
	type entry struct {
		ex       *execution
		detached bool
		ended    bool
	}
	s.mu.Lock()
	all := make([]entry, 0, len(s.live)+len(s.detached))
	for ex := range s.live {
		_, detached := s.detached[ex.id]
		all = append(all, entry{ex: ex, detached: detached})
	}
	for _, ex := range s.detached {
		if !s.live[ex] {
			all = append(all, entry{ex: ex, detached: true, ended: true})
		}
	}
	s.mu.Unlock()
	slices.SortFunc(all, func(a, b entry) int { return compareIDs(a.ex.id, b.ex.id) })
	omitted := 0
	if len(all) > protocol.MaxStatusExecutions {
		omitted = len(all) - protocol.MaxStatusExecutions
		all = all[:protocol.MaxStatusExecutions]
	}
	list := make([]protocol.ExecutionStatus, 0, len(all))
	for _, e := range all {
		ex := e.ex
		st := protocol.ExecutionStatus{Execution: ex.id, Detached: e.detached, Ended: e.ended,
			StartedMs: now.Sub(ex.began).Milliseconds(), User: runsAs(ex)}
		st.Program, st.Args, st.ArgsOmitted = boundedCommand(ex.req.Command, ex.req.Args)
		if ex.req.TimeoutMs > 0 && !e.ended {
			left := ex.req.TimeoutMs - st.StartedMs // not armed yet: the subject is starting
			if at := ex.deadline.Load(); at != 0 {
				left = time.Unix(0, at).Sub(now).Milliseconds()
			}
			left = max(left, 0)
			st.TimeoutMs = &left
		}
		list = append(list, st)
	}
	return list, omitted
}

// runsAs names whom an execution's subject runs as: its execute's user,
// else --subject-user (its name, else its uid); "" for relayd's own user.
func runsAs(ex *execution) string {
	switch {
	case ex.req.User != "":
		return ex.req.User
	case ex.user == nil:
		return ""
	case ex.user.Name != "":
		return ex.user.Name
	case ex.user.Cred != nil:
		return strconv.FormatUint(uint64(ex.user.Cred.Uid), 10)
	}
	return ""
}

// boundedCommand is program and args within protocol.MaxStatusArgsBytes:
// the program cut at a character boundary, then args while they fit, the
// rest counted.
func boundedCommand(program string, args []string) (string, []string, int) {
	budget := protocol.MaxStatusArgsBytes
	if len(program) > budget {
		cut := budget
		for cut > 0 && !utf8.RuneStart(program[cut]) {
			cut--
		}
		program = program[:cut]
	}
	budget -= len(program)
	out := make([]string, 0, len(args))
	for i, a := range args {
		if len(a) > budget {
			return program, out, len(args) - i
		}
		budget -= len(a)
		out = append(out, a)
	}
	return program, out, 0
}
