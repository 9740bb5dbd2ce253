package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/rs/zerolog"

	"github.com/relayd/relayd/internal/env"
	"github.com/relayd/relayd/internal/exec"
	"github.com/relayd/relayd/internal/teardown"
)

// chooseScope picks the scope mechanism, the one place where it is
// chosen: cgroup when --scope is cgroup or auto and a cgroup v2 hierarchy
// is proven to work here, else process-group. --scope cgroup without a
// working hierarchy is an error, and so is an explicit --cgroup-root that
// does not work: auto falls back to process-group only from the cgroup
// relayd found itself, not from one it was told to use. Either way every
// subject is started by a shim of its own (internal/exec/shimproc_linux.go).
func chooseScope(ctx context.Context, o options, shims *exec.Shims, host env.Host, log zerolog.Logger) (exec.Mechanism, error) {
	pg := exec.NewProcessGroups(shims)
	if o.scope == "process-group" {
		log.Info().Str("scope", pg.Name()).Str("requested", o.scope).Bool("pid1", host.PID1).
			Bool("subreaper", host.Subreaper).Str("why", "requested").Msg("scope mechanism chosen")
		return pg, nil
	}
	cg, err := env.FindCgroup2(o.cgroupRoot)
	var c *exec.Cgroups
	if err == nil {
		if stale := exec.CleanStale(cg.Base); len(stale) > 0 {
			log.Info().Strs("removed", stale).Msg("removed empty cgroup leaves of an earlier relayd")
		}
		home := cg.Base
		if o.cgroupRoot != "" {
			if own, err := env.FindCgroup2(""); err == nil && !own.Outside {
				home = own.Base
			}
		}
		c, err = exec.NewCgroups(ctx, shims, cg.Base, home)
	}
	if err != nil {
		if o.scope == "cgroup" {
			return nil, fmt.Errorf("--scope cgroup: no usable cgroup v2 hierarchy: %v", err)
		}
		if o.cgroupRoot != "" {
			return nil, fmt.Errorf("--cgroup-root %s cannot be used: %v; --scope auto falls back to process-group only without --cgroup-root", o.cgroupRoot, err)
		}
		log.Info().Str("scope", pg.Name()).Str("requested", o.scope).Bool("pid1", host.PID1).
			Bool("subreaper", host.Subreaper).Str("why", "cgroup v2 unusable: "+err.Error()).
			Msg("scope mechanism chosen")
		return pg, nil
	}
	why := "a cgroup v2 leaf per execution was created, used and removed at startup"
	if c.EntersByShim() {
		why += "; clone3 is refused here (a seccomp filter), so each command's shim moves itself into its leaf for the fork"
	}
	if cg.Outside {
		why += "; relayd's own cgroup is in no cgroup2 mount, so the top of " + cg.Mount + " is the base"
	}
	log.Info().Str("scope", exec.Cgroup).Str("requested", o.scope).Bool("pid1", host.PID1).
		Str("subtree", c.Subtree()).Str("why", why).Msg("scope mechanism chosen")
	return c, nil
}

// destroyer builds the destroy step of protocol section 8.
func destroyer(o options, r *exec.Reaper, host env.Host, log zerolog.Logger) teardown.DestroyOptions {
	d := teardown.DestroyOptions{KillNamespace: host.PID1}
	if o.destroyCommand != "" {
		command := o.destroyCommand
		d.Command = func(deadline time.Time) error {
			return exec.RunBounded(r, []string{"/bin/sh", "-c", command}, env.Base(os.Environ()), deadline)
		}
	}
	return d
}

// limiter is what the mechanism can say about the cgroup limits of
// protocol 4.8 (memoryBytes, pids): nil for a mechanism without cgroups.
func limiter(mech exec.Mechanism) func(name string) error {
	if cg, ok := mech.(*exec.Cgroups); ok {
		return cg.CanLimit
	}
	return nil
}

// checkDefaultLimits refuses --default-limits that name a cgroup limit the
// mechanism cannot set, in one line that says why.
func checkDefaultLimits(lim map[string]uint64, mech string, canLimit func(string) error) error {
	for _, name := range []string{"memoryBytes", "pids"} {
		if _, ok := lim[name]; !ok {
			continue
		}
		if canLimit == nil {
			return fmt.Errorf("--default-limits: %s needs the cgroup mechanism (the scope is %s)", name, mech)
		}
		if err := canLimit(name); err != nil {
			return fmt.Errorf("--default-limits: %s: %v", name, err)
		}
	}
	return nil
}
