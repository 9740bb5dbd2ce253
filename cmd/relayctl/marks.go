package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"github.com/relayd/relayd/client"
)

// mark, changes, restore and unmark (protocol 4.9).

// checkMarks validates the words of the mark verbs.
func checkMarks(verb string, command []string) error {
	switch {
	case verb == "mark" && len(command) < 2:
		return errors.New("wants a name and at least one path: relayctl mark [flags] NAME PATH...")
	case (verb == "changes" || verb == "restore") && len(command) < 1:
		return fmt.Errorf("wants a mark's name: relayctl %s [flags] MARK [PATH...]", verb)
	case verb == "unmark" && len(command) != 1:
		return errors.New("wants one mark's name: relayctl unmark [flags] NAME")
	}
	return nil
}

func marks(ctx context.Context, c *client.Conn, verb string, o options, command []string, out printer) (int, error) {
	switch verb {
	case "mark":
		m, err := c.Mark(ctx, command[0], client.MarkOptions{Paths: command[1:], Keep: o.markKeep, Exclude: o.markExclude})
		if err != nil {
			return 0, err
		}
		if out.json {
			out.asJSON("marked", m)
			return 0, nil
		}
		fmt.Fprintf(out.stdout, "marked %s: %d entries, %s, kept %s, in %d ms\n", m.Mark, m.Entries, bytesWords(m.Bytes), bytesWords(m.KeptBytes), m.DurationMs)
		return 0, nil
	case "unmark":
		if err := c.Unmark(ctx, command[0]); err != nil {
			return 0, err
		}
		if out.json {
			out.asJSON("unmarked", map[string]string{"mark": command[0]})
			return 0, nil
		}
		fmt.Fprintf(out.stdout, "unmarked %s\n", command[0])
		return 0, nil
	case "changes":
		ch, err := c.Changes(ctx, command[0], command[1:]...)
		if err != nil {
			return 0, err
		}
		if out.json {
			out.asJSON("changes", ch)
			return 0, nil
		}
		out.changes(ch)
		return 0, nil
	}
	r, err := c.Restore(ctx, command[0], command[1:]...)
	if err != nil && !errors.Is(err, client.ErrNotRestored) {
		return 0, err
	}
	if out.json {
		out.asJSON("restored", r)
	} else {
		fmt.Fprintf(out.stdout, "restored %s: %d removed, %d written back, %d reset\n", r.Mark, r.Removed, r.Written, r.Reset)
	}
	if err != nil {
		for _, p := range r.NotRestored {
			fmt.Fprintf(out.stderr, "not restored: %s\n", quotePath(p))
		}
		if r.NotRestoredOmitted > 0 {
			fmt.Fprintf(out.stderr, "not restored: %d more\n", r.NotRestoredOmitted)
		}
		fmt.Fprintf(out.stderr, "relayctl restore: %s\n", r.Reason)
		return 1, nil
	}
	return 0, nil
}

// changes prints a change list as git status --short does: a letter, a
// space, the path (quoted when it holds what a terminal would not show
// as it is), and for a modified entry what differs.
func (p printer) changes(ch client.Changes) {
	for _, l := range []struct {
		letter  string
		entries []client.FileEntry
	}{{"A", ch.Added}, {"M", ch.Modified}, {"D", ch.Deleted}} {
		for _, e := range l.entries {
			line := l.letter + " " + quotePath(e.Path())
			if len(e.What) > 0 {
				line += "  (" + strings.Join(e.What, ", ") + ")"
			}
			fmt.Fprintln(p.stdout, line)
		}
	}
	if ch.Omitted > 0 {
		fmt.Fprintf(p.stderr, "relayctl changes: %d more changes not listed (relayd lists at most 10,000)\n", ch.Omitted)
	}
}

// quotePath is p as it is, or Go-quoted when it holds a byte that is not
// printable UTF-8, white space but the space, or a quote.
func quotePath(p string) string {
	for _, r := range p {
		if r == utf8RuneError || r == '"' || r == '\\' || r != ' ' && (unicode.IsSpace(r) || !unicode.IsPrint(r)) {
			return strconv.Quote(p)
		}
	}
	return p
}

const utf8RuneError = '\uFFFD'
