package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/relayd/relayd/client"
)

// marksNames are the marks section's rows, in the order they are added.
var marksNames = []string{
	"changes: relayd changes",                                  // 0
	"changes: git status --porcelain --untracked-files=all",    // 1
	"mark: relayd mark, the tree kept",                         // 2
	"mark: cp -a of the tree",                                  // 3
	"restore: relayd restore, every kept subtree",              // 4
	"restore: relayd restore, the 10 paths named",              // 5
	"recycle: relayd boundary (settle) + restore",              // 6
	"recycle: docker run -d + docker exec true, new container", // 7
	"mark: relayd peak RSS",                                    // 8
}

// marksShape is what the marks section makes and how often it measures.
type marksShape struct {
	dirs, perDir       int // the tree: dirs leaf directories of perDir files each
	bigDirs, bigPerDir int // the memory row's tree
	turns, minTurns    int // turns to take; at least minTurns even past the budget
	budget             time.Duration
	docker             bool // measure the docker baseline when docker answers
}

// marksLeftovers is how many processes a used container has left running
// when it is recycled.
const marksLeftovers = 5

// marks is the section of protocol 4.9's speed (issue 42): on a generated
// tree of 20,000 files, ~100 MB (2,000 leaf directories of 10 files, sizes
// varied), made once per run in a temporary directory on the same
// filesystem as relayd's state directory and the cp -a copies, and with the
// same 10 files changed each turn, in turns (medians):
//
//   - relayd's changes against git status --porcelain --untracked-files=all
//     on the same tree (committed, its repository outside the tree);
//   - relayd's mark keeping the whole tree against cp -a of it;
//   - relayd's restore of the 10 changes (every kept subtree, and the 10
//     paths named) against the mark's time;
//   - relayd's Recycle (a boundary settling 5 leftover processes, then the
//     restore of the 10 changes) against starting a new container of the
//     task image with docker run and running one command in it;
//
// and relayd's peak RSS (VmHWM) over a mark of 100,000 entries, by a relayd
// started for it alone.
func (b *bench) marks() {
	sh := marksShape{dirs: 2000, perDir: 10, bigDirs: 100, bigPerDir: 1000, turns: 7, minTurns: 3, budget: 5 * time.Minute, docker: true}
	if b.cfg.quick {
		sh = marksShape{dirs: 200, perDir: 10, bigDirs: 10, bigPerDir: 1000, turns: 2, minTurns: 1, budget: time.Minute, docker: true}
	}
	b.marksWith(sh)
}

// marksUnit is the unit of each row of marksNames.
func marksUnit(i int) string {
	if i == 8 {
		return "MiB"
	}
	return "ms"
}

func (b *bench) marksWith(sh marksShape) {
	sec := b.report.section("marks", "Marks (protocol 4.9): changes, mark, restore and recycling vs git status, cp -a and a new container")
	figs := make([]*figure, len(marksNames))
	skipRest := func(why string) {
		for i, n := range marksNames {
			if figs[i] == nil {
				figs[i] = sec.add(skipped(n, marksUnit(i), why))
			}
		}
	}
	if b.cfg.relayd == "" {
		logf("marks section skipped: no relayd binary")
		skipRest("no relayd binary")
		b.marksTargets(figs)
		return
	}
	m, why := newMarksRun(b.cfg.relayd, sh)
	if why != "" {
		logf("marks section skipped: %s", why)
		skipRest(why)
		b.marksTargets(figs)
		return
	}
	defer m.close()
	sec.note("the tree: %s files of %s in all (256 B to 6.5 KiB, every 100th 64 to 256 KiB; pseudo-random bytes) in %s leaf directories of %d under %d, made once, in %s; relayd's --state-dir, the cp -a copies and the git repository beside it (%s)",
		commas(m.files), mibOf(m.bytes), commas(sh.dirs), sh.perDir, m.top, m.dir, m.sameFS)
	sec.note("each turn the same 10 files change: 4 rewritten with other bytes of the same size, 4 appended to, 1 deleted, 1 added; changes and git status must each list exactly those 10")
	sec.note("the series take turns (the order of each pair alternates), up to %d turns, at least %d; times are the client's round trips (Go client over loopback TCP, relayd --scope auto: %s); the ratio is relayd's median over the baseline's", sh.turns, sh.minTurns, m.mechanism)
	switch {
	case m.gitWhy != "":
		sec.note("git: %s", m.gitWhy)
	default:
		sec.note("git status: %s, GIT_DIR outside the tree, GIT_WORK_TREE the tree, no system or global configuration (git's defaults: preloaded index, no untracked cache, no fsmonitor), the tree committed once", m.gitVersion)
	}
	sec.note("mark: Mark with paths and keep the tree, unmarked after each turn (not timed); cp -a: `cp -a TREE COPY` on the same filesystem, the copy removed after (not timed)")
	sec.note("restore: the default restore (every kept subtree: a walk of the tree, the 10 put back), then the same 10 changes again and a restore naming the 10 paths; each checked (9 written, 1 removed)")
	sec.note("recycle: an execute leaving %d sleeps running, the 10 changes, then Recycle (a boundary settling the survivors, then the restore of every kept subtree), checked (%d settled, quiescent, the sleeps gone); relayd runs on this host, not in a container", marksLeftovers, marksLeftovers)
	if m.dockerWhy != "" {
		sec.note("docker: %s", m.dockerWhy)
	} else {
		sec.note("docker: `docker run -d IMAGE sleep infinity` then `docker exec CONTAINER true`, %s, %s, default network; the container removed after (not timed)", m.image, m.dockerVersion)
	}

	xs := make([][]float64, len(marksNames))
	server := map[int][]float64{} // relayd's own durationMs, by row
	failed := make([]string, len(marksNames))
	began := time.Now()
	turns := 0
	for turn := 0; turn < sh.turns; turn++ {
		if turn >= sh.minTurns && b.cut(began, sh.budget) {
			break
		}
		if err := m.turn(turn, xs, server, failed); err != nil {
			logf("marks: turn %d: %v", turn+1, err)
			break
		}
		turns++
		logf("marks: turn %d of %d done", turn+1, sh.turns)
	}
	if turns < sh.turns {
		b.report.note("marks: %d of %d turns", turns, sh.turns)
	}
	for i := 0; i < 8; i++ {
		switch {
		case failed[i] != "":
			figs[i] = sec.add(skipped(marksNames[i], "ms", failed[i]))
		case len(xs[i]) == 0:
			figs[i] = sec.add(skipped(marksNames[i], "ms", "not measured"))
		default:
			figs[i] = sec.add(measured(marksNames[i], "ms", xs[i], false))
			if s := server[i]; len(s) > 0 {
				figs[i].Detail = fmt.Sprintf("relayd's own durationMs: median %.0f", quantile(s, 0.5))
			}
		}
	}
	figs[8] = sec.add(m.peakRSS(sh))
	b.marksTargets(figs)
}

// marksTargets sets each row's baseline and goal (issue 42).
func (b *bench) marksTargets(figs []*figure) {
	figs[0].against(figs[1]).target("<= 1x", ratioAtMost(1))
	figs[2].against(figs[3]).target("<= 1.5x", ratioAtMost(1.5))
	figs[4].against(figs[2]).target("<= 0.1x", ratioAtMost(0.1))
	figs[5].against(figs[2]).target("<= 0.1x", ratioAtMost(0.1))
	figs[6].against(figs[7]).target("<= 0.1x", ratioAtMost(0.1))
	figs[8].target("<= 64 MiB", medianAtMost(64))
}

// marksRun is the section's tree, relayd and baselines.
type marksRun struct {
	sh                 marksShape
	bin                string
	dir, tree          string // the run's temporary directory; the tree in it
	top                int    // top-level directories of the tree
	paths              []string
	files              int
	entries            int64 // files, directories and the tree itself
	bytes              int64
	sameFS             string
	d                  *daemon
	c                  *client.Conn
	mechanism          string
	gitEnv             []string
	gitWhy, gitVersion string
	dockerWhy, image   string
	dockerVersion      string
	forget             func()
	changed            []string // the 10 paths, absolute
}

func newMarksRun(bin string, sh marksShape) (*marksRun, string) {
	m := &marksRun{sh: sh, bin: bin}
	var err error
	if m.dir, err = os.MkdirTemp("", "relaybench-marks-"); err != nil {
		return nil, err.Error()
	}
	m.forget = atCleanup(func() { os.RemoveAll(m.dir) })
	fail := func(why string) (*marksRun, string) {
		m.close()
		return nil, why
	}
	m.tree = filepath.Join(m.dir, "tree")
	t0 := time.Now()
	if err := m.writeTree(); err != nil {
		return fail("writing the tree: " + err.Error())
	}
	logf("marks: wrote %s files (%s) in %s", commas(m.files), mibOf(m.bytes), time.Since(t0).Round(time.Millisecond))
	if m.files < 9 {
		return fail(fmt.Sprintf("a tree of %d files: the 10 changes need at least 9", m.files))
	}
	state := filepath.Join(m.dir, "state")
	m.sameFS = "all on one filesystem"
	if a, b := devOf(m.dir), devOf(m.tree); a != b || a == 0 {
		m.sameFS = "NOT on one filesystem"
	}
	if m.d, err = startRelayd(bin, startOpts{args: []string{"--state-dir", state}}); err != nil {
		return fail("starting relayd: " + err.Error())
	}
	if devOf(m.d.Dir) != devOf(m.dir) {
		m.sameFS += " (relayd's own directory is on another)"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Unmark (untimed, after each turn) removes the mark's 20,000 kept
	// objects, which takes more than the client's default 10 s reply
	// wait on a busy disk: it would end the connection and the turns.
	if m.c, err = (&client.Dialer{ReplyTimeout: 2 * time.Minute}).Dial(ctx, m.d.Addr, m.d.Token); err != nil {
		return fail("dialing relayd: " + err.Error())
	}
	if !slices.Contains(m.c.Handshake().Extensions, "marks") {
		return fail(fmt.Sprintf("relayd does not serve marks (ready lists %v)", m.c.Handshake().Extensions))
	}
	m.mechanism = m.c.Handshake().Scope
	m.changed = m.changeSet()
	m.gitWhy = m.setupGit()
	if !sh.docker {
		m.dockerWhy = "not measured in this run"
	} else {
		m.dockerWhy = m.setupDocker()
	}
	return m, ""
}

func (m *marksRun) close() {
	if m.c != nil {
		m.c.Close()
	}
	if m.d != nil {
		if err := m.d.stop(); err != nil {
			logf("marks: relayd: %v", err)
		}
	}
	os.RemoveAll(m.dir)
	m.forget()
}

// writeTree writes the tree: sh.dirs leaf directories (50 to a top-level
// directory) of sh.perDir files of pseudo-random bytes, every 100th file
// large.
func (m *marksRun) writeTree() error {
	rng := rand.NewChaCha8([32]byte{42})
	buf := make([]byte, 256<<10)
	perTop := 50
	m.top = (m.sh.dirs + perTop - 1) / perTop
	m.entries = 1 + int64(m.top)
	for d := range m.sh.dirs {
		leaf := filepath.Join(m.tree, fmt.Sprintf("pkg%02d", d/perTop), fmt.Sprintf("mod%03d", d%perTop))
		if err := os.MkdirAll(leaf, 0o755); err != nil {
			return err
		}
		m.entries++
		for f := range m.sh.perDir {
			size := 256 + int(rng.Uint64()%6400)
			if m.files%100 == 99 {
				size = 64<<10 + int(rng.Uint64()%(192<<10))
			}
			_, _ = rng.Read(buf[:size])
			p := filepath.Join(leaf, fmt.Sprintf("file%02d.dat", f))
			if err := os.WriteFile(p, buf[:size], 0o644); err != nil {
				return err
			}
			m.paths = append(m.paths, p)
			m.files++
			m.entries++
			m.bytes += int64(size)
		}
	}
	return nil
}

// changeSet is the 10 paths a turn changes: 4 rewritten, 4 appended to,
// 1 deleted (these 9 of the tree, spread over it) and 1 added.
func (m *marksRun) changeSet() []string {
	var out []string
	seen := map[int]bool{}
	for k := 0; len(out) < 9; k++ {
		i := (k*2003 + 7) % len(m.paths)
		if !seen[i] {
			seen[i] = true
			out = append(out, m.paths[i])
		}
	}
	return append(out, filepath.Join(filepath.Dir(out[0]), "added-by-the-agent.txt"))
}

// change makes the turn's 10 changes.
func (m *marksRun) change() error {
	for k, p := range m.changed {
		switch {
		case k < 4: // other bytes, the same size, the same inode
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for i := range b {
				b[i] = ^b[i]
			}
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			_, err = f.WriteAt(b, 0)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case k < 8:
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			_, err = f.WriteString("appended by the agent\n")
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case k == 8:
			if err := os.Remove(p); err != nil {
				return err
			}
		default:
			if err := os.WriteFile(p, []byte("planted by the agent\n"), 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// setupGit commits the tree in a repository outside it; it returns why
// the git row cannot be measured, or "".
func (m *marksRun) setupGit() string {
	if _, err := exec.LookPath("git"); err != nil {
		return "git not installed"
	}
	home := filepath.Join(m.dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		return err.Error()
	}
	m.gitEnv = append(os.Environ(), "GIT_DIR="+filepath.Join(m.dir, "git"), "GIT_WORK_TREE="+m.tree, "HOME="+home,
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "LC_ALL=C",
		"GIT_AUTHOR_NAME=relaybench", "GIT_AUTHOR_EMAIL=relaybench@localhost",
		"GIT_COMMITTER_NAME=relaybench", "GIT_COMMITTER_EMAIL=relaybench@localhost")
	if v, err := m.git("version"); err == nil {
		m.gitVersion = strings.TrimSpace(v)
	}
	t0 := time.Now()
	for _, args := range [][]string{{"init", "-q"}, {"-c", "gc.auto=0", "add", "-A"}, {"-c", "gc.auto=0", "commit", "-q", "-m", "the tree"}} {
		if _, err := m.git(args...); err != nil {
			return err.Error()
		}
	}
	// One status before the turns: it refreshes the index once.
	if out, err := m.gitStatus(); err != nil {
		return err.Error()
	} else if out != 0 {
		return fmt.Sprintf("git status lists %d entries right after the commit", out)
	}
	logf("marks: committed the tree with git in %s", time.Since(t0).Round(time.Millisecond))
	return ""
}

func (m *marksRun) git(args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = m.tree
	cmd.Env = m.gitEnv
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("git %s: %v: %s", args[0], err, tail(strings.TrimSpace(stderr.String()), 300))
	}
	return string(out), nil
}

// gitStatus runs the baseline and counts the entries it lists.
func (m *marksRun) gitStatus() (int, error) {
	out, err := m.git("status", "--porcelain", "--untracked-files=all")
	if err != nil {
		return 0, err
	}
	return strings.Count(out, "\n"), nil
}

// setupDocker says why the docker baseline cannot run, or "".
func (m *marksRun) setupDocker() string {
	if _, err := exec.LookPath("docker"); err != nil {
		return "docker CLI not installed"
	}
	if _, err := dockerCLI(15*time.Second, "info"); err != nil {
		return "docker not answering (docker info: " + err.Error() + ")"
	}
	m.image = defaultTaskImage
	if v := os.Getenv("RELAYBENCH_TASK_IMAGE"); v != "" {
		m.image = v
	}
	root, _ := repoRoot()
	if why := ensureTaskImage(root, m.image); why != "" {
		return why
	}
	if v, err := dockerCLI(15*time.Second, "version", "--format", "{{.Client.Version}}"); err == nil {
		m.dockerVersion = "docker " + strings.TrimSpace(v)
	}
	return ""
}

// newContainer starts a container of the task image and runs one command
// in it: the baseline of recycling. It returns the time of both; the
// container is removed after, untimed.
func (m *marksRun) newContainer() (time.Duration, error) {
	name := "relaybench-marks-" + randomHex(6)
	rm := func() {
		if _, err := dockerCLI(time.Minute, "rm", "--force", "--volumes", name); err != nil && !strings.Contains(err.Error(), "No such container") {
			logf("marks: removing %s: %v", name, err)
		}
	}
	forget := atCleanup(rm)
	defer func() { rm(); forget() }()
	began := time.Now()
	if _, err := dockerCLI(2*time.Minute, "run", "-d", "--name", name, m.image, "sleep", "infinity"); err != nil {
		return 0, err
	}
	if _, err := dockerCLI(time.Minute, "exec", name, "true"); err != nil {
		return 0, err
	}
	return time.Since(began), nil
}

// turn is one turn of every series but the memory row; each sample goes
// to xs by row. An error that leaves the tree unlike the mark ends the
// turns; one of a baseline only fails its row.
func (m *marksRun) turn(turn int, xs [][]float64, server map[int][]float64, failed []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	name := fmt.Sprintf("turn-%d", turn)
	ms := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
	fail := func(row int, err error) error {
		if failed[row] == "" {
			failed[row] = "failed: " + err.Error()
		}
		return err
	}

	// mark and cp -a, the order alternating.
	copyTree := func() error {
		if failed[3] != "" {
			return nil
		}
		dst := filepath.Join(m.dir, "copy")
		began := time.Now()
		out, err := exec.Command("cp", "-a", m.tree, dst).CombinedOutput()
		took := time.Since(began)
		defer os.RemoveAll(dst)
		if err != nil {
			fail(3, fmt.Errorf("cp -a: %v: %s", err, tail(strings.TrimSpace(string(out)), 300)))
			return nil
		}
		xs[3] = append(xs[3], ms(took))
		return nil
	}
	mark := func() error {
		began := time.Now()
		mk, err := m.c.Mark(ctx, name, client.MarkOptions{Paths: []string{m.tree}, Keep: []string{m.tree}})
		took := time.Since(began)
		if err == nil && (mk.Entries != m.entries || mk.Bytes != m.bytes) {
			err = fmt.Errorf("marked %d entries of %d bytes; want %d of %d", mk.Entries, mk.Bytes, m.entries, m.bytes)
		}
		if err != nil {
			return fail(2, err)
		}
		xs[2] = append(xs[2], ms(took))
		server[2] = append(server[2], float64(mk.DurationMs))
		return nil
	}
	first, second := mark, copyTree
	if turn%2 == 1 {
		first, second = copyTree, mark
	}
	if err := first(); err != nil {
		return err
	}
	if err := second(); err != nil {
		return err
	}
	defer func() {
		if err := m.c.Unmark(context.Background(), name); err != nil {
			logf("marks: unmark %s: %v", name, err)
		}
	}()

	// changes and git status, the order alternating.
	if err := m.change(); err != nil {
		return fail(0, err)
	}
	changes := func() error {
		began := time.Now()
		ch, err := m.c.Changes(ctx, name)
		took := time.Since(began)
		if err == nil {
			err = m.checkChanges(ch)
		}
		if err != nil {
			return fail(0, err)
		}
		xs[0] = append(xs[0], ms(took))
		server[0] = append(server[0], float64(ch.DurationMs))
		return nil
	}
	status := func() error {
		if m.gitWhy != "" {
			failed[1] = m.gitWhy
			return nil
		}
		if failed[1] != "" {
			return nil
		}
		began := time.Now()
		n, err := m.gitStatus()
		took := time.Since(began)
		if err == nil && n != 10 {
			err = fmt.Errorf("git status listed %d entries; want 10", n)
		}
		if err != nil {
			fail(1, err)
			return nil
		}
		xs[1] = append(xs[1], ms(took))
		return nil
	}
	first, second = changes, status
	if turn%2 == 1 {
		first, second = status, changes
	}
	if err := first(); err != nil {
		return err
	}
	if err := second(); err != nil {
		return err
	}

	// restore: every kept subtree, then the 10 paths named.
	restore := func(row int, paths ...string) error {
		began := time.Now()
		r, err := m.c.Restore(ctx, name, paths...)
		took := time.Since(began)
		if err == nil && (r.Written != 9 || r.Removed != 1) {
			err = fmt.Errorf("restored: %d written, %d removed; want 9 and 1", r.Written, r.Removed)
		}
		if err != nil {
			return fail(row, err)
		}
		xs[row] = append(xs[row], ms(took))
		server[row] = append(server[row], float64(r.DurationMs))
		return nil
	}
	if err := restore(4); err != nil {
		return err
	}
	if err := m.change(); err != nil {
		return fail(5, err)
	}
	if err := restore(5, m.changed...); err != nil {
		return err
	}
	if turn == 0 {
		// The restores put the tree back: nothing differs from the mark.
		if ch, err := m.c.Changes(ctx, name); err != nil || !ch.Empty() {
			return fail(5, fmt.Errorf("changes after the restores: %d added, %d modified, %d deleted (%v); want none", len(ch.Added), len(ch.Modified), len(ch.Deleted), err))
		}
	}

	// recycle, and a new container, the order alternating.
	recycle := func() error {
		if err := m.recycle(ctx, name, xs, server); err != nil {
			return fail(6, err)
		}
		return nil
	}
	container := func() error {
		if m.dockerWhy != "" {
			failed[7] = m.dockerWhy
			return nil
		}
		if failed[7] != "" {
			return nil
		}
		took, err := m.newContainer()
		if err != nil {
			fail(7, err)
			return nil
		}
		xs[7] = append(xs[7], ms(took))
		return nil
	}
	first, second = recycle, container
	if turn%2 == 1 {
		first, second = container, recycle
	}
	if err := first(); err != nil {
		return err
	}
	return second()
}

// checkChanges checks that a changes reply lists exactly the turn's 10
// changes: 8 modified, 1 deleted, 1 added.
func (m *marksRun) checkChanges(ch client.Changes) error {
	var got []string
	for _, l := range []struct {
		letter string
		list   []client.FileEntry
	}{{"M", ch.Modified}, {"D", ch.Deleted}, {"A", ch.Added}} {
		for _, e := range l.list {
			got = append(got, l.letter+" "+e.Path())
		}
	}
	var want []string
	for k, p := range m.changed {
		want = append(want, map[bool]string{true: "M ", false: map[bool]string{true: "D ", false: "A "}[k == 8]}[k < 8]+p)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) || ch.Omitted != 0 {
		return fmt.Errorf("changes listed %d entries (%s); want the 10 changed", len(got)+int(ch.Omitted), tail(strings.Join(got, ", "), 300))
	}
	return nil
}

// recycle leaves marksLeftovers sleeps running, makes the 10 changes, and
// times Recycle; then it checks that the sleeps are gone.
func (m *marksRun) recycle(ctx context.Context, name string, xs [][]float64, server map[int][]float64) error {
	pidFile := filepath.Join(m.dir, "leftovers.pid")
	os.Remove(pidFile)
	script := fmt.Sprintf("i=0; while [ $i -lt %d ]; do i=$((i+1)); /bin/sleep 1000 & echo $! >> %s; done", marksLeftovers, shq(pidFile))
	x, err := m.c.Execute(ctx, client.Request{Command: "/bin/sh", Args: []string{"-c", script}, Timeout: time.Minute})
	if err == nil && (x.Termination != client.Exited || x.ExitCode != 0) {
		err = fmt.Errorf("the leftovers' execute: %s, exit %d", x.Termination, x.ExitCode)
	}
	pids := readPids(pidFile)
	defer killMarksLeftovers(pids)
	if err == nil && len(pids) != marksLeftovers {
		err = fmt.Errorf("%d leftovers started; want %d", len(pids), marksLeftovers)
	}
	if err == nil {
		err = m.change()
	}
	if err != nil {
		return err
	}
	began := time.Now()
	r, err := m.c.Recycle(ctx, name, client.VerifyOptions{})
	took := time.Since(began)
	switch {
	case err != nil:
		return err
	case !r.Verified.Quiescent || len(r.Verified.Settled) != marksLeftovers:
		return fmt.Errorf("recycle: quiescent %v, %d settled; want quiescent, %d", r.Verified.Quiescent, len(r.Verified.Settled), marksLeftovers)
	case r.Restored.Written != 9 || r.Restored.Removed != 1:
		return fmt.Errorf("recycle restored %d written, %d removed; want 9 and 1", r.Restored.Written, r.Restored.Removed)
	}
	for _, pid := range pids {
		if alive(pid) {
			return fmt.Errorf("leftover pid %d lives after Recycle", pid)
		}
	}
	xs[6] = append(xs[6], float64(took.Nanoseconds())/1e6)
	server[6] = append(server[6], float64(r.Restored.DurationMs))
	return nil
}

// killMarksLeftovers kills, by pid, the sleeps this run's subject started
// that a failed recycle left running (relayd reaps them): those alive
// and still "sleep 1000", not a process that got the pid since.
func killMarksLeftovers(pids []int) {
	for _, pid := range pids {
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); err == nil && alive(pid) && strings.Contains(string(b), "1000") {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// peakRSS marks a tree of sh.bigDirs × sh.bigPerDir small files (kept
// whole) with a relayd started for it alone, and returns its VmHWM.
func (m *marksRun) peakRSS(sh marksShape) *figure {
	const unit = "MiB"
	name := marksNames[8]
	n := sh.bigDirs * sh.bigPerDir
	big := filepath.Join(m.dir, "big")
	t0 := time.Now()
	for i := range sh.bigDirs {
		sub := filepath.Join(big, strconv.Itoa(i))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			return skipped(name, unit, err.Error())
		}
		for j := range sh.bigPerDir {
			content := strings.Repeat("x", (i*sh.bigPerDir+j)%97)
			if err := os.WriteFile(filepath.Join(sub, "file-with-a-longish-name-"+strconv.Itoa(j)), []byte(content), 0o644); err != nil {
				return skipped(name, unit, err.Error())
			}
		}
	}
	logf("marks: wrote %s small files in %s", commas(n), time.Since(t0).Round(time.Millisecond))
	defer os.RemoveAll(big)
	d, err := startRelayd(m.bin, startOpts{args: []string{"--state-dir", filepath.Join(m.dir, "state-big")}})
	if err != nil {
		return skipped(name, unit, "starting relayd: "+err.Error())
	}
	defer func() {
		if err := d.stop(); err != nil {
			logf("marks: relayd: %v", err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, d.Addr, d.Token)
	if err != nil {
		return skipped(name, unit, "dialing relayd: "+err.Error())
	}
	defer c.Close()
	idle, _ := d.status("VmHWM")
	mk, err := c.Mark(ctx, "big", client.MarkOptions{Paths: []string{big}, Keep: []string{big}})
	want := int64(n + sh.bigDirs + 1)
	if err == nil && mk.Entries != want {
		err = fmt.Errorf("marked %d entries; want %d", mk.Entries, want)
	}
	if err != nil {
		return skipped(name, unit, "failed: "+err.Error())
	}
	hwm, err := d.status("VmHWM")
	if err != nil {
		return skipped(name, unit, err.Error())
	}
	logf("marks: a mark of %s entries took %s; relayd's peak RSS %.1f MiB", commas(int(want)), time.Duration(mk.DurationMs)*time.Millisecond, hwm/1024)
	return measured(name, unit, []float64{hwm / 1024}, false).
		withNote("VmHWM of a relayd started for it, after one mark of %s entries (%s files of 0 to 96 bytes in %d directories, all kept; %s), which took %s; %.1f MiB before it",
			commas(int(want)), commas(n), sh.bigDirs, m.sameFS, (time.Duration(mk.DurationMs) * time.Millisecond).Round(time.Millisecond), idle/1024)
}

// devOf is the device of path's filesystem, 0 when it cannot be read.
func devOf(path string) uint64 {
	var st syscall.Stat_t
	if syscall.Stat(path, &st) != nil {
		return 0
	}
	return uint64(st.Dev)
}

func mibOf(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
