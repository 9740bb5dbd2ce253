package exec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// leftAloneXattr marks the cgroup leaf of an exited subject whose
// survivors are left alone: a successor leaves them alone too.
const leftAloneXattr = "user.relayd.left-alone"

// CgroupLeftovers finds, under base, the populated execution leaves of
// relayds that no longer run. A relayd runs while its daemon leaf holds a
// process that is not a shim (relayd moves itself there at startup and out
// at exit; its idle shims live there too, and outlive it by the moment
// they take to see its socket end): the
// kernel's word, which holds whatever a pid in the leaf's name means in
// this PID namespace, and also for a subtree named after this relayd's own
// pid, left by an earlier relayd that had it. So CgroupLeftovers must run
// before this relayd moves into its own subtree (NewCgroups).
//
// A leaf marked left alone holds the survivors of an exited subject (rule
// 6.1): it is not returned, and a note says so. A leaf that holds nothing
// is not returned either: CleanStale removes it.
func CgroupLeftovers(base string) (found []*Leftover, notes []string) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return nil, []string{fmt.Sprintf("cannot list %s: %v", base, err)}
	}
	for _, e := range entries {
		pidText, ok := strings.CutPrefix(e.Name(), "relayd-")
		if !ok || !e.IsDir() {
			continue
		}
		pid, err := strconv.Atoi(pidText)
		if err != nil {
			continue
		}
		sub := filepath.Join(base, e.Name())
		runs, err := holdsRelayd(filepath.Join(sub, "daemon"))
		if errors.Is(err, os.ErrNotExist) {
			runs, err = false, nil
		}
		if err != nil {
			notes = append(notes, fmt.Sprintf("%s: cannot tell whether its relayd runs (%v); left alone", sub, err))
			continue
		}
		if runs {
			continue
		}
		leaves, _ := os.ReadDir(sub)
		for _, l := range leaves {
			if !l.IsDir() || l.Name() == "daemon" {
				continue
			}
			dir := filepath.Join(sub, l.Name())
			if full, err := cgroupPopulated(dir); err != nil || !full {
				continue
			}
			if leftAlone(dir) {
				notes = append(notes, fmt.Sprintf("%s: survivors of an exited subject; left alone (rule 6.1)", dir))
				continue
			}
			_, kerr := os.Stat(filepath.Join(dir, "cgroup.kill"))
			sc := &cgScope{c: &Cgroups{hasKill: kerr == nil && !faultNoCgroupKill()}, dir: dir}
			found = append(found, &Leftover{Name: l.Name(), Mechanism: Cgroup, Relayd: pid, Where: dir, scope: sc,
				finish: func(settled bool) error {
					if !settled {
						return nil
					}
					return removeLeftoverTree(dir)
				}})
		}
	}
	return found, notes
}

// cgroupPopulated reads "populated" from a cgroup's cgroup.events.
// holdsRelayd reports whether the daemon leaf dir holds a process that is
// not one of relayd's shims.
func holdsRelayd(dir string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return false, err
	}
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return true, nil // unreadable: count it as relayd
		}
		argv := Argv(pid)
		if len(argv) == 1 && argv[0] == ShimArg0 {
			continue
		}
		if argv == nil {
			if _, err := os.Stat("/proc/" + f); err != nil {
				continue // ended since
			}
		}
		return true, nil
	}
	return false, nil
}

func cgroupPopulated(dir string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "populated "); ok {
			return v != "0", nil
		}
	}
	return false, fmt.Errorf("%s/cgroup.events has no populated line", dir)
}

// markLeftAlone marks the leaf of an exited subject whose survivors are left
// alone, so that a relayd started after this one dies leaves them alone
// too. cgroup v2 keeps user extended attributes since Linux 5.7, which the
// cgroup mechanism needs anyway (CLONE_INTO_CGROUP).
func markLeftAlone(dir string) {
	_ = unix.Setxattr(dir, leftAloneXattr, []byte("1"), 0)
}

func leftAlone(dir string) bool {
	_, err := unix.Getxattr(dir, leftAloneXattr, nil)
	return err == nil
}

// removeLeftoverTree removes an empty cgroup and the cgroups below it,
// deepest first.
func removeLeftoverTree(dir string) error {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			_ = removeLeftoverTree(filepath.Join(dir, e.Name()))
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("exec.Leftover: %w", err)
	}
	return nil
}
