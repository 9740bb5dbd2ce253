package session

import (
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/relayd/relayd/internal/marks"
	"github.com/relayd/relayd/internal/protocol"
)

// Marks, changes and restore (protocol 4.9): what internal/marks does,
// answered on the connection that asked. A walk runs on this
// connection's loop, as a tree's get does: other connections are served
// meanwhile, and a second use of a mark that is being taken or restored
// is answered busy.

// marksExtension says whether ready lists "marks": only with a store.
func (s *Server) marksExtension(ext []string) []string {
	if s.cfg.Marks != nil {
		return ext
	}
	return slices.DeleteFunc(slices.Clone(ext), func(e string) bool { return e == "marks" })
}

// markStore is the store, or refuses the request saying why there is none.
func (cn *conn) markStore(rq request, kind string) *marks.Store {
	if st := cn.srv.cfg.Marks; st != nil {
		return st
	}
	why := cn.srv.cfg.MarksUnavailable
	if why == "" {
		why = "relayd has no usable --state-dir"
	}
	cn.refuse(rq.id, rq.ignored, protocol.CatBadRequest, kind+": marks are not served: "+why)
	return nil
}

// refuseMarks answers a failure of the store with its category.
func (cn *conn) refuseMarks(rq request, kind string, err error) {
	var br *marks.BadRequest
	var be *marks.BudgetError
	switch {
	case errors.As(err, &be):
		cn.refuse(rq.id, rq.ignored, protocol.CatBadRequest, be.Error())
	case errors.As(err, &br):
		cn.refuse(rq.id, rq.ignored, protocol.CatBadRequest, kind+": "+br.Msg)
	case errors.Is(err, marks.ErrNotFound):
		cn.refuse(rq.id, rq.ignored, protocol.CatNotFound, kind+": no such mark (mark it first, or it was unmarked)")
	case errors.Is(err, marks.ErrBusy):
		cn.refuse(rq.id, rq.ignored, protocol.CatBusy, kind+": the mark is being taken, compared or restored by another request; try again once it is answered")
	case errors.Is(err, marks.ErrStopped):
		cn.refuse(rq.id, rq.ignored, protocol.CatShuttingDown, kind+": relayd is shutting down")
	default:
		cn.log.Warn().Err(err).Str("kind", kind).Msg("marks: the request failed")
		cn.refuse(rq.id, rq.ignored, protocol.CatBadRequest, kind+": "+err.Error())
	}
}

// marks answers mark, unmark, changes and restore.
func (cn *conn) marks(msg *protocol.Message, ignored []string) {
	switch msg.Kind {
	case "mark":
		cn.mark(msg, ignored)
	case "unmark":
		cn.unmark(msg, ignored)
	case "changes":
		cn.changes(msg, ignored)
	default:
		cn.restore(msg, ignored)
	}
}

func (cn *conn) mark(msg *protocol.Message, ignored []string) {
	rq := request{msg.ID, ignored}
	r, perr := msg.Mark()
	if perr != nil {
		cn.refuse(msg.ID, ignored, perr.Category, perr.Message)
		return
	}
	st := cn.markStore(rq, "mark")
	if st == nil {
		return
	}
	m, err := st.Mark(marks.Request{Name: r.Name, Paths: r.Paths, Exclude: r.Exclude, Keep: r.Keep}, cn.srv.stopping)
	if err != nil {
		cn.refuseMarks(rq, "mark", err)
		return
	}
	cn.log.Info().Str("mark", m.Name).Int64("entries", m.Entries).Int64("keptBytes", m.KeptBytes).
		Dur("duration", m.Duration).Msg("marked")
	cn.write(protocol.Marked{Token: cn.token(), Kind: "marked", ID: msg.ID, Mark: m.Name, Entries: m.Entries,
		Bytes: m.Bytes, KeptBytes: m.KeptBytes, DurationMs: m.Duration.Milliseconds(), Ignored: ignored})
}

func (cn *conn) unmark(msg *protocol.Message, ignored []string) {
	rq := request{msg.ID, ignored}
	name, perr := msg.Unmark()
	if perr != nil {
		cn.refuse(msg.ID, ignored, perr.Category, perr.Message)
		return
	}
	st := cn.markStore(rq, "unmark")
	if st == nil {
		return
	}
	if err := st.Unmark(name); err != nil {
		cn.refuseMarks(rq, "unmark", err)
		return
	}
	cn.log.Info().Str("mark", name).Msg("unmarked")
	cn.write(protocol.Unmarked{Token: cn.token(), Kind: "unmarked", ID: msg.ID, Mark: name, Ignored: ignored})
}

func (cn *conn) changes(msg *protocol.Message, ignored []string) {
	rq := request{msg.ID, ignored}
	r, perr := msg.MarkUse("changes")
	if perr != nil {
		cn.refuse(msg.ID, ignored, perr.Category, perr.Message)
		return
	}
	st := cn.markStore(rq, "changes")
	if st == nil {
		return
	}
	c, err := st.Changes(r.Mark, r.Paths, 0, cn.srv.stopping)
	if err != nil {
		cn.refuseMarks(rq, "changes", err)
		return
	}
	reply := protocol.ChangesReply{Token: cn.token(), Kind: "changes", ID: msg.ID, Mark: r.Mark,
		Added: fileEntries(c.Added, ""), Modified: fileEntries(c.Modified, ""), Deleted: fileEntries(c.Deleted, ""),
		Omitted: c.Omitted, Entries: c.Entries, DurationMs: c.Duration.Milliseconds(), Ignored: ignored}
	cn.write(reply)
}

func (cn *conn) restore(msg *protocol.Message, ignored []string) {
	rq := request{msg.ID, ignored}
	r, perr := msg.MarkUse("restore")
	if perr != nil {
		cn.refuse(msg.ID, ignored, perr.Category, perr.Message)
		return
	}
	st := cn.markStore(rq, "restore")
	if st == nil {
		return
	}
	began := time.Now()
	res, err := st.Restore(r.Mark, r.Paths, false)
	if err != nil {
		cn.refuseMarks(rq, "restore", err)
		return
	}
	out := restoredReply(res, time.Since(began))
	out.Token, out.Kind, out.ID, out.Ignored = cn.token(), "restored", msg.ID, ignored
	cn.logRestore(res)
	cn.write(out)
}

func (cn *conn) logRestore(res *marks.Restored) {
	ev := cn.log.Info()
	if len(res.NotRestored) > 0 {
		ev = cn.log.Warn().Int("notRestored", len(res.NotRestored)).Str("reason", res.Reason)
	}
	ev.Str("mark", res.Mark).Int64("removed", res.Removed).Int64("written", res.Written).Int64("reset", res.Reset).Msg("restored")
}

func restoredReply(res *marks.Restored, d time.Duration) protocol.Restored {
	return protocol.Restored{Mark: res.Mark, Removed: res.Removed, Written: res.Written, Reset: res.Reset,
		NotRestored: res.NotRestored, NotRestoredOmitted: res.NotRestoredOmitted, Reason: res.Reason, DurationMs: d.Milliseconds()}
}

// fileEntries is a change list on the wire; change, when not empty,
// names the list (a boundary's tampered).
func fileEntries(ls []marks.Listed, change string) []protocol.FileEntry {
	out := make([]protocol.FileEntry, 0, len(ls))
	for _, l := range ls {
		e := fileEntry(&l.Entry, true)
		e.Change = change
		if l.Was != nil {
			was := fileEntry(l.Was, false)
			e.Was, e.What = &was, l.What
		}
		out = append(out, e)
	}
	return out
}

func fileEntry(m *marks.Entry, withPath bool) protocol.FileEntry {
	e := protocol.FileEntry{Type: m.Type(), Mode: fmt.Sprintf("%04o", m.Mode&0o7777), UID: m.UID, GID: m.GID, Size: m.Size}
	if withPath {
		e.PathField(m.Path, base64.StdEncoding.EncodeToString)
	}
	if m.Hashed && m.Type() == "file" {
		e.SHA256 = fmt.Sprintf("%x", m.SHA256)
	}
	if m.Type() == "symlink" {
		var t protocol.FileEntry
		t.PathField(m.Target, base64.StdEncoding.EncodeToString)
		if t.Path != "" || m.Target == "" {
			target := m.Target
			e.Target = &target
		} else {
			e.TargetBase64 = t.PathBase64
		}
	}
	return e
}

// checkBoundaryFiles refuses, before the boundary acts, a "files" that
// cannot be served: no store, no such mark, a protected path outside
// the mark (or, with restore, outside its keep).
func (cn *conn) checkBoundaryFiles(f *protocol.VerifyFiles) (string, string) {
	st := cn.srv.cfg.Marks
	if st == nil {
		return protocol.CatBadRequest, `verify: "files": marks are not served: ` + cn.srv.cfg.MarksUnavailable
	}
	if err := st.CheckUse(f.Mark, f.Protect, f.Restore); err != nil {
		var br *marks.BadRequest
		switch {
		case errors.Is(err, marks.ErrNotFound):
			return protocol.CatNotFound, fmt.Sprintf(`verify: "files": no mark %q`, f.Mark)
		case errors.As(err, &br):
			return protocol.CatBadRequest, `verify: "files": ` + br.Msg
		}
		return protocol.CatBadRequest, `verify: "files": ` + err.Error()
	}
	return "", ""
}

// boundaryFiles is the filesystem half of a trial boundary, once its
// processes are settled: the changes under protect, restored first when
// asked.
func (cn *conn) boundaryFiles(f *protocol.VerifyFiles) *protocol.BoundaryFiles {
	st := cn.srv.cfg.Marks
	out := &protocol.BoundaryFiles{Mark: f.Mark, Tampered: []protocol.FileEntry{}}
	c, err := st.ChangesWait(f.Mark, f.Protect, 0)
	if err != nil {
		out.Error = err.Error()
		cn.log.Warn().Err(err).Str("mark", f.Mark).Msg("trial boundary: cannot compare the protected files")
		return out
	}
	out.Tampered = append(append(append(out.Tampered, fileEntries(c.Added, "added")...),
		fileEntries(c.Modified, "modified")...), fileEntries(c.Deleted, "deleted")...)
	out.Omitted = c.Omitted
	if f.Restore {
		began := time.Now()
		res, err := st.Restore(f.Mark, f.Protect, true)
		if err != nil {
			out.Error = err.Error()
			cn.log.Warn().Err(err).Str("mark", f.Mark).Msg("trial boundary: cannot restore the protected files")
			return out
		}
		cn.logRestore(res)
		r := restoredReply(res, time.Since(began))
		out.Restored = &r
	}
	cn.log.Info().Str("mark", f.Mark).Int64("tampered", c.Count()).Bool("restore", f.Restore).Msg("trial boundary: files")
	return out
}
