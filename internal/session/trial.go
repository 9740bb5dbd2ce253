package session

import (
	"slices"
	"sync"

	"github.com/rs/zerolog"

	"github.com/relayd/relayd/internal/exec"
	"github.com/relayd/relayd/internal/protocol"
	"github.com/relayd/relayd/internal/teardown"
)

// The trial boundary (protocol 4.6): verify with "all" ends every
// execution of the daemon, whichever connection runs it or whether it is
// detached, and lists (or settles) the survivors of every execution. The
// Server keeps what that needs beside the connections: the executions that
// run (live) and the scopes left alone with survivors (left), which
// outlive the connection that ran them.

// track counts ex among the executions a boundary ends.
func (s *Server) track(ex *execution) {
	s.mu.Lock()
	if s.live == nil {
		s.live = map[*execution]bool{}
	}
	s.live[ex] = true
	s.mu.Unlock()
}

func (s *Server) untrack(ex *execution) {
	s.mu.Lock()
	delete(s.live, ex)
	s.mu.Unlock()
}

// minPrune is the size of left below which keepLeft never prunes it.
const minPrune = 64

// keepLeft records the scope of execution id, left alone with survivors
// (rule 6.1), for later boundaries. When left has doubled since it was
// last pruned, scopes found empty are let go, so that it grows with the
// scopes that hold survivors, not with every execution (rule 6.11).
func (s *Server) keepLeft(sc exec.Scope, id string) {
	s.mu.Lock()
	if s.left == nil {
		s.left = map[exec.Scope]string{}
	}
	s.left[sc] = id
	prune := len(s.left) >= max(minPrune, 2*s.leftPruned)
	s.mu.Unlock()
	if prune {
		s.pruneLeft()
	}
}

// leftScopes returns the left scopes with their executions, in execution order.
func (s *Server) leftScopes() []leftScope {
	s.mu.Lock()
	out := make([]leftScope, 0, len(s.left))
	for sc, id := range s.left {
		out = append(out, leftScope{id: id, scope: sc})
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b leftScope) int { return compareIDs(a.id, b.id) })
	return out
}

// compareIDs orders execution names ("x-9" before "x-10").
func compareIDs(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

type leftScope struct {
	id    string
	scope exec.Scope
	shell *shell // an open session's scope (shell.go); nil for a left scope
}

// executionOf names the execution of a left scope; "" when it is not kept.
func (s *Server) executionOf(sc exec.Scope) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.left[sc]
}

// letGo stops tracking a left scope: it is empty, or was settled whole.
func (s *Server) letGo(sc exec.Scope) {
	s.mu.Lock()
	_, ok := s.left[sc]
	delete(s.left, sc)
	s.mu.Unlock()
	if ok {
		sc.Close()
	}
}

// letGoIfEmpty lets sc go when one look finds it empty.
func (s *Server) letGoIfEmpty(sc exec.Scope) {
	if members, err := sc.Members(); err == nil && len(members) == 0 {
		s.letGo(sc)
	}
}

// pruneLeft lets go of every left scope that one look finds empty.
func (s *Server) pruneLeft() {
	for _, l := range s.leftScopes() {
		s.letGoIfEmpty(l.scope)
	}
	s.mu.Lock()
	s.leftPruned = len(s.left)
	s.mu.Unlock()
}

// boundary answers a verify with "all" (protocol 4.6). It runs on the
// loop of the connection that asked, which it holds until the
// reply is written: the executions it ends are answered by their own
// connections' loops meanwhile. It returns a non-empty reason when the
// connection must end (a verify without all that came before it, in
// dial-out mode).
func (cn *conn) boundary(rq request, v *protocol.Verify) string {
	s := cn.srv
	if v.Files != nil {
		// Refused before anything ends (protocol 4.9, marks.go).
		if cat, why := cn.checkBoundaryFiles(v.Files); cat != "" {
			cn.refuse(rq.id, rq.ignored, cat, why)
			return ""
		}
	}
	s.trialMu.Lock()
	defer s.trialMu.Unlock()

	// Every execution of the daemon ends by rule 6.2, all at once:
	// settling them one by one would add up their deadlines.
	s.mu.Lock()
	running := make([]*execution, 0, len(s.live))
	for ex := range s.live {
		running = append(running, ex)
	}
	s.mu.Unlock()
	for _, ex := range running {
		ex.stop("verify")
	}
	for _, ex := range running {
		<-ex.finished
	}
	if cn.cur != nil { // its reply comes first, on this connection
		cn.finished(<-cn.cur.done)
	}
	if end := cn.answerVerifies(); end != "" {
		return end
	}

	var settled []int
	if v.Settle {
		settled = cn.settleSurvivors(v.Keep)
	}
	r := protocol.Verified{Token: cn.token(), Kind: "verified", ID: rq.id, Quiescent: s.Confirmed(),
		Boundary: int(s.boundaries.Add(1)), Ignored: rq.ignored}
	var found int
	r.Survivors, r.SurvivorsOmitted, found = s.trialSurvivors(cn.log, "trial boundary")
	r.SurvivorsUsage = s.survivorsUsage(true)
	if v.Settle {
		slices.Sort(settled)
		settled = slices.Compact(settled)
		if settled == nil {
			settled = []int{}
		}
		r.Settled = &settled
	}
	if v.Files != nil {
		r.Files = cn.boundaryFiles(v.Files) // once the processes are settled (marks.go)
	}
	cn.log.Info().Int("boundary", r.Boundary).Int("executions", len(running)).Int("survivors", found).
		Int("settled", len(settled)).Bool("quiescent", r.Quiescent).Msg("trial boundary")
	cn.write(r)
	return ""
}

// trialSurvivors lists what a trial boundary lists (protocol 4.6): every
// live process of every left scope, whichever connection ran it, each
// named with its execution, at most protocol.MaxSurvivors of them with
// the rest counted in omitted; found counts them all. A scope that one
// look finds empty is let go; one whose look fails is logged (what
// names the caller) and left out. It signals nothing: status lists
// through it too.
func (s *Server) trialSurvivors(log zerolog.Logger, what string) (list []protocol.Survivor, omitted, found int) {
	var all []exec.Member
	owner := map[int]string{}
	for _, l := range append(s.leftScopes(), s.sessionScopes()...) {
		members, err := l.scope.Members()
		if err != nil {
			log.Warn().Err(err).Str("execution", l.id).Msg(what + ": could not look for survivors")
			continue
		}
		if len(members) == 0 {
			s.letGo(l.scope)
			continue
		}
		for _, m := range members {
			owner[m.PID] = l.id
		}
		all = append(all, members...)
	}
	list, omitted = describe(all, 0)
	for i := range list {
		list[i].Execution = owner[list[i].PID]
	}
	return list, omitted, len(list) + omitted
}

// settleSurvivors settles the survivors of every left scope but the
// processes keep names and their descendants, every scope at once, and
// returns the pids it settled. A scope that holds none of them is stopped
// whole (teardown.Stop, its usual evidence) and let go; in one that does,
// every other process is stopped one by one (keptOut, an exec.Part). A settlement
// without evidence makes relayd's exit status and later quiescent say so.
func (cn *conn) settleSurvivors(keep []protocol.Kept) []int {
	s := cn.srv
	var (
		mu      sync.Mutex
		settled []int
		wg      sync.WaitGroup
	)
	for _, l := range append(s.leftScopes(), s.sessionScopes()...) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			log := cn.log.With().Str("execution", l.id).Logger()
			members, err := l.scope.Members()
			if err == nil && len(members) == 0 {
				s.letGo(l.scope)
				return
			}
			out := newKeptOut(l.scope, members, err == nil, keep)
			defer out.Close()
			if l.shell != nil && !out.Keeps() {
				// An open session that keeps nothing is closed: its
				// whole scope settled, by its own execution.
				pids := l.shell.closeForBoundary(members)
				mu.Lock()
				settled = append(settled, pids...)
				mu.Unlock()
				return
			}
			if l.shell != nil {
				// What is kept outlives the session's shell: its scope
				// is then left alone, as an exited subject's.
				l.shell.keepRest.Store(true)
			}
			if len(out.mismatched) > 0 {
				log.Warn().Ints("pids", out.mismatched).Msg("trial boundary: a kept pid names a process with another start time (the pid reused): settled, not kept")
			}
			var target teardown.Scope = out
			if !out.Keeps() {
				target = l.scope
			}
			r := s.stopScope(log, target, 0)
			word := s.settlementOf(log, r)
			pids := out.Settled()
			log.Info().Str("settlement", word).Ints("pids", pids).Bool("kept", out.Keeps()).Msg("trial boundary: survivors settled")
			mu.Lock()
			settled = append(settled, pids...)
			mu.Unlock()
			if !out.Keeps() {
				s.letGo(l.scope)
			}
		}()
	}
	wg.Wait()
	return settled
}
