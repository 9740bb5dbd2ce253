package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/relayd/relayd/client"
)

// relayctl put and get (protocol 4.6, "Files").

// checkFiles validates put's and get's arguments.
func checkFiles(verb string, o options, args []string) error {
	if len(args) != 2 {
		if verb == "put" {
			return errors.New("wants two paths: relayctl put [flags] LOCAL REMOTE (LOCAL - is stdin)")
		}
		return errors.New("wants two paths: relayctl get [flags] REMOTE LOCAL (LOCAL - is stdout)")
	}
	if verb == "put" && !o.recursive && args[0] != "-" {
		if fi, err := os.Stat(args[0]); err == nil && fi.IsDir() {
			return fmt.Errorf("%s is a directory: relayctl put -r %s %s copies a directory", args[0], args[0], args[1])
		}
	}
	switch {
	case o.links != "" && !o.recursive:
		return errors.New("--links goes with -r: it says what happens to a directory's symbolic links")
	case o.links != "" && o.links != client.LinksKeep:
		return fmt.Errorf("--links %q: want keep (every symbolic link kept as it is), or leave it out", o.links)
	}
	if o.recursive {
		switch {
		case args[0] == "-" || args[1] == "-":
			return errors.New("-r copies a directory: - (stdin, stdout) is not one")
		case o.mode != "" || o.parents:
			return errors.New("-r keeps each file's own mode and makes REMOTE's parents: --mode and --parents are for one file")
		}
	}
	switch o.digest {
	case "", client.DigestSHA256, client.DigestNone:
	default:
		return fmt.Errorf("--digest %q: want sha256 or none", o.digest)
	}
	if o.mode != "" {
		if m, err := strconv.ParseUint(o.mode, 8, 32); err != nil || m > 0o7777 {
			return fmt.Errorf("--mode %q: want octal permission bits such as 0755", o.mode)
		}
	}
	return nil
}

// putFile sends local (- for stdin) to remote.
func putFile(ctx context.Context, c *client.Conn, o options, local, remote string, out printer) (int, error) {
	var r io.Reader = os.Stdin
	if local != "-" {
		f, err := os.Open(local)
		if err != nil {
			return 0, err
		}
		defer f.Close()
		r = f
	}
	po := client.PutOptions{User: o.user, Parents: o.parents, Digest: o.digest}
	if o.mode != "" {
		m, _ := strconv.ParseUint(o.mode, 8, 32) // checked by checkFiles
		po.Mode = uint32(m)
	}
	t, err := c.PutFile(ctx, remote, r, po)
	if err != nil {
		return 0, err
	}
	out.transferred("stored", t, out.stdout)
	return 0, nil
}

// getFile copies remote to local (- for stdout). A local file is written
// beside itself and renamed into place once the get checked out (relayd's
// sent, its sha256 matched), so a failed get leaves what was there.
func getFile(ctx context.Context, c *client.Conn, o options, remote, local string, out printer) (int, error) {
	opts := client.GetOptions{User: o.user, Digest: o.digest}
	if local == "-" {
		t, err := c.GetFileWith(ctx, remote, out.stdout, opts)
		if err != nil {
			return 0, err
		}
		out.transferred("content", t, out.stderr)
		return 0, nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(local), "."+filepath.Base(local)+".relayctl-*")
	if err != nil {
		return 0, err
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	t, err := c.GetFileWith(ctx, remote, tmp, opts)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), local)
	}
	if err != nil {
		return 0, err
	}
	out.transferred("content", t, out.stdout)
	return 0, nil
}

// putDir copies the directory local into remote (client.UploadDir).
func putDir(ctx context.Context, c *client.Conn, o options, local, remote string, out printer) (int, error) {
	if err := c.UploadDir(ctx, local, remote, client.DirOptions{User: o.user, Links: o.links}); err != nil {
		return 0, err
	}
	out.dir("stored", remote)
	return 0, nil
}

// getDir copies the directory remote into local (client.DownloadDir).
func getDir(ctx context.Context, c *client.Conn, o options, remote, local string, out printer) (int, error) {
	if err := c.DownloadDir(ctx, remote, local, client.DirOptions{User: o.user, Links: o.links}); err != nil {
		return 0, err
	}
	out.dir("content", local)
	return 0, nil
}

// dir prints the directory a put -r or get -r filled, or with --json
// {"kind":KIND,"path":P,"directory":true}.
func (p printer) dir(kind, path string) {
	if p.json {
		p.asJSON(kind, map[string]any{"path": path, "directory": true})
		return
	}
	fmt.Fprintf(p.stdout, "%s/ directory copied\n", strings.TrimRight(path, "/"))
}

// transferred prints what relayd reported of a file: PATH BYTES SHA256,
// or with --json the fields as JSON.
func (p printer) transferred(kind string, t client.Transferred, w io.Writer) {
	if p.json {
		p.asJSON(kind, t)
		return
	}
	digest := "sha256 " + t.Sha256
	if t.Sha256 == "" {
		digest = "digest none"
	}
	if t.Path != "" {
		fmt.Fprintf(w, "%s %d bytes %s\n", t.Path, t.Bytes, digest)
		return
	}
	fmt.Fprintf(w, "%d bytes %s\n", t.Bytes, digest)
}
