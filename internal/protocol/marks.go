package protocol

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// Marks (section 4.9): mark, unmark, changes, restore, verify's "files",
// and their replies. What a mark records and how changes and restore
// work is internal/marks'; this file checks the wire.

// MaxMarkPaths bounds each list of paths a mark request names.
const MaxMarkPaths = 256

// MaxMarkName bounds a mark's name.
const MaxMarkName = 64

// readsMark reports whether a message of kind k (mark, unmark, changes,
// restore) reads fieldNames[i].
func readsMark(k string, i int) bool {
	n := fieldNames[i]
	switch k {
	case "mark":
		return n == "name" || n == "paths" || n == "exclude" || n == "keep"
	case "unmark":
		return n == "name"
	}
	return n == "mark" || n == "paths" // changes, restore
}

// MarkRequest is a validated mark.
type MarkRequest struct {
	Name                 string
	Paths, Exclude, Keep []string
}

// Mark validates m as a mark: "name" a mark name, "paths" one or more
// absolute paths, "exclude" and "keep" absolute paths.
func (m *Message) Mark() (*MarkRequest, *Error) {
	r := &MarkRequest{}
	var e *Error
	if r.Name, e = m.markName("mark", "name"); e != nil {
		return nil, e
	}
	if r.Paths, e = m.pathList("mark", "paths", true); e != nil {
		return nil, e
	}
	if r.Exclude, e = m.pathList("mark", "exclude", false); e != nil {
		return nil, e
	}
	if r.Keep, e = m.pathList("mark", "keep", false); e != nil {
		return nil, e
	}
	return r, nil
}

// Unmark validates m as an unmark and returns the mark's name.
func (m *Message) Unmark() (string, *Error) { return m.markName("unmark", "name") }

// MarkUse is a validated changes or restore: the mark and the paths that
// narrow it (nil: all of it).
type MarkUse struct {
	Mark  string
	Paths []string
}

// MarkUse validates m as a changes or a restore (kind k).
func (m *Message) MarkUse(k string) (*MarkUse, *Error) {
	r := &MarkUse{}
	var e *Error
	if r.Mark, e = m.markName(k, "mark"); e != nil {
		return nil, e
	}
	if r.Paths, e = m.pathList(k, "paths", false); e != nil {
		return nil, e
	}
	return r, nil
}

func (m *Message) markName(kind, field string) (string, *Error) {
	raw, ok := m.optional(field)
	if !ok {
		return "", newError(CatBadRequest, `%s: %q is required: the mark's name`, kind, field)
	}
	s, isString := decodeString(raw)
	if !isString || !validMarkName(s) {
		return "", newError(CatBadRequest, `%s: %q must be 1 to %d letters, digits, "_", "." or "-", not starting with "." or "-"`, kind, field, MaxMarkName)
	}
	return s, nil
}

func validMarkName(s string) bool {
	if s == "" || len(s) > MaxMarkName || s[0] == '.' || s[0] == '-' {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// pathList reads field as an array of absolute paths without NUL or "..".
func (m *Message) pathList(kind, field string, required bool) ([]string, *Error) {
	raw, ok := m.optional(field)
	if !ok {
		if required {
			return nil, newError(CatBadRequest, `%s: %q is required: an array of absolute paths`, kind, field)
		}
		return nil, nil
	}
	return decodePathList(kind, field, raw, required)
}

func decodePathList(kind, field string, raw json.RawMessage, required bool) ([]string, *Error) {
	var items []json.RawMessage
	if jsonKind(raw) != kindArray || json.Unmarshal(raw, &items) != nil || len(items) > MaxMarkPaths {
		return nil, newError(CatBadRequest, `%s: %q must be an array of at most %d absolute paths`, kind, field, MaxMarkPaths)
	}
	if required && len(items) == 0 {
		return nil, newError(CatBadRequest, `%s: %q must name at least one absolute path`, kind, field)
	}
	out := make([]string, 0, len(items))
	for i, it := range items {
		s, ok := decodeString(it)
		switch {
		case !ok:
			return nil, newError(CatBadRequest, `%s: %q[%d] must be a string`, kind, field, i)
		case !strings.HasPrefix(s, "/"):
			return nil, newError(CatBadRequest, `%s: %q[%d] must be an absolute path`, kind, field, i)
		case strings.IndexByte(s, 0) >= 0:
			return nil, newError(CatBadRequest, `%s: %q[%d] holds a NUL byte`, kind, field, i)
		case strings.Contains("/"+s+"/", "/../"):
			return nil, newError(CatBadRequest, `%s: %q[%d] holds ".."`, kind, field, i)
		}
		out = append(out, s)
	}
	return out, nil
}

// VerifyFiles is verify's "files" (section 4.9): the mark, the protected
// paths whose changes are listed as tampered, and whether they are
// restored before the reply.
type VerifyFiles struct {
	Mark    string
	Protect []string
	Restore bool
}

func decodeVerifyFiles(raw json.RawMessage) (*VerifyFiles, *Error) {
	const form = `verify: "files" must be an object {"mark":NAME,"protect":[absolute paths],"restore":true|false}`
	var fields map[string]json.RawMessage
	if jsonKind(raw) != kindObject || json.Unmarshal(raw, &fields) != nil {
		return nil, newError(CatBadRequest, form)
	}
	f := &VerifyFiles{}
	for k, v := range fields {
		switch k {
		case "mark":
			s, ok := decodeString(v)
			if !ok || !validMarkName(s) {
				return nil, newError(CatBadRequest, `verify: "files" "mark" must be a mark's name`)
			}
			f.Mark = s
		case "protect":
			ps, err := decodePathList("verify", `files" "protect`, v, true)
			if err != nil {
				return nil, err
			}
			f.Protect = ps
		case "restore":
			if jsonKind(v) != kindBool || json.Unmarshal(v, &f.Restore) != nil {
				return nil, newError(CatBadRequest, `verify: "files" "restore" must be true or false`)
			}
		default:
			return nil, newError(CatBadRequest, `verify: "files" holds %q; `+form[len(`verify: "files" `):], safeField(k))
		}
	}
	if f.Mark == "" {
		return nil, newError(CatBadRequest, `verify: "files" lacks "mark"`)
	}
	if f.Protect == nil {
		return nil, newError(CatBadRequest, `verify: "files" lacks "protect": the paths whose changes are listed as tampered`)
	}
	return f, nil
}

func safeField(k string) string {
	if len(k) > 40 {
		k = k[:40]
	}
	return k
}

// Marked is the reply to mark.
type Marked struct {
	Token      string          `json:"token,omitempty"`
	Kind       string          `json:"kind"` // "marked"
	ID         json.RawMessage `json:"id,omitempty"`
	Mark       string          `json:"mark"`
	Entries    int64           `json:"entries"`
	Bytes      int64           `json:"bytes"`
	KeptBytes  int64           `json:"keptBytes"`
	DurationMs int64           `json:"durationMs"`
	Ignored    []string        `json:"ignored,omitempty"`
}

// Unmarked is the reply to unmark.
type Unmarked struct {
	Token   string          `json:"token,omitempty"`
	Kind    string          `json:"kind"` // "unmarked"
	ID      json.RawMessage `json:"id,omitempty"`
	Mark    string          `json:"mark"`
	Ignored []string        `json:"ignored,omitempty"`
}

// FileEntry is one entry of a change list (section 4.9). A path or link
// target that is not valid UTF-8 comes in PathBase64 (TargetBase64)
// instead.
type FileEntry struct {
	Change       string     `json:"change,omitempty"` // in a boundary's tampered list: added, modified or deleted
	Path         string     `json:"path,omitempty"`
	PathBase64   string     `json:"pathBase64,omitempty"`
	Type         string     `json:"type"` // file, dir, symlink, other
	Mode         string     `json:"mode"` // octal digits, "0644"
	UID          uint32     `json:"uid"`
	GID          uint32     `json:"gid"`
	Size         int64      `json:"size"`
	SHA256       string     `json:"sha256,omitempty"` // a file's, "sha256:HEX"
	Target       *string    `json:"target,omitempty"` // a symbolic link's
	TargetBase64 string     `json:"targetBase64,omitempty"`
	Was          *FileEntry `json:"was,omitempty"`
	What         []string   `json:"what,omitempty"`
}

// ChangesReply is the reply to changes.
type ChangesReply struct {
	Token      string          `json:"token,omitempty"`
	Kind       string          `json:"kind"` // "changes"
	ID         json.RawMessage `json:"id,omitempty"`
	Mark       string          `json:"mark"`
	Added      []FileEntry     `json:"added"`
	Modified   []FileEntry     `json:"modified"`
	Deleted    []FileEntry     `json:"deleted"`
	Omitted    int64           `json:"omitted"`
	Entries    int64           `json:"entries"`
	DurationMs int64           `json:"durationMs"`
	Ignored    []string        `json:"ignored,omitempty"`
}

// Restored is the reply to restore; NotRestored names what a restore
// that could not finish left as it was, and Reason says why.
type Restored struct {
	Token              string          `json:"token,omitempty"`
	Kind               string          `json:"kind,omitempty"` // "restored"; empty inside a boundary's files
	ID                 json.RawMessage `json:"id,omitempty"`
	Mark               string          `json:"mark,omitempty"`
	Removed            int64           `json:"removed"`
	Written            int64           `json:"written"`
	Reset              int64           `json:"reset"`
	NotRestored        []string        `json:"notRestored,omitempty"`
	NotRestoredOmitted int64           `json:"notRestoredOmitted,omitempty"`
	Reason             string          `json:"reason,omitempty"`
	DurationMs         int64           `json:"durationMs"`
	Ignored            []string        `json:"ignored,omitempty"`
}

// BoundaryFiles is a trial boundary's "files" (section 4.9): the changes
// under protect, each with its change, and what restore did.
type BoundaryFiles struct {
	Mark     string      `json:"mark"`
	Tampered []FileEntry `json:"tampered"`
	Omitted  int64       `json:"omitted"`
	Restored *Restored   `json:"restored,omitempty"`
	// Error says why the files could not be looked at (the mark is
	// gone, the walk failed); the processes' evidence stands.
	Error string `json:"error,omitempty"`
}

// PathField sets the path of e: Path when p is valid UTF-8, else PathBase64.
func (e *FileEntry) PathField(p string, enc func([]byte) string) {
	if utf8.ValidString(p) {
		e.Path = p
	} else {
		e.PathBase64 = enc([]byte(p))
	}
}
