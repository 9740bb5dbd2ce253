package client

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Marks (protocol 4.9): the filesystem half of the boundary. Mark records
// the state of every entry under some paths and keeps the content of some
// subtrees in relayd's state directory; Changes lists what differs from
// it, found by a stat walk the agent cannot fake by setting times back;
// Restore puts the kept subtrees back; Unmark frees a mark. Recycle is a
// trial boundary that settles every survivor followed by a restore of
// every kept subtree: a used container back as marked. relayd lists
// "marks" in Ready.Extensions; an older one answers ErrUnknownKind.

const (
	kindMark     = "mark"
	kindMarked   = "marked"
	kindUnmark   = "unmark"
	kindUnmarked = "unmarked"
	kindChanges  = "changes"
	kindRestore  = "restore"
	kindRestored = "restored"
)

// MarkOptions says what a mark records: every entry under Paths (at
// least one, absolute) but Exclude, and the content of Keep (subtrees
// of Paths), which Restore can put back.
type MarkOptions struct {
	Paths   []string
	Exclude []string
	Keep    []string
}

// Marked is relayd's reply to Mark.
type Marked struct {
	Mark       string   `json:"mark"`
	Entries    int64    `json:"entries"`
	Bytes      int64    `json:"bytes"`     // regular files' sizes, summed
	KeptBytes  int64    `json:"keptBytes"` // the content kept, each content once
	DurationMs int64    `json:"durationMs"`
	Ignored    []string `json:"ignored,omitempty"`
}

// FileEntry is one entry of a change list.
type FileEntry struct {
	// Change is set in a boundary's Tampered list: "added",
	// "modified" or "deleted".
	Change string `json:"change,omitempty"`
	// PathText is the path when it is valid UTF-8; PathBase64 else.
	// Path() returns it either way.
	PathText     string     `json:"path,omitempty"`
	PathBase64   string     `json:"pathBase64,omitempty"`
	Type         string     `json:"type"` // file, dir, symlink, other
	Mode         string     `json:"mode"` // octal digits, "0644"
	UID          uint32     `json:"uid"`
	GID          uint32     `json:"gid"`
	Size         int64      `json:"size"`
	SHA256       string     `json:"sha256,omitempty"` // a file's content, hex
	Target       *string    `json:"target,omitempty"` // a symbolic link's
	TargetBase64 string     `json:"targetBase64,omitempty"`
	Was          *FileEntry `json:"was,omitempty"`  // a modified entry as the mark saw it
	What         []string   `json:"what,omitempty"` // what differs: content, type, mode, owner, target
}

// Path is the entry's path, decoded from PathBase64 when it is not UTF-8.
func (e FileEntry) Path() string {
	if e.PathBase64 != "" {
		if b, err := base64.StdEncoding.DecodeString(e.PathBase64); err == nil {
			return string(b)
		}
	}
	return e.PathText
}

// Changes is relayd's reply to Changes.
type Changes struct {
	Mark       string      `json:"mark"`
	Added      []FileEntry `json:"added"`
	Modified   []FileEntry `json:"modified"`
	Deleted    []FileEntry `json:"deleted"`
	Omitted    int64       `json:"omitted"` // changes past the 10,000 listed
	Entries    int64       `json:"entries"`
	DurationMs int64       `json:"durationMs"`
	Ignored    []string    `json:"ignored,omitempty"`
}

// Empty reports whether nothing differs from the mark.
func (c Changes) Empty() bool {
	return len(c.Added)+len(c.Modified)+len(c.Deleted) == 0 && c.Omitted == 0
}

// Restored is relayd's reply to Restore (and a boundary's Files.Restored).
type Restored struct {
	Mark               string   `json:"mark,omitempty"`
	Removed            int64    `json:"removed"`
	Written            int64    `json:"written"`
	Reset              int64    `json:"reset"`
	NotRestored        []string `json:"notRestored,omitempty"`
	NotRestoredOmitted int64    `json:"notRestoredOmitted,omitempty"`
	Reason             string   `json:"reason,omitempty"`
	DurationMs         int64    `json:"durationMs"`
	Ignored            []string `json:"ignored,omitempty"`
}

// ErrNotRestored is returned (wrapped, with the reason) by a Restore
// that could not finish; Restored.NotRestored names what was not put back.
var ErrNotRestored = errors.New("relayd: not everything was restored")

// BoundaryFiles asks a trial boundary for the filesystem half of it
// (VerifyOptions.Files): the changes under Protect since Mark, listed in
// Verified.Files.Tampered, and with Restore put back before the reply.
type BoundaryFiles struct {
	Mark    string   `json:"mark"`
	Protect []string `json:"protect"`
	Restore bool     `json:"restore"`
}

// FilesAtBoundary is a boundary's answer to BoundaryFiles.
type FilesAtBoundary struct {
	Mark     string      `json:"mark"`
	Tampered []FileEntry `json:"tampered"`
	Omitted  int64       `json:"omitted"`
	Restored *Restored   `json:"restored,omitempty"`
	Error    string      `json:"error,omitempty"`
}

// Mark records the mark name (protocol 4.9). A name that exists is
// refused (ErrBadRequest): Unmark it first.
func (c *Conn) Mark(ctx context.Context, name string, o MarkOptions) (Marked, error) {
	msg := map[string]any{"kind": kindMark, "name": name, "paths": o.Paths}
	if len(o.Exclude) > 0 {
		msg["exclude"] = o.Exclude
	}
	if len(o.Keep) > 0 {
		msg["keep"] = o.Keep
	}
	var m Marked
	err := c.roundTrip(ctx, msg, &call{want: kindMarked, into: &m}, c.cfg.bound(time.Duration(math.MaxInt64)))
	return m, err
}

// Unmark frees the mark name and the content only it kept. Like Mark, it
// waits as long as ctx (and MaxWait) allow: freeing a large mark's copies,
// or waiting for a changes or restore of it to end, can outlast
// ReplyTimeout.
func (c *Conn) Unmark(ctx context.Context, name string) error {
	var r struct{}
	return c.roundTrip(ctx, map[string]any{"kind": kindUnmark, "name": name}, &call{want: kindUnmarked, into: &r}, c.cfg.bound(time.Duration(math.MaxInt64)))
}

// Changes lists what differs from the mark under paths (none: all of
// it). It touches nothing.
func (c *Conn) Changes(ctx context.Context, mark string, paths ...string) (Changes, error) {
	msg := map[string]any{"kind": kindChanges, "mark": mark}
	if len(paths) > 0 {
		msg["paths"] = paths
	}
	var ch Changes
	err := c.roundTrip(ctx, msg, &call{want: kindChanges, into: &ch}, c.cfg.bound(time.Duration(math.MaxInt64)))
	return ch, err
}

// Restore puts paths (none: every kept subtree of the mark) back as
// marked. One that could not finish returns the reply and an error
// wrapping ErrNotRestored.
func (c *Conn) Restore(ctx context.Context, mark string, paths ...string) (Restored, error) {
	msg := map[string]any{"kind": kindRestore, "mark": mark}
	if len(paths) > 0 {
		msg["paths"] = paths
	}
	var r Restored
	if err := c.roundTrip(ctx, msg, &call{want: kindRestored, into: &r}, c.cfg.bound(time.Duration(math.MaxInt64))); err != nil {
		return r, err
	}
	return r, notRestored(r)
}

func notRestored(r Restored) error {
	if len(r.NotRestored) == 0 && r.NotRestoredOmitted == 0 {
		return nil
	}
	n := int64(len(r.NotRestored)) + r.NotRestoredOmitted
	return fmt.Errorf("%w: %d paths (%s): %s", ErrNotRestored, n, strings.Join(r.NotRestored[:min(len(r.NotRestored), 5)], ", "), r.Reason)
}

// Recycled is what Recycle did: the boundary, and the restore.
type Recycled struct {
	Verified Verified
	Restored Restored
}

// ErrNotRecycled is returned (wrapped) by a Recycle whose boundary could
// not confirm that every survivor is gone: nothing was restored.
var ErrNotRecycled = errors.New("relayd: the container could not be recycled")

// Recycle hands a used container to the next trial (protocol 4.9,
// "Recycling a container"): a trial boundary that settles every survivor
// (o.All and o.SettleSurvivors are set; o.Keep still keeps), then a
// restore of every kept subtree of mark. It returns ErrNotRecycled when
// the boundary is not quiescent, and an error wrapping ErrNotRestored
// when the restore could not finish; the replies carry the evidence.
func (c *Conn) Recycle(ctx context.Context, mark string, o VerifyOptions) (Recycled, error) {
	o.All, o.SettleSurvivors = true, true
	var r Recycled
	v, err := c.VerifyWith(ctx, o)
	r.Verified = v
	if err != nil {
		return r, err
	}
	if !v.Quiescent {
		return r, fmt.Errorf("%w: the boundary is not quiescent (a settlement lacked its evidence)", ErrNotRecycled)
	}
	r.Restored, err = c.Restore(ctx, mark)
	return r, err
}
