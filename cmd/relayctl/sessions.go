package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/relayd/relayd/client"
)

// On the wire, an open shell session's processes (its shell, what its
// commands left) are survivors at the trial boundary and in status
// (protocol 4.7: the boundary treats an open session like a kept scope).
// relayctl shows them as the session's instead, everywhere: status lists
// the sessions by id with their processes, and survivors and verify count
// and list apart what executions left. A process is a session's when it
// is of the execution whose subject is the session's shell (status names
// each session's shell by pid; execution ids are relayd's own, never
// reused).

// shellSession is one entry of status' sessions (protocol 4.7).
type shellSession struct {
	Session   string `json:"session"`
	Shell     string `json:"shell"`
	PID       int    `json:"pid"`
	User      string `json:"user"`
	Busy      bool   `json:"busy"`
	IdleMs    int64  `json:"idleMs"`
	StartedMs int64  `json:"startedMs"`
}

// sessionScopes is what a status says of the open shell sessions: each
// one, and the session each execution that is one belongs to.
type sessionScopes struct {
	list      []shellSession
	execution map[string]string // execution id → session id
}

func readSessions(st client.Status) sessionScopes {
	s := sessionScopes{execution: map[string]string{}}
	for _, raw := range st.Sessions {
		var one shellSession
		if json.Unmarshal(raw, &one) == nil && one.Session != "" {
			s.list = append(s.list, one)
		}
	}
	for _, sv := range st.Survivors {
		for _, one := range s.list {
			if sv.PID == one.PID && sv.Execution != "" {
				s.execution[sv.Execution] = one.Session
			}
		}
	}
	return s
}

// lookSessions asks relayd's status for the open sessions, when it has a
// status message; nothing otherwise (every survivor then shown as one).
func lookSessions(ctx context.Context, c *client.Conn) sessionScopes {
	if !slices.Contains(c.Handshake().Extensions, "status") {
		return sessionScopes{}
	}
	st, err := c.Status(ctx)
	if err != nil {
		return sessionScopes{}
	}
	return readSessions(st)
}

// split parts survivors into what executions left and each session's.
func (s sessionScopes) split(survivors []client.Survivor) (left []client.Survivor, bySession map[string][]client.Survivor) {
	bySession = map[string][]client.Survivor{}
	for _, sv := range survivors {
		if name, ok := s.execution[sv.Execution]; ok && sv.Execution != "" {
			bySession[name] = append(bySession[name], sv)
			continue
		}
		left = append(left, sv)
	}
	return left, bySession
}

// names is the sessions' ids in relayd's order.
func (s sessionScopes) names() []string {
	var out []string
	for _, one := range s.list {
		out = append(out, one.Session)
	}
	return out
}

// sessionsTable prints the sessions by id, then their processes.
func (p printer) sessionsTable(s sessionScopes, bySession map[string][]client.Survivor) {
	if len(s.list) == 0 {
		fmt.Fprintln(p.stdout, "shell sessions: none")
		return
	}
	fmt.Fprintf(p.stdout, "shell sessions: %s (relayctl shell --session ID attaches to a pty one)\n", strings.Join(s.names(), ", "))
	tw := tabwriter.NewWriter(p.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tSHELL\tPID\tUSER\tSTATE\tIDLE")
	for _, one := range s.list {
		user, state := one.User, "idle"
		if user == "" {
			user = "-"
		}
		if one.Busy {
			state = "busy"
		}
		idle := (time.Duration(one.IdleMs) * time.Millisecond).Round(time.Second)
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", one.Session, one.Shell, one.PID, user, state, idle)
	}
	tw.Flush()
	var procs []client.Survivor
	var of []string
	for _, name := range s.names() {
		for _, sv := range bySession[name] {
			procs = append(procs, sv)
			of = append(of, name)
		}
	}
	if len(procs) == 0 {
		return
	}
	fmt.Fprintln(p.stdout, "\ntheir processes (not survivors: the sessions' own):")
	p.processTable(procs, of)
}

// sessionLines lists, for verify's summary, each session's processes.
func sessionLines(b *strings.Builder, s sessionScopes, bySession map[string][]client.Survivor) {
	for _, name := range s.names() {
		for _, sv := range bySession[name] {
			fmt.Fprintf(b, "relayctl:   shell session %s: %d %s%s\n", name, sv.PID, strings.Join(sv.Argv, " "), survivorNotes(sv))
		}
	}
}

// sessionWords says how many processes the open sessions hold, for a
// summary line: "" when none.
func sessionWords(s sessionScopes, bySession map[string][]client.Survivor) string {
	var parts []string
	for _, name := range s.names() {
		if n := len(bySession[name]); n > 0 {
			parts = append(parts, fmt.Sprintf("%s (%s)", name, plural(n, "process", "processes")))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "; shell session " + strings.Join(parts, ", ") + " open, not counted"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
