package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/relayd/relayd/client"
)

// marks is the opt-in section of protocol 4.9 (issue 42): on a
// 20,000-file, ~100 MB tree with 10 files changed, changes against
// git status --porcelain --untracked-files=all of the same tree
// (committed, the same 10 files changed), a mark with keep against cp -a
// of the tree onto the same filesystem, a restore of the 10 files against
// the mark, and relayd's peak RSS over a 100,000-entry mark. Medians of
// the same run; the tree is made once, in the system's temporary
// directory.
func (b *bench) marks() {
	sec := b.report.section("marks", "Marks: changes, mark and restore of a 20,000-file tree vs git status and cp -a")
	names := []string{"changes: relayd", "changes: git status", "mark with keep: relayd", "mark: cp -a", "restore of 10 files: relayd", "relayd peak RSS, 100,000-entry mark"}
	skip := func(why string) {
		logf("marks section skipped: %s", why)
		for _, n := range names {
			sec.add(skipped(n, "ms", why))
		}
	}
	files, size, reps := 20000, 5000, 5
	if b.cfg.quick {
		files, reps = 2000, 2
	}
	if _, err := exec.LookPath("git"); err != nil {
		skip("no git for the baseline")
		return
	}
	dir, err := os.MkdirTemp("", "relaybench-marks-")
	if err != nil {
		skip(err.Error())
		return
	}
	defer os.RemoveAll(dir)
	tree := filepath.Join(dir, "tree")
	if err := makeTree(tree, files, size); err != nil {
		skip(err.Error())
		return
	}
	git := func(args ...string) error {
		// The repository beside the tree, not in it: cp -a and the mark
		// see the same files; no automatic gc while cp -a reads.
		cmd := exec.Command("git", append([]string{"--git-dir", filepath.Join(dir, "git"), "--work-tree", tree,
			"-c", "user.email=bench@relayd", "-c", "user.name=bench", "-c", "gc.auto=0"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("git %v: %v: %s", args, err, out)
		}
		return nil
	}
	err = git("init", "-q")
	if err == nil {
		err = git("add", "-A")
	}
	if err == nil {
		err = git("commit", "-qm", "tree")
	}
	if err != nil {
		skip(err.Error())
		return
	}
	d, err := startRelayd(b.cfg.relayd, startOpts{args: []string{"--state-dir", filepath.Join(dir, "state"), "--mark-bytes", "4GiB"}})
	if err != nil {
		skip(err.Error())
		return
	}
	defer b.stopDaemon(d, "marks")
	ctx := context.Background()
	c, err := client.Dial(ctx, d.Addr, d.Token)
	if err != nil {
		skip(err.Error())
		return
	}
	defer c.Close()
	sec.note("%d files of %d random bytes in %d directories (%.0f MB), in %s; 10 of them changed by appending a line; git's repository beside the tree (--git-dir), gc.auto=0", files, size, files/100, float64(files*size)/1e6, os.TempDir())

	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	var markT, cpT []float64
	for i := range reps {
		began := time.Now()
		_, err := c.Mark(ctx, "bench", client.MarkOptions{Paths: []string{tree}, Keep: []string{tree}})
		if err != nil {
			skip(err.Error())
			return
		}
		markT = append(markT, ms(time.Since(began)))
		if i < reps-1 {
			if err := c.Unmark(ctx, "bench"); err != nil {
				skip(err.Error())
				return
			}
		}
		cp := filepath.Join(dir, "copy")
		began = time.Now()
		if out, err := exec.Command("cp", "-a", tree, cp).CombinedOutput(); err != nil {
			skip(fmt.Sprintf("cp -a: %v: %s", err, out))
			return
		}
		cpT = append(cpT, ms(time.Since(began)))
		os.RemoveAll(cp)
	}
	change := func() error {
		for i := range 10 {
			f, err := os.OpenFile(filepath.Join(tree, "d"+strconv.Itoa(i), "f1"), os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			_, err = f.WriteString("changed\n")
			f.Close()
			if err != nil {
				return err
			}
		}
		return nil
	}
	if err := change(); err != nil {
		skip(err.Error())
		return
	}
	var chT, gitT, restT []float64
	for range reps {
		began := time.Now()
		ch, err := c.Changes(ctx, "bench")
		if err != nil || len(ch.Modified) != 10 {
			skip(fmt.Sprintf("changes: %v (%d modified)", err, len(ch.Modified)))
			return
		}
		chT = append(chT, ms(time.Since(began)))
		began = time.Now()
		if err := git("status", "--porcelain", "--untracked-files=all"); err != nil {
			skip(err.Error())
			return
		}
		gitT = append(gitT, ms(time.Since(began)))
	}
	for range reps {
		began := time.Now()
		if _, err := c.Restore(ctx, "bench"); err != nil {
			skip(err.Error())
			return
		}
		restT = append(restT, ms(time.Since(began)))
		if err := change(); err != nil {
			skip(err.Error())
			return
		}
	}
	mark := sec.add(measured(names[2], "ms", markT, false))
	cpa := sec.add(measured(names[3], "ms", cpT, false))
	mark.against(cpa).target("at most 1.5x cp -a", ratioAtMost(1.5))
	chg := sec.add(measured(names[0], "ms", chT, false))
	gs := sec.add(measured(names[1], "ms", gitT, false))
	chg.against(gs).target("at most 1.0x git status", ratioAtMost(1.0))
	sec.add(measured(names[4], "ms", restT, false)).against(mark).target("at most 0.1x the mark", ratioAtMost(0.1))

	// 100,000 entries (empty files) in a relayd of its own, for its peak.
	big := filepath.Join(dir, "big")
	if err := makeTree(big, 100000, 0); err != nil {
		sec.add(skipped(names[5], "MiB", err.Error()))
		return
	}
	d2, err := startRelayd(b.cfg.relayd, startOpts{args: []string{"--state-dir", filepath.Join(dir, "state2")}})
	if err != nil {
		sec.add(skipped(names[5], "MiB", err.Error()))
		return
	}
	defer b.stopDaemon(d2, "marks, 100,000 entries")
	c2, err := client.Dial(ctx, d2.Addr, d2.Token)
	if err == nil {
		defer c2.Close()
		_, err = c2.Mark(ctx, "big", client.MarkOptions{Paths: []string{big}})
	}
	var hwm float64
	if err == nil {
		hwm, err = d2.status("VmHWM")
	}
	if err != nil {
		sec.add(skipped(names[5], "MiB", err.Error()))
		return
	}
	sec.add(measured(names[5], "MiB", []float64{hwm / 1024}, false)).target("at most 64 MiB", func(f *figure) bool { return f.Median <= 64 })
}

// makeTree makes files regular files of size random bytes under dir,
// 100 to a directory.
func makeTree(dir string, files, size int) error {
	buf := make([]byte, size)
	for i := range files {
		sub := filepath.Join(dir, "d"+strconv.Itoa(i/100))
		if i%100 == 0 {
			if err := os.MkdirAll(sub, 0o755); err != nil {
				return err
			}
		}
		_, _ = rand.Read(buf)
		if err := os.WriteFile(filepath.Join(sub, "f"+strconv.Itoa(i%100)), buf, 0o644); err != nil {
			return err
		}
	}
	return nil
}
