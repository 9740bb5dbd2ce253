package session

import (
	"slices"
	"time"
)

// Reattach (protocol section 4.5). An execution that asked for detachMs
// outlives a transport loss: its connection hands it to the Server, which
// keeps it, running or ended with its reply waiting in ex.done, until a
// connection attaches or detachMs passes. The Server's mutex decides every
// race between an attach, the end of detachMs, shutdown and a dial-out
// verify: whoever removes the execution from s.detached owns it.

// detachFull reports whether as many executions are detached as
// connections may be open (--max-connections): one more is settled at its
// transport loss instead (rule 6.4), so that executions cannot pile up
// without a controller (rule 6.11).
func (s *Server) detachFull() bool {
	s.mu.Lock()
	n := len(s.detached)
	s.mu.Unlock()
	if s.cfg.MaxConnections > 0 && n >= s.cfg.MaxConnections {
		s.log.Warn().Int("detached", n).Int("maxConnections", s.cfg.MaxConnections).
			Msg("as many executions are detached as --max-connections allows; this one is settled at its transport loss")
		return true
	}
	return false
}

// detach keeps ex for an attach. reason is why its connection ended.
func (s *Server) detach(ex *execution, reason string) {
	s.mu.Lock()
	if s.detached == nil {
		s.detached = map[string]*execution{}
	}
	ex.attached = make(chan struct{})
	s.detached[ex.id] = ex
	// A keeper counts as a connection served: Serve and Wait return only once it is
	// done, so that relayd never exits with a detached execution running.
	s.serving.Add(1)
	s.mu.Unlock()
	ex.log.Info().Str("reason", reason).Int64("detachMs", ex.req.DetachMs).
		Msg("connection lost; execution detached, waiting for an attach")
	go s.keepDetached(ex, ex.attached)
}

// keepDetached waits for an attach. When detachMs passes first (or relayd
// shuts down), rule 6.4 applies as on any transport loss: what runs is
// settled, and the reply, which nobody can take any more, is dropped.
func (s *Server) keepDetached(ex *execution, attached <-chan struct{}) {
	defer s.serving.Done()
	t := time.NewTimer(time.Duration(ex.req.DetachMs) * time.Millisecond)
	defer t.Stop()
	reason := "nobody attached within detachMs"
	select {
	case <-attached:
		return
	case <-t.C:
	case <-s.stopping:
		reason = "shutdown"
	}
	s.mu.Lock()
	_, mine := s.detached[ex.id]
	if mine {
		delete(s.detached, ex.id)
	}
	s.mu.Unlock()
	if !mine { // an attach or a verify took it at the same moment
		return
	}
	ex.stop(reason)
	res := <-ex.done
	if ex.kept != nil {
		s.letGoIfEmpty(ex.kept) // survivors are left alone, and stay the daemon's (trial.go)
	}
	ex.log.Info().Str("reason", reason).Str("termination", res.Termination).Str("settlement", res.Settlement).
		Msg("detached execution ended without a controller; its reply is dropped")
}

// attach takes the detached execution name for a connection; nil when
// there is none by that name. stopping is true when relayd is shutting
// down (every execution is being settled; nothing can be attached).
func (s *Server) attach(name string) (ex *execution, stopping bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil, true
	}
	ex = s.detached[name]
	if ex == nil {
		return nil, false
	}
	delete(s.detached, name)
	close(ex.attached)
	return ex, false
}

// takeAllDetached takes every detached execution (dial-out verify).
func (s *Server) takeAllDetached() []*execution {
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []*execution
	for name, ex := range s.detached {
		delete(s.detached, name)
		close(ex.attached)
		all = append(all, ex)
	}
	return all
}

// detachedNames lists the detached executions, for a dial-out ready.
func (s *Server) detachedNames() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.detached) == 0 {
		return nil
	}
	names := make([]string, 0, len(s.detached))
	for name := range s.detached {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// HasDetached reports whether an execution waits for an attach: dial-out
// mode then calls the controller again.
func (s *Server) HasDetached() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.detached) > 0
}
