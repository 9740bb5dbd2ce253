package protocol

import (
	"encoding/base64"
	"encoding/json"
	"path"
	"strconv"
	"strings"
)

// The file transfers of section 4.6 ("Files"): put and get, their
// validation, and the stored and content replies.

// readsFile reports whether a put or get (k) reads fieldNames[i].
func readsFile(k string, i int) bool {
	switch fieldNames[i] {
	case "path", "user", "body", "format", "digest":
		return true
	case "exclude":
		return k == "get"
	case "replace", "owners", "links":
		return k == "put"
	case "data", "more", "mode", "parents":
		return k == "put"
	}
	return false
}

// DefaultFileMode is the mode of a file put without "mode".
const DefaultFileMode = 0o644

// Put is one validated put message: the first of a transfer, or a later
// chunk. Data holds the chunk's bytes, decoded into the buffer given to
// Message.Put.
type Put struct {
	Path    string // "" when absent (allowed on a later chunk only)
	Data    []byte // the decoded chunk; empty when absent
	More    bool   // more chunks follow
	Mode    uint32 // DefaultFileMode when absent; HasMode says whether it was given
	HasMode bool
	User    string // "" when absent
	Parents bool
	// Body is the length of the raw body that follows the put's line
	// (section 4.6, "Bulk bodies"); -1 when the put has no "body".
	Body int64
	// Tar: "format":"tar", the bytes are a tar stream unpacked into the
	// directory Path (section 4.6, "Trees"), with Replace and Owners.
	Tar, Replace, Owners bool
	// KeepLinks: "links":"keep", every symbolic link of the tree is kept
	// as it is, whatever its target (section 4.6, "Trees").
	KeepLinks bool
	// NoDigest: "digest":"none", no sha256 is computed and stored
	// carries none (section 4.6, "Bulk bodies").
	NoDigest bool

	Ignored []string // the request's unknown top-level fields (section 4.6)
}

// Put validates m as a put (section 4.6) and decodes its "data" into buf,
// reusing its storage when it is large enough, so that a transfer holds
// one chunk at a time whatever the file's size. Every failure is a
// CatBadRequest whose message starts with "put: " and names the field:
// "path" a string without NUL (required unless later is true: a later
// chunk may leave it out), "data" standard base64 (padded), "more" and
// "parents" booleans, "mode" a string of 1 to 4 octal digits (at most
// 07777), "user" a non-empty string without NUL.
func (m *Message) Put(buf []byte, later bool) (*Put, *Error) {
	p := &Put{Mode: DefaultFileMode, Body: -1}
	var e *Error
	if n, present := m.PutBody(); present {
		switch _, data := m.optional("data"); {
		case n < 0:
			return nil, newError(CatBadRequest, `put: "body" must be a whole number of bytes from 0 up: the length of the raw bytes that follow the line`)
		case data:
			return nil, newError(CatBadRequest, `put: "body" and "data" exclude each other: a put carries its bytes in one or the other`)
		case later:
			return nil, newError(CatBadRequest, `put: "body" cannot continue a transfer of "data" chunks`)
		}
		p.Body, later = n, false // a body is a whole transfer: it names its path
	}
	if p.Path, e = m.filePath("put", !later); e != nil {
		return nil, e
	}
	if raw, present := m.optional("data"); present {
		s, ok := decodeString(raw)
		if !ok {
			return nil, newError(CatBadRequest, `put: "data" must be a string of base64`)
		}
		need := base64.StdEncoding.DecodedLen(len(s))
		if cap(buf) < need {
			buf = make([]byte, need)
		}
		n, err := base64.StdEncoding.Decode(buf[:need], []byte(s))
		if err != nil {
			return nil, newError(CatBadRequest, `put: "data" is not valid base64 (standard alphabet, padded): %v`, err)
		}
		p.Data = buf[:n]
	}
	if p.More, e = m.fileBool("put", "more"); e != nil {
		return nil, e
	}
	if p.Parents, e = m.fileBool("put", "parents"); e != nil {
		return nil, e
	}
	if p.Body >= 0 && p.More {
		return nil, newError(CatBadRequest, `put: "body" and "more" exclude each other: a body is the whole file`)
	}
	if p.Tar, e = m.fileFormat("put"); e != nil {
		return nil, e
	}
	if p.Replace, e = m.fileBool("put", "replace"); e != nil {
		return nil, e
	}
	if p.Owners, e = m.fileBool("put", "owners"); e != nil {
		return nil, e
	}
	if raw, present := m.optional("links"); present {
		if s, ok := decodeString(raw); !ok || s != "keep" {
			return nil, newError(CatBadRequest, `put: "links" must be "keep" (every symbolic link of the tree kept as it is) or absent (a link that leads outside the directory is refused)`)
		}
		p.KeepLinks = true
	}
	if !p.Tar && (p.Replace || p.Owners || p.KeepLinks) {
		return nil, newError(CatBadRequest, `put: "replace", "owners" and "links" go with "format":"tar" only`)
	}
	if raw, present := m.optional("mode"); present {
		s, ok := decodeString(raw)
		mode, good := parseMode(s)
		if !ok || !good {
			return nil, newError(CatBadRequest, `put: "mode" must be a string of octal digits from "0" to "07777", such as "0755"`)
		}
		p.Mode, p.HasMode = mode, true
	}
	if p.User, e = m.fileUser("put"); e != nil {
		return nil, e
	}
	if p.NoDigest, e = m.fileDigest("put"); e != nil {
		return nil, e
	}
	p.Ignored = m.ignoredAs("put")
	return p, nil
}

// PutBody reports whether m, a put, has "body" (section 4.6, "Bulk
// bodies") and its value: the count of raw bytes that follow the line,
// or -1 when it is not a whole number from 0 to 1<<62. The connection's
// reader (internal/session) needs it before anything else to find the next line.
func (m *Message) PutBody() (n int64, present bool) {
	if m.Kind != "put" {
		return 0, false
	}
	raw, present := m.optional("body")
	if !present {
		return 0, false
	}
	if jsonKind(raw) != kindNumber {
		return -1, true
	}
	v, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || v < 0 || v > 1<<62 {
		return -1, true
	}
	return v, true
}

// PutHead reports, without validating the rest, whether a put names a
// "path" (it starts a transfer) and whether "more" is true (chunks follow):
// what relayd needs to skip the rest of a refused transfer.
func (m *Message) PutHead() (named, more bool) {
	_, named = m.optional("path")
	more, _ = m.fileBool("put", "more")
	return named, more
}

// Get is a validated get message (section 4.6).
type Get struct {
	Path    string
	User    string   // "" when absent
	Body    bool     // answer with one content line and a raw body (section 4.6, "Bulk bodies")
	Tar     bool     // "format":"tar": pack the directory Path (section 4.6, "Trees")
	Exclude []string // with Tar: globs of what is left out
	// NoDigest: "digest":"none", no sha256 is computed and neither the
	// last content chunk nor sent carries one (section 4.6, "Bulk bodies").
	NoDigest bool
	Ignored  []string // the request's unknown top-level fields (section 4.6)
}

// Get validates m as a get: "path" a non-empty string without NUL, "user"
// as for Put. A failure is a CatBadRequest naming the field.
func (m *Message) Get() (*Get, *Error) {
	g := &Get{}
	var e *Error
	if g.Path, e = m.filePath("get", true); e != nil {
		return nil, e
	}
	if g.User, e = m.fileUser("get"); e != nil {
		return nil, e
	}
	if g.Body, e = m.fileBool("get", "body"); e != nil {
		return nil, e
	}
	if g.Tar, e = m.fileFormat("get"); e != nil {
		return nil, e
	}
	if g.NoDigest, e = m.fileDigest("get"); e != nil {
		return nil, e
	}
	if raw, present := m.optional("exclude"); present {
		if !g.Tar {
			return nil, newError(CatBadRequest, `get: "exclude" goes with "format":"tar" only`)
		}
		if json.Unmarshal(raw, &g.Exclude) != nil || jsonKind(raw) != kindArray || len(g.Exclude) > MaxExclude {
			return nil, newError(CatBadRequest, `get: "exclude" must be an array of at most %d glob strings`, MaxExclude)
		}
		for _, x := range g.Exclude {
			if _, err := path.Match(x, ""); err != nil || x == "" || len(x) > 4096 {
				return nil, newError(CatBadRequest, `get: "exclude": %q is not a glob (path.Match syntax, 1 to 4096 bytes)`, x)
			}
		}
	}
	g.Ignored = m.ignoredAs("get")
	return g, nil
}

// DigestNone and DigestSHA256 are the values of a put's or get's "digest"
// (section 4.6, "Bulk bodies"): no digest, or the default sha256 named.
const (
	DigestNone   = "none"
	DigestSHA256 = "sha256"
)

// fileDigest reads "digest": absent or "sha256" (a sha256 of the whole
// file, the default) or "none" (no digest on either side). It reports
// whether it was "none".
func (m *Message) fileDigest(kind string) (bool, *Error) {
	raw, present := m.optional("digest")
	if !present {
		return false, nil
	}
	switch s, ok := decodeString(raw); {
	case ok && s == DigestNone:
		return true, nil
	case ok && s == DigestSHA256:
		return false, nil
	}
	return false, newError(CatBadRequest, `%s: "digest" must be "none" (no digest on either side) or "sha256" (the default)`, kind)
}

// MaxExclude bounds a tree get's "exclude" list.
const MaxExclude = 256

// fileFormat reads "format": absent (a file) or "tar" (a tree).
func (m *Message) fileFormat(kind string) (bool, *Error) {
	raw, present := m.optional("format")
	if !present {
		return false, nil
	}
	if s, ok := decodeString(raw); !ok || s != "tar" {
		return false, newError(CatBadRequest, `%s: "format" must be "tar" (a tree) or absent (a file)`, kind)
	}
	return true, nil
}

func (m *Message) filePath(kind string, required bool) (string, *Error) {
	raw, present := m.optional("path")
	if !present {
		if required {
			return "", newError(CatBadRequest, `%s: "path" is required: the file's path, absolute or relative to the workspace`, kind)
		}
		return "", nil
	}
	s, ok := decodeString(raw)
	if !ok || s == "" {
		return "", newError(CatBadRequest, `%s: "path" must be a non-empty string`, kind)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return "", newError(CatBadRequest, `%s: "path" holds a NUL byte`, kind)
	}
	return s, nil
}

func (m *Message) fileUser(kind string) (string, *Error) {
	raw, present := m.optional("user")
	if !present {
		return "", nil
	}
	s, ok := decodeString(raw)
	if !ok || s == "" || strings.IndexByte(s, 0) >= 0 {
		return "", newError(CatBadRequest, `%s: "user" must be a user name or uid, optionally with ":group"`, kind)
	}
	return s, nil
}

func (m *Message) fileBool(kind, name string) (bool, *Error) {
	raw, present := m.optional(name)
	if !present {
		return false, nil
	}
	var v bool
	if jsonKind(raw) != kindBool || json.Unmarshal(raw, &v) != nil {
		return false, newError(CatBadRequest, `%s: %q must be true or false`, kind, name)
	}
	return v, nil
}

// parseMode reads 1 to 5 octal digits (a leading 0 allowed) up to 07777.
func parseMode(s string) (uint32, bool) {
	if s == "" || len(s) > 5 {
		return 0, false
	}
	var v uint32
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '7' {
			return 0, false
		}
		v = v*8 + uint32(c-'0')
	}
	return v, v <= 0o7777
}

// Stored is the reply to the last put of a transfer (section 4.6).
type Stored struct {
	Token   string          `json:"token,omitempty"`
	Kind    string          `json:"kind"` // "stored"
	ID      json.RawMessage `json:"id,omitempty"`
	Path    string          `json:"path"` // absolute
	Bytes   int64           `json:"bytes"`
	Sha256  string          `json:"sha256,omitempty"`  // lower-case hex of the whole file; none with "digest":"none"
	Files   *int64          `json:"files,omitempty"`   // a tree's members written (section 4.6, "Trees")
	Refused []string        `json:"refused,omitempty"` // a tree's members refused, each "name: why"
	Ignored []string        `json:"ignored,omitempty"`
}

// Content is one chunk of the reply to a get (section 4.6). Data is
// base64 in JSON (encoding/json's []byte); the last chunk has More false
// and carries Bytes and Sha256 of the whole file.
type Content struct {
	Token   string          `json:"token,omitempty"`
	Kind    string          `json:"kind"` // "content"
	ID      json.RawMessage `json:"id,omitempty"`
	Data    []byte          `json:"data"` // never nil: "" for an empty chunk
	More    bool            `json:"more,omitempty"`
	Bytes   *int64          `json:"bytes,omitempty"`
	Sha256  string          `json:"sha256,omitempty"`
	Files   *int64          `json:"files,omitempty"`   // a tree's members packed
	Refused []string        `json:"refused,omitempty"` // a tree's members left out, each "name: why"
	Ignored []string        `json:"ignored,omitempty"`
}

// ContentBody is the reply to a get with "body":true (section 4.6, "Bulk
// bodies"): the Body raw bytes of the file follow its line, and then a
// Sent line (or an error). It carries no digest: that is computed while
// the bytes are sent.
type ContentBody struct {
	Token   string          `json:"token,omitempty"`
	Kind    string          `json:"kind"` // "content"
	ID      json.RawMessage `json:"id,omitempty"`
	Bytes   int64           `json:"bytes"`
	Body    int64           `json:"body"`
	Files   *int64          `json:"files,omitempty"`
	Refused []string        `json:"refused,omitempty"`
	Ignored []string        `json:"ignored,omitempty"`
}

// Sent is the line after a get's raw body (section 4.6, "Bulk bodies"):
// the sha256 of the bytes sent, computed as they were sent; none with
// "digest":"none".
type Sent struct {
	Token   string          `json:"token,omitempty"`
	Kind    string          `json:"kind"` // "sent"
	ID      json.RawMessage `json:"id,omitempty"`
	Sha256  string          `json:"sha256,omitempty"`
	Ignored []string        `json:"ignored,omitempty"`
}
