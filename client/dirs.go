package client

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/relayd/relayd/internal/protocol"
)

// Directories over the file messages (protocol 4.6, "Files"), as the
// Python client moves them (relayd_client/_dirs.py): a tar archive, made
// on one side into a temporary file, moved with put or get (chunked,
// checked by sha256, one chunk in memory at a time) and unpacked by tar on
// the other. Not tar over an execute's stdin: put and get are already
// chunked, checksummed and bounded whatever the size, and a refused or cut
// transfer leaves no half-unpacked tree behind. It needs tar and mktemp on
// relayd's side (every Debian, Ubuntu, Alpine and busybox image has them),
// unless relayd lists "tree" (protocol 4.6, "Trees"): then the archive
// goes as one put or get with "format":"tar", and relayd unpacks or packs
// it itself, refusing by name a member that would land outside.

// Errors of directory transfers.
var (
	// ErrRemoteCommand: a command a directory transfer runs on relayd's
	// side (mkdir, tar, mktemp) failed; the error carries its stderr.
	ErrRemoteCommand = errors.New("client: a directory transfer's command failed on relayd's side")
	// ErrUnsafeArchive: the archive DownloadDir fetched holds a member that
	// would land outside the local directory (an absolute path, "..", a
	// link pointing out) or that is not a file, directory or link (a
	// device, a fifo). The archive comes from the container, which the
	// subject could write: nothing of such a member is written.
	ErrUnsafeArchive = errors.New("client: unsafe member in the archive")
)

// DirOptions are the optional fields of UploadDir and DownloadDir.
type DirOptions struct {
	// User reads and writes on relayd's side with this user's rights (a
	// name or uid, optionally ":GROUP"; relayd must be root): the files
	// UploadDir makes are the user's. "" is relayd's --subject-user.
	User string
}

// UploadDir copies the tree under localDir into remoteDir on relayd's side
// (relative: from relayd's workspace), making remoteDir if it is missing
// and replacing files of the same names. Regular files, directories and
// symbolic links go with their permission bits and times; the files are
// owned by the user who unpacks them (tar -o), not by their local owners.
// A tree that fails to unpack may be partly there.
func (c *Conn) UploadDir(ctx context.Context, localDir, remoteDir string, opts DirOptions) error {
	op := "UploadDir " + localDir
	src, err := filepath.EvalSymlinks(localDir)
	if err != nil {
		return fmt.Errorf("client: %s: %w", op, err)
	}
	if fi, err := os.Stat(src); err != nil {
		return fmt.Errorf("client: %s: %w", op, err)
	} else if !fi.IsDir() {
		return fmt.Errorf("client: %s: not a directory", op)
	}
	tmp, err := os.CreateTemp("", "relayd-upload-*.tar")
	if err != nil {
		return fmt.Errorf("client: %s: %w", op, err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if err := writeTar(tmp, src); err != nil {
		return fmt.Errorf("client: %s: %w", op, err)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("client: %s: %w", op, err)
	}
	if c.serves(extTree) && c.serves(extBody) {
		// relayd unpacks it itself: no tar or mkdir needed in the container.
		fi, err := tmp.Stat()
		if err != nil {
			return fmt.Errorf("client: %s: %w", op, err)
		}
		if err := c.beginExecution(); err != nil {
			return err
		}
		t, err := c.putBody(ctx, remoteDir, tmp, fi.Size(), PutOptions{User: opts.User, Parents: true}, "tar")
		c.endExecution()
		if err != nil {
			return fmt.Errorf("client: %s: %w", op, err)
		}
		if len(t.Refused) > 0 {
			// relayd's own refusal, reported in its stored reply.
			return fmt.Errorf("client: %s: %w", op, &Error{Category: protocol.CatBadRequest, Message: "relayd refused members of the tree: " + strings.Join(t.Refused, "; ")})
		}
		return nil
	}
	if _, err := c.dirCommand(ctx, op, `mkdir -p -- "$1"`, opts.User, remoteDir); err != nil {
		return err
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	remoteTar := strings.TrimRight(remoteDir, "/") + "/.relayd-upload-" + hex.EncodeToString(b[:]) + ".tar"
	if _, err := c.PutFile(ctx, remoteTar, tmp, PutOptions{Mode: 0o600, User: opts.User}); err != nil {
		return fmt.Errorf("client: %s: %w", op, err)
	}
	// -o: the files are the user's, not the archive's owners.
	_, err = c.dirCommand(ctx, op, `tar -x -o -f "$1" -C "$2"; s=$?; rm -f -- "$1"; exit $s`, opts.User, remoteTar, remoteDir)
	return err
}

// DownloadDir copies the tree under remoteDir on relayd's side (relative:
// from relayd's workspace) into localDir, making it if it is missing.
// The archive is checked member by member: one that would land outside
// localDir, or a device or fifo, fails the whole download with
// ErrUnsafeArchive before anything is written when its name or link
// shows it, else when it is reached (a link through links written
// before). Files keep their permission bits (without setuid, setgid and
// sticky) and times; they are owned by the caller.
func (c *Conn) DownloadDir(ctx context.Context, remoteDir, localDir string, opts DirOptions) (err error) {
	op := "DownloadDir " + remoteDir
	if c.serves(extTree) {
		return c.downloadTree(ctx, op, remoteDir, localDir, opts)
	}
	out, err := c.dirCommand(ctx, op, `t=$(mktemp) || exit; tar -c -f "$t" -C "$1" . || { s=$?; rm -f -- "$t"; exit $s; }; echo "$t"`,
		opts.User, remoteDir)
	if err != nil {
		return err
	}
	remoteTar := strings.TrimSpace(out)
	tmp, err := os.CreateTemp("", "relayd-download-*.tar")
	if err == nil {
		defer os.Remove(tmp.Name())
		defer tmp.Close()
		_, err = c.GetFile(ctx, remoteTar, opts.User, tmp)
		if err != nil {
			err = fmt.Errorf("client: %s: %w", op, err)
		}
	}
	if _, rerr := c.dirCommand(ctx, op, `rm -f -- "$1"`, opts.User, remoteTar); err == nil {
		err = rerr
	}
	if err != nil {
		return err
	}
	if err := os.MkdirAll(localDir, 0o755); err != nil {
		return fmt.Errorf("client: %s: %w", op, err)
	}
	if err := extractTar(tmp, localDir); err != nil {
		return fmt.Errorf("client: %s into %s: %w", op, localDir, err)
	}
	return nil
}

// extTree is the extension of trees (protocol 4.6, "Trees").
const extTree = "tree"

// downloadTree is DownloadDir from a relayd that packs the tree itself.
// A member relayd refused to pack (a FIFO, a device) fails it with
// ErrUnsafeArchive, as the archive's own check does.
func (c *Conn) downloadTree(ctx context.Context, op, remoteDir, localDir string, opts DirOptions) error {
	tmp, err := os.CreateTemp("", "relayd-download-*.tar")
	if err != nil {
		return fmt.Errorf("client: %s: %w", op, err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	t, err := c.getFile(ctx, remoteDir, opts.User, tmp, true, false)
	if err != nil {
		return fmt.Errorf("client: %s: %w", op, err)
	}
	if len(t.Refused) > 0 {
		// A FIFO or a device, as the archive's own check refuses; or what
		// relayd could not read. Both ErrUnsafeArchive and relayd's refusal.
		return fmt.Errorf("client: %s: %w: %w", op, ErrUnsafeArchive,
			&Error{Category: protocol.CatBadRequest, Message: "relayd left out members of the tree: " + strings.Join(t.Refused, "; ")})
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("client: %s: %w", op, err)
	}
	if err := os.MkdirAll(localDir, 0o755); err != nil {
		return fmt.Errorf("client: %s: %w", op, err)
	}
	if err := extractTar(tmp, localDir); err != nil {
		return fmt.Errorf("client: %s into %s: %w", op, localDir, err)
	}
	return nil
}

// dirCommand runs script with sh on relayd's side as user, with args as
// $1... (the first a path: when absolute, the script runs in /, else in
// the workspace, as relative paths are taken), and returns its stdout; a non-zero status is ErrRemoteCommand
// with the command's stderr.
func (c *Conn) dirCommand(ctx context.Context, op, script, user string, args ...string) (string, error) {
	req := Request{Command: "sh", Args: append([]string{"-c", script, "sh"}, args...), User: user, CaptureStderr: true}
	if path.IsAbs(args[0]) {
		// It does not need the workspace, which the user may not enter.
		req.Cwd = "/"
	}
	e, err := c.Execute(ctx, req)
	if err != nil {
		return "", fmt.Errorf("client: %s: %w", op, err)
	}
	if e.ExitCode != 0 {
		name, _, _ := strings.Cut(script, " ")
		why := strings.TrimSpace(e.Stderr)
		if why == "" {
			why = e.Detail // relayd's own reason: a bad cwd, an unknown user
		}
		return "", fmt.Errorf("client: %s: %w: %s exited %d: %s", op, ErrRemoteCommand, name, e.ExitCode, why)
	}
	return e.Stdout, nil
}

// writeTar writes the tree under dir (not dir itself) as a tar archive,
// in lexical order, links as links.
func writeTar(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		var link string
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := io.Copy(tw, f); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// extractTar unpacks the archive in f into dir. A first pass refuses what
// its names show (absolute or escaping paths and link targets, devices,
// fifos, unknown types) before anything is written; the second writes
// through an os.Root, so that no write follows a link out of dir, and
// refuses a link that would point out once the links written are followed,
// when it is written and again at the end (removing it then).
func extractTar(f *os.File, dir string) error {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if _, err := checkMember(h); err != nil {
			return err
		}
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	type dirMeta struct {
		name  string
		mode  fs.FileMode
		mtime time.Time
	}
	var dirs []dirMeta // their modes and times are set last, so that a 0555 one can be filled
	var links []string // symbolic links written, checked again at the end
	tr = tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		name, _ := checkMember(h)
		if name == "." {
			continue
		}
		if escapes(root, path.Dir(name)) {
			return fmt.Errorf("%w: %q lies behind a link pointing outside", ErrUnsafeArchive, h.Name)
		}
		if err := root.MkdirAll(path.Dir(name), 0o755); err != nil {
			return err
		}
		mode := fs.FileMode(h.Mode).Perm()
		if h.Typeflag != tar.TypeDir {
			// What the name holds now (a file, a link) is replaced, as tar does.
			if fi, err := root.Lstat(name); err == nil && !fi.IsDir() {
				if err := root.Remove(name); err != nil {
					return err
				}
			}
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			dirs = append(dirs, dirMeta{name, mode, h.ModTime})
		case tar.TypeReg:
			w, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(w, tr)
			if cerr := w.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if err := root.Chmod(name, mode); err != nil {
				return err
			}
			_ = root.Chtimes(name, h.ModTime, h.ModTime)
		case tar.TypeSymlink:
			if escapes(root, path.Dir(name)+"/"+h.Linkname) {
				return fmt.Errorf("%w: %q links to %q, outside", ErrUnsafeArchive, h.Name, h.Linkname)
			}
			if err := root.Symlink(h.Linkname, name); err != nil {
				return err
			}
			links = append(links, name)
		case tar.TypeLink:
			if escapes(root, h.Linkname) {
				return fmt.Errorf("%w: %q links to %q, outside", ErrUnsafeArchive, h.Name, h.Linkname)
			}
			if err := root.Link(path.Clean(h.Linkname), name); err != nil {
				return err
			}
		}
	}
	// A link checked when it was written can point out through links
	// written after it (chain -> sub/up/.. before sub/up -> ..): every one
	// is judged again against the whole tree, and those that point out are
	// removed.
	var out []string
	for _, l := range links {
		target, err := root.Readlink(l)
		if err != nil || escapes(root, path.Dir(l)+"/"+target) {
			out = append(out, l)
		}
	}
	for _, l := range out {
		_ = root.Remove(l)
	}
	if len(out) > 0 {
		return fmt.Errorf("%w: %q points outside through the archive's other links", ErrUnsafeArchive, out[0])
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := root.Chmod(dirs[i].name, dirs[i].mode); err != nil {
			return err
		}
		_ = root.Chtimes(dirs[i].name, dirs[i].mtime, dirs[i].mtime)
	}
	return nil
}

// checkMember returns h's cleaned name, or ErrUnsafeArchive for what its
// header alone shows to be unsafe.
func checkMember(h *tar.Header) (string, error) {
	name := path.Clean(h.Name)
	if !filepath.IsLocal(name) {
		return "", fmt.Errorf("%w: %q is outside the directory", ErrUnsafeArchive, h.Name)
	}
	switch h.Typeflag {
	case tar.TypeDir, tar.TypeReg:
	case tar.TypeXGlobalHeader:
		return ".", nil // pax defaults for what follows, not a member
	case tar.TypeSymlink:
		if path.IsAbs(h.Linkname) || !filepath.IsLocal(path.Join(path.Dir(name), h.Linkname)) {
			return "", fmt.Errorf("%w: %q links to %q, outside", ErrUnsafeArchive, h.Name, h.Linkname)
		}
	case tar.TypeLink:
		if !filepath.IsLocal(path.Clean(h.Linkname)) {
			return "", fmt.Errorf("%w: %q links to %q, outside", ErrUnsafeArchive, h.Name, h.Linkname)
		}
	default:
		return "", fmt.Errorf("%w: %q is not a file, directory or link (tar type %q)", ErrUnsafeArchive, h.Name, h.Typeflag)
	}
	return name, nil
}

// escapes reports whether the slash-separated path p, relative to root,
// leads outside it when the links on disk now are followed, a missing
// component taken as written (as realpath(3) without strictness does).
// Lexical cleaning alone is not enough: with a/b a link to "..", the path
// a/b/.. is root's parent, though it cleans to a.
func escapes(root *os.Root, p string) bool {
	var done []string
	todo := strings.Split(p, "/")
	for hops := 0; len(todo) > 0; {
		comp := todo[0]
		todo = todo[1:]
		switch comp {
		case "", ".":
			continue
		case "..":
			if len(done) == 0 {
				return true
			}
			done = done[:len(done)-1]
			continue
		}
		cur := path.Join(append(done, comp)...)
		fi, err := root.Lstat(cur)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			done = append(done, comp)
			continue
		}
		if hops++; hops > 40 {
			return true // a loop, or too deep to judge
		}
		target, err := root.Readlink(cur)
		if err != nil || path.IsAbs(target) {
			return true
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	return false
}
