// Command relaybench measures relayd on this machine: it starts real
// relayds, drives them over TCP as a controller would, and compares each
// figure with a baseline measured in the same run (a bare spawn of
// /bin/true, a bare spawn into a fresh cgroup leaf, a shell pipeline,
// OpenSSH with a multiplexed master connection, and, when Docker is there,
// docker exec into a container that relayd runs in too). It prints a table of
// medians and p99s with the ratios and the targets, and writes the same
// figures as JSON.
//
//	go run ./bench/relaybench --relayd bin/relayd --out bench/results.json
//
// It waits only for the exact pids it starts (relayd, its own bare spawns,
// ssh and sshd), never wait4(-1): relayd's subjects are relayd's to reap.
// It signals only processes it started, and the processes its own subjects
// wrote to pid files when a settlement left them behind.
//
// It does not change relayd, and its targets are goals, not assertions: a
// missed target is printed as such and the exit status stays 0. It exits 1
// only when it could not measure at all (no relayd binary, a bad flag).
//
// It lives in bench/, beside the results.json that make bench writes, not
// in cmd/, which holds the programs a user runs (relayd, relayctl). Its
// files, by what they measure (each section is a --only name):
//
//   - main.go: the flags, the order of the sections, the run's deadline and
//     its cleanups.
//   - roundtrip.go: roundtrip and ssh, one execute of /bin/true against a
//     bare spawn (spawn_linux.go: fork-exec and a fresh cgroup leaf) and
//     OpenSSH's master connection (ssh.go: a private sshd); a shell
//     session's command (session.go) and a pty's echo (pty.go) as rows of it.
//   - throughput.go: throughput, many connections executing at once.
//   - settle.go: settle, trees of 10 to 1,000 processes ended by timeoutMs.
//   - output.go: output, 1 GiB of stdout, raw and through the carrier.
//   - footprint.go: footprint, the binary, its start and idle connections.
//   - docker.go: docker, docker exec beside relayd in one container (the
//     concurrent bursts: dockerconc.go; a Terminal-Bench step: terminus.go).
//   - compare.go: compare, an older relayd (--before) in turns with this one.
//   - fleet.go: fleet, many dial-out relayds against one controller.
//   - transfer.go: transfer and loopback, bulk bytes through the bridge.
//   - bridge.go: bridge, the transfer section's bodies through the bridge
//     in rounds, with each process's CPU per GiB.
//   - marks.go: marks, protocol 4.9's marks, changes and restores.
//   - relayd.go: the relayds a section starts (through testharness);
//     report.go: the figures, the table and the JSON.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/pflag"
)

// sectionNames are the parts of the run, in the order they run; --only
// picks some of them.
var sectionNames = []string{"roundtrip", "ssh", "throughput", "settle", "output", "footprint", "docker", "compare", "fleet", "loopback", "transfer", "bridge", "marks"}

// optIn are the sections only --only runs: fleet starts thousands of
// relayds, transfer moves gigabytes through a container (and on
// loopback), loopback only on loopback.
var optIn = []string{"fleet", "loopback", "transfer", "bridge"}

// config is the parsed command line.
type config struct {
	relayd       string          // absolute path of the relayd binary
	out          string          // where the JSON goes
	quick        bool            // fewer repetitions: a smoke run
	only         map[string]bool // sections to run
	installSSH   bool            // apt-get install OpenSSH when sshd is missing and we are root (opt-in)
	table        string          // print the table of this results file and exit
	before       string          // an older relayd binary for the before/after section; "" for none
	bridgeRounds int             // rounds of the bridge section
	bridgePerf   string          // where the bridge section's perf records go; "" for none
}

func main() {
	err := run(os.Args[1:])
	if errors.Is(err, pflag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "relaybench: "+err.Error())
		os.Exit(1)
	}
}

func run(args []string) error {
	cfg, err := parseFlags(args)
	if err != nil {
		return err
	}
	if cfg.table != "" {
		rep, err := readReport(cfg.table)
		if err != nil {
			return err
		}
		fmt.Print(rep.table())
		return nil
	}
	go onSignal()
	defer runCleanups()
	raiseNoFile(4096)

	began := time.Now()
	rep := newReport(cfg, began)
	logf("relayd %s (%s), %d cores, load %s; %s run of: %s", rep.Machine.RelaydVersion, cfg.relayd,
		rep.Machine.NProc, rep.Machine.LoadAtStart, mode(cfg), strings.Join(selected(cfg), ", "))
	cgSkip := probeCgroup(cfg.relayd)
	if cgSkip != "" {
		logf("cgroup mechanism skipped: %s", cgSkip)
	}
	// Sections cut their repetitions (keeping at least one) past this, so
	// that a run on a loaded machine still ends in reasonable time.
	deadline := began.Add(9 * time.Minute)
	if cfg.quick {
		deadline = began.Add(3 * time.Minute)
	}
	b := &bench{cfg: cfg, cgSkip: cgSkip, report: rep, deadline: deadline}
	if cfg.only["roundtrip"] || cfg.only["ssh"] {
		b.roundTrip()
	}
	if cfg.only["throughput"] {
		b.throughput()
	}
	if cfg.only["settle"] {
		b.settle()
	}
	if cfg.only["output"] {
		b.output()
	}
	if cfg.only["footprint"] {
		b.footprint()
	}
	if cfg.only["docker"] {
		b.dockerSection()
	}
	if cfg.only["compare"] && cfg.before != "" {
		b.compare()
	}
	if cfg.only["fleet"] {
		b.fleet()
	}
	if cfg.only["loopback"] && !cfg.only["transfer"] {
		b.loopback()
	}
	if cfg.only["transfer"] {
		b.transfer()
	}
	if cfg.only["bridge"] {
		b.bridge()
	}
	if cfg.only["marks"] {
		b.marks()
	}
	rep.finish(began)
	fmt.Print(rep.table())
	if err := rep.write(cfg.out); err != nil {
		return err
	}
	logf("figures written to %s; the run took %s", cfg.out, time.Since(began).Round(time.Second))
	return nil
}

func parseFlags(args []string) (config, error) {
	fs := pflag.NewFlagSet("relaybench", pflag.ContinueOnError)
	fs.SortFlags = false
	relayd := fs.String("relayd", "bin/relayd", "relayd binary to measure (make build makes bin/relayd)")
	out := fs.String("out", "bench/results.json", "file to write the figures to, as JSON")
	quick := fs.Bool("quick", false, "far fewer repetitions and shorter runs: a smoke run, not figures to quote")
	only := fs.StringSlice("only", nil, "run only these sections (comma-separated): "+strings.Join(sectionNames, ", ")+"; "+strings.Join(optIn, ", ")+" runs only when named")
	installSSH := fs.Bool("install-ssh", false, "when sshd is missing and we are root, install OpenSSH with apt-get (make bench BENCH_INSTALL_SSH=1 sets it); without it the ssh comparison is skipped")
	before := fs.String("before", "", "an older relayd binary: adds a section measuring it and --relayd in turns (round trip, settling 1,000 members, output)")
	bridgeRounds := fs.Int("bridge-rounds", bridgeRounds, "rounds of the bridge section, in turns")
	bridgePerf := fs.String("bridge-perf", "", "a directory: the bridge section then records one more round, row by row, with perf record -a -g")
	table := fs.String("table", "", "print the table of an earlier run's results file (e.g. bench/results.json) and exit; measures nothing")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: relaybench [flags]\n\nMeasures relayd against baselines run beside it; prints a table and writes JSON.\n\n%s", fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected argument %q: relaybench takes only flags", fs.Arg(0))
	}
	cfg := config{out: *out, quick: *quick, installSSH: *installSSH, table: *table, only: map[string]bool{},
		bridgeRounds: max(*bridgeRounds, 1), bridgePerf: *bridgePerf}
	if cfg.table != "" {
		return cfg, nil
	}
	for _, s := range *only {
		s = strings.TrimSpace(s)
		if !contains(sectionNames, s) {
			return config{}, fmt.Errorf("--only %q: want some of %s", s, strings.Join(sectionNames, ", "))
		}
		cfg.only[s] = true
	}
	if len(cfg.only) == 0 {
		for _, s := range sectionNames {
			cfg.only[s] = !contains(optIn, s)
		}
	}
	abs, err := filepath.Abs(*relayd)
	if err != nil {
		return config{}, fmt.Errorf("--relayd %s: %v", *relayd, err)
	}
	if info, err := os.Stat(abs); err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
		return config{}, fmt.Errorf("--relayd %s is not an executable file (run make build first, or give --relayd PATH)", *relayd)
	}
	cfg.relayd = abs
	if *only != nil && cfg.only["compare"] && *before == "" {
		return config{}, errors.New("--only compare needs --before: the older relayd binary to compare with")
	}
	if *before != "" {
		if cfg.before, err = filepath.Abs(*before); err != nil {
			return config{}, fmt.Errorf("--before %s: %v", *before, err)
		}
		if info, err := os.Stat(cfg.before); err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
			return config{}, fmt.Errorf("--before %s is not an executable file", *before)
		}
	}
	return cfg, nil
}

func mode(cfg config) string {
	if cfg.quick {
		return "quick (smoke)"
	}
	return "full"
}

func selected(cfg config) []string {
	var out []string
	for _, s := range sectionNames {
		if cfg.only[s] {
			out = append(out, s)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// bench holds what the sections share.
type bench struct {
	cfg      config
	cgSkip   string // why the cgroup mechanism cannot run here; "" when it can
	report   *report
	deadline time.Time // past it, sections do the fewest repetitions they can
}

// overtime is true once the run is past its deadline.
func (b *bench) overtime() bool { return time.Now().After(b.deadline) }

// cut is true when a section that began at began with budget should stop
// repeating: its budget is spent, or the run's.
func (b *bench) cut(began time.Time, budget time.Duration) bool {
	return time.Since(began) > budget || b.overtime()
}

// pick returns full, or quick with --quick.
func (b *bench) pick(full, quick int) int {
	if b.cfg.quick {
		return quick
	}
	return full
}

func (b *bench) pickDur(full, quick time.Duration) time.Duration {
	if b.cfg.quick {
		return quick
	}
	return full
}

// logf prints progress to stderr; the table goes to stdout.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "relaybench %s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// Cleanups stop what the run started (relayds, sshd, the ssh master, cgroup
// directories), also when the run is interrupted.
var (
	cleanupMu sync.Mutex
	cleanups  = map[int]func(){}
	cleanupID int
)

// atCleanup registers f to run if the run is interrupted, and returns a
// function that unregisters it.
func atCleanup(f func()) (forget func()) {
	cleanupMu.Lock()
	cleanupID++
	id := cleanupID
	cleanups[id] = f
	cleanupMu.Unlock()
	return func() {
		cleanupMu.Lock()
		delete(cleanups, id)
		cleanupMu.Unlock()
	}
}

// runCleanups runs what is still registered, newest first.
func runCleanups() {
	cleanupMu.Lock()
	ids := make([]int, 0, len(cleanups))
	for id := range cleanups {
		ids = append(ids, id)
	}
	fs := cleanups
	cleanups = map[int]func(){}
	cleanupMu.Unlock()
	sort.Sort(sort.Reverse(sort.IntSlice(ids)))
	for _, id := range ids {
		fs[id]()
	}
}

// onSignal stops what the run started when it is interrupted.
func onSignal() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	sig := <-ch
	logf("%s: stopping what this run started", sig)
	runCleanups()
	os.Exit(130)
}

// raiseNoFile raises RLIMIT_NOFILE to at least want where the hard limit
// allows it (root may raise that too). relayd inherits it: 1,000 idle
// connections need more than the common soft limit of 1024.
func raiseNoFile(want uint64) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return
	}
	if lim.Cur < want && lim.Max < want {
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: want, Max: want}) == nil {
			return // raising the hard limit takes root
		}
	}
	lim.Cur = max(lim.Cur, min(want, lim.Max))
	// Set it even when it is high enough: Go raises the soft limit of its own
	// process at start but gives children the original one, unless the
	// program sets the limit itself.
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		logf("cannot raise RLIMIT_NOFILE to %d: %v", want, err)
	}
}
