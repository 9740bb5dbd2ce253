package protocol

import (
	"strings"
	"unicode/utf8"
)

// Bounds of the "ignored" list of a reply (section 4.6, "Unknown fields are
// named"): at most MaxIgnored names, each cut to at most MaxIgnoredName
// bytes, so that a request of a million unknown fields gets a short reply.
const (
	MaxIgnored     = 64
	MaxIgnoredName = 256
)

// Extensions are what this relayd serves beyond section 4.2's contract, as
// ready's "extensions" lists them (section 4.6): the execute fields and
// messages of section 4.5 by name ("detach" is detachMs with attach), and
// "ignored" for the ignored list itself, so that a client can tell a reply
// without it from an older relayd's, and "trial" for verify's trial
// boundary (section 4.6), "status" for the status message (4.6, "Looking
// without touching"), "pty" for an execute's terminal and resize (4.7),
// "body" for put's and get's bulk bodies (4.6, "Bulk bodies") and "tree"
// for their "format":"tar" (4.6, "Trees"), "marks" for mark, unmark,
// changes, restore and verify's "files" (4.9).
var Extensions = []string{"captureStderr", "stream", "onExit", "detach", "ignored", "trial", "stdin", "user", "files", "status", "pty", "body", "tree", "session", "marks"}

// reads reports whether a message of kind k reads fieldNames[i]: every
// kind reads kind, token and id; execute and attach read their own. A
// kind relayd does not know reads nothing else.
func reads(k string, i int) bool {
	switch {
	case i < commonFields:
		return true
	case k == "execute":
		return i >= executeFrom && i < executeTo || fieldNames[i] == "pty" || readsSessionExecute(i)
	case k == "resize":
		return readsResize(i)
	case k == "open", k == "close", k == "read":
		return readsSession(k, i)
	case k == "attach":
		return i >= attachFrom && i < attachTo
	case k == "stdin":
		return i >= stdinFrom && i < stdinTo || fieldNames[i] == "session"
	case k == "verify":
		return i >= verifyFrom && i < verifyTo || fieldNames[i] == "files"
	case k == "mark", k == "unmark", k == "changes", k == "restore":
		return readsMark(k, i)
	case k == "put", k == "get":
		return readsFile(k, i)
	}
	return false
}

// Ignored returns the top-level fields of m that relayd does not read for
// its kind, for the reply's "ignored": in the order they first appear,
// each name once (keys unescaped and compared case-exact, as Decode
// compares them), a name longer than MaxIgnoredName bytes cut there at a
// character boundary, and at most MaxIgnored names. It is nil when relayd
// reads every field. A field of another kind counts as ignored ("command"
// in a verify). Ignored walks the line again: it is for a request that
// authenticated, and costs nothing when Decode saw no such field.
func (m *Message) Ignored() []string { return m.ignoredAs(m.Kind) }

// ignoredAs is Ignored for a message of kind k, whatever its "kind" says
// (Execute reads a message as an execute).
func (m *Message) ignoredAs(k string) []string {
	if !m.unknown && !m.readsOtherKind(k) {
		return nil
	}
	var names []string
	seen := map[string]bool{}
	walkObject(m.line, func(key, _ []byte) {
		if len(names) == MaxIgnored {
			return
		}
		if i := fieldIndex(key); i >= 0 && reads(k, i) {
			return
		}
		if plainKey(key) && len(key) <= MaxIgnoredName && seen[string(key)] {
			return // a repeat, without building its name again
		}
		name, ok := unquote(key)
		if !ok {
			return // not in a line Decode accepted
		}
		name = cutName(name)
		if seen[name] {
			return
		}
		seen[name] = true
		names = append(names, name)
	})
	return names
}

// readsOtherKind reports whether m holds a field that relayd reads for
// another kind than k.
func (m *Message) readsOtherKind(k string) bool {
	for i := commonFields; i < len(fieldNames); i++ {
		if m.fields[i] != nil && !reads(k, i) {
			return true
		}
	}
	return false
}

// plainKey reports whether the raw key needs no unescaping: printable
// ASCII without a backslash.
func plainKey(key []byte) bool {
	for _, c := range key {
		if c == '\\' || c < ' ' || c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// cutName cuts name to at most MaxIgnoredName bytes without splitting a
// UTF-8 sequence.
func cutName(name string) string {
	if len(name) <= MaxIgnoredName {
		return name
	}
	cut := MaxIgnoredName
	for cut > 0 && !utf8.RuneStart(name[cut]) {
		cut--
	}
	return name[:cut]
}

// CaseVariant returns a CatBadRequest naming the first top-level field of
// m whose name equals, but for letter case, a field relayd reads for m's
// kind (section 4.6, "Unknown fields are named": "timeoutMS" or
// "TimeoutMs" in an execute), so that a misspelled deadline never runs as
// no deadline. Letter case is Unicode simple folding (strings.EqualFold).
// The message names both fields, never a value. It is nil when there is
// none, and costs nothing when Decode saw no unknown field.
func (m *Message) CaseVariant() *Error {
	if !m.unknown {
		return nil
	}
	k := m.Kind
	var found *Error
	walkObject(m.line, func(key, _ []byte) {
		// A name that differs only in case holds at most three bytes per
		// letter (U+212A, the Kelvin sign, folds to k), each at most six
		// escaped: longer keys are not looked at.
		if found != nil || len(key) > 6*3*maxFieldName || fieldIndex(key) >= 0 {
			return
		}
		name, ok := unquote(key)
		if !ok {
			return
		}
		for i, n := range fieldNames {
			if reads(k, i) && strings.EqualFold(name, n) {
				found = newError(CatBadRequest,
					`%s: field %q differs from %q only in letter case: field names are case-exact, so it would be ignored; send %q`,
					kindForError(k), name, n, n)
				return
			}
		}
	})
	return found
}

// kindForError is how an error message opens: the message's kind when
// relayd knows it, else "message".
func kindForError(k string) string {
	switch k {
	case "ready", "execute", "verify", "attach", "stdin", "put", "get", "status", "resize":
		return k
	}
	return "message"
}
