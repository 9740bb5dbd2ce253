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
	// Links says what happens to symbolic links. "" (the default): a link
	// whose target leads outside the directory (absolute, or through the
	// tree's other links) is refused, by relayd on an upload and by
	// DownloadDir on the local side. LinksKeep: every link is kept as it
	// is, whatever its target, as docker cp and tar keep a virtual
	// environment's link to /usr/bin/python3 (protocol 4.6, "Trees").
	// Either way nothing is ever written through a link: a member whose
	// path passes through one, whether the archive made it or it was
	// already there, is refused.
	Links string
}

// LinksKeep is DirOptions.Links keeping every symbolic link as it is.
const LinksKeep = "keep"

// ErrBadOption is a DirOptions field with a value it does not take.
var ErrBadOption = errors.New("client: a directory transfer's option has a value it does not take")

// keep validates o.Links and says whether links are kept.
func (o DirOptions) keep() (bool, error) {
	switch o.Links {
	case "":
		return false, nil
	case LinksKeep:
		return true, nil
	}
	return false, fmt.Errorf("%w: Links is %q; want \"\" or %q", ErrBadOption, o.Links, LinksKeep)
}

// UploadDir copies the tree under localDir into remoteDir on relayd's side
// (relative: from relayd's workspace), making remoteDir if it is missing
// and replacing files of the same names. Regular files, directories and
// symbolic links go with their permission bits and times; the files are
// owned by the user who unpacks them (tar -o), not by their local owners.
// A tree that fails to unpack may be partly there. With Links LinksKeep,
// relayd keeps every link as it is; by default it refuses one that leads
// outside remoteDir, and the upload fails naming it.
func (c *Conn) UploadDir(ctx context.Context, localDir, remoteDir string, opts DirOptions) error {
	op := "UploadDir " + localDir
	if _, err := opts.keep(); err != nil {
		return err
	}
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
		t, err := c.putBody(ctx, remoteDir, tmp, fi.Size(), PutOptions{User: opts.User, Parents: true, links: opts.Links}, "tar")
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
// sticky) and times; they are owned by the caller. With Links LinksKeep
// every link is kept as it is, whatever its target. Either way nothing
// is written through a link, one of the archive's or one already in
// localDir: a member whose path passes through one fails the download
// with ErrUnsafeArchive, naming it.
func (c *Conn) DownloadDir(ctx context.Context, remoteDir, localDir string, opts DirOptions) (err error) {
	op := "DownloadDir " + remoteDir
	keep, err := opts.keep()
	if err != nil {
		return err
	}
	if c.serves(extTree) {
		return c.downloadTree(ctx, op, remoteDir, localDir, opts, keep)
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
	if err := extractTar(tmp, localDir, keep); err != nil {
		return fmt.Errorf("client: %s into %s: %w", op, localDir, err)
	}
	return nil
}

// extTree is the extension of trees (protocol 4.6, "Trees").
const extTree = "tree"

// downloadTree is DownloadDir from a relayd that packs the tree itself.
// A member relayd refused to pack (a FIFO, a device) fails it with
// ErrUnsafeArchive, as the archive's own check does.
func (c *Conn) downloadTree(ctx context.Context, op, remoteDir, localDir string, opts DirOptions, keep bool) error {
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
	if err := extractTar(tmp, localDir, keep); err != nil {
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
// its names show (absolute or escaping paths, devices, fifos, unknown
// types; without keep, escaping link targets) before anything is written;
// the second writes through an os.Root, so that nothing leaves dir, and
// never through a link: each directory on a member's way is looked at
// with Lstat and made if missing, and a link there (the archive's own,
// or one already in dir) fails the extraction naming the member. Without
// keep, a link that would point out once the links written are followed
// is refused when it is written and again at the end (removing it then).
// relayd's reader (internal/session/tree.go) differs on purpose:
// ARCHITECTURE.md, "Two tar readers, on purpose".
func extractTar(f *os.File, dir string, keep bool) error {
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
		if _, err := checkMember(h, keep); err != nil {
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
	var dirs []dirMeta        // their modes and times are set last, so that a 0555 one can be filled
	var links []string        // symbolic links written, checked again at the end
	seen := map[string]bool{} // directories looked at: they stay directories (no member replaces one)
	tr = tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		name, _ := checkMember(h, keep)
		if name == "." {
			continue
		}
		if err := realDirs(root, path.Dir(name), seen); err != nil {
			return fmt.Errorf("%w: %q: %w", ErrUnsafeArchive, h.Name, err)
		}
		mode := fs.FileMode(h.Mode).Perm()
		fi, lerr := root.Lstat(name)
		switch {
		case lerr != nil:
		case h.Typeflag == tar.TypeDir && fi.Mode()&fs.ModeSymlink != 0:
			// Never followed, and never replaced: an earlier link may
			// lead through it.
			return fmt.Errorf("%w: %q: a symbolic link is there", ErrUnsafeArchive, h.Name)
		case h.Typeflag != tar.TypeDir && !fi.IsDir():
			// What the name holds now (a file, a link) is replaced, as
			// tar does: a link is removed, not followed.
			if err := root.Remove(name); err != nil {
				return err
			}
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			if fi, err := root.Lstat(name); err != nil || !fi.IsDir() {
				return fmt.Errorf("%w: %q: not a directory there", ErrUnsafeArchive, h.Name)
			}
			dirs = append(dirs, dirMeta{name, mode, h.ModTime})
		case tar.TypeReg:
			w, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(w, tr)
			if err == nil {
				err = w.Chmod(mode) // the file opened, not its name again
			}
			if cerr := w.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			_ = root.Chtimes(name, h.ModTime, h.ModTime)
		case tar.TypeSymlink:
			if !keep && escapes(root, path.Dir(name)+"/"+h.Linkname) {
				return fmt.Errorf("%w: %q links to %q, outside", ErrUnsafeArchive, h.Name, h.Linkname)
			}
			if err := root.Symlink(h.Linkname, name); err != nil {
				return err
			}
			if !keep {
				links = append(links, name)
			}
		case tar.TypeLink:
			from := path.Clean(h.Linkname)
			if !keep && escapes(root, from) {
				return fmt.Errorf("%w: %q links to %q, outside", ErrUnsafeArchive, h.Name, h.Linkname)
			}
			// A file, reached through directories only: a hard link to a
			// symbolic link would be that link read from another place.
			if err := realDirs(root, path.Dir(from), nil); err != nil {
				return fmt.Errorf("%w: %q links to %q: %w", ErrUnsafeArchive, h.Name, h.Linkname, err)
			}
			if fi, err := root.Lstat(from); err != nil || !fi.Mode().IsRegular() {
				return fmt.Errorf("%w: %q links to %q, which is not a file of the tree", ErrUnsafeArchive, h.Name, h.Linkname)
			}
			if err := root.Link(from, name); err != nil {
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

// realDirs checks that every component of the slash-separated dir,
// relative to root, is a directory and not a symbolic link, one at a
// time from root (so that no Lstat follows a link on the way). With seen
// (the directories already looked at, which it adds to), a missing one
// is made (mode 0755).
func realDirs(root *os.Root, dir string, seen map[string]bool) error {
	if dir == "." {
		return nil
	}
	cur := ""
	for _, c := range strings.Split(dir, "/") {
		cur = path.Join(cur, c)
		if seen[cur] {
			continue
		}
		fi, err := root.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) && seen != nil {
			if err = root.Mkdir(cur, 0o755); err == nil || errors.Is(err, fs.ErrExist) {
				fi, err = root.Lstat(cur)
			}
		}
		switch {
		case err != nil:
			return err
		case fi.Mode()&fs.ModeSymlink != 0:
			return fmt.Errorf("its path passes through %s, a symbolic link", cur)
		case !fi.IsDir():
			return fmt.Errorf("its path passes through %s, which is not a directory", cur)
		}
		if seen != nil {
			seen[cur] = true
		}
	}
	return nil
}

// checkMember returns h's cleaned name, or ErrUnsafeArchive for what its
// header alone shows to be unsafe; with keep, a symbolic link's target is
// not judged.
func checkMember(h *tar.Header, keep bool) (string, error) {
	name := path.Clean(h.Name)
	if !filepath.IsLocal(name) {
		return "", fmt.Errorf("%w: %q is outside the directory", ErrUnsafeArchive, h.Name)
	}
	switch h.Typeflag {
	case tar.TypeDir, tar.TypeReg:
	case tar.TypeXGlobalHeader:
		return ".", nil // pax defaults for what follows, not a member
	case tar.TypeSymlink:
		if h.Linkname == "" {
			return "", fmt.Errorf("%w: %q links to nothing", ErrUnsafeArchive, h.Name)
		}
		if !keep && (path.IsAbs(h.Linkname) || !filepath.IsLocal(path.Join(path.Dir(name), h.Linkname))) {
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
