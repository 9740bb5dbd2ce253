package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/rs/zerolog"

	"github.com/relayd/relayd/internal/env"
	"github.com/relayd/relayd/internal/session"
)

// egressRequiredVar is set to 1 in the relay's environment by Maka's
// controller when the trial's egress policy must hold (relay_agent.py,
// _require_constrained_subject).
const egressRequiredVar = "MAKA_EVAL_EGRESS_REQUIRED"

// checkIsolation refuses to start (protocol section 9) a relayd whose
// subjects would escape the network isolation asked of it: outside the
// network namespace --require-netns names, or, with
// MAKA_EVAL_EGRESS_REQUIRED=1, holding NET_RAW or NET_ADMIN that
// --drop-capabilities does not remove, as Maka's relay refuses such a
// subject. The refusal is one line; nil lets relayd start.
func checkIsolation(o options, getenv func(string) string, log zerolog.Logger) (env.Netns, error) {
	var netns env.Netns
	if o.requireNetns != "" {
		var err error
		if netns, err = env.ParseNetns(o.requireNetns); err != nil {
			return netns, fmt.Errorf("--require-netns %v", err) // validate saw it first
		}
		if err := env.CheckNetns(netns); err != nil {
			return netns, fmt.Errorf("--require-netns %s: %v: start relayd in that namespace (compose: network_mode: \"service:NAME\" of the service that holds the egress policy), or name the namespace relayd runs in", o.requireNetns, err)
		}
	}
	if getenv(egressRequiredVar) != "1" {
		return netns, nil
	}
	if o.requireNetns == "" {
		log.Warn().Msg(egressRequiredVar + "=1 without --require-netns: relayd cannot check that its subjects share the network namespace the egress policy was applied to")
	}
	var kept []int
	for _, c := range env.EgressBypass {
		if !slices.Contains(o.dropCaps, c) {
			kept = append(kept, c)
		}
	}
	held, where, err := env.HeldCapabilities(kept)
	if err != nil {
		return netns, fmt.Errorf("%s=1: %v: relayd cannot tell whether its subjects could bypass the Eval egress policy", egressRequiredVar, err)
	}
	if len(held) > 0 {
		names := strings.Join(held, ", ")
		return netns, fmt.Errorf("%s=1: relayd holds %s (in %s), which its subjects inherit and which bypasses the Eval egress policy (Maka's relay refuses such a subject): drop it from relayd's container (compose: cap_drop: [%s]) or give --drop-capabilities %s",
			egressRequiredVar, names, where, names, strings.Join(held, ","))
	}
	return netns, nil
}

// prepareArtifactsDir checks --artifacts-dir before anything runs: with the
// relayd layout it must exist; with the maka layout relayd makes it as
// Maka's relay does (mkdir -p, chmod 700), and does so again per execution.
func prepareArtifactsDir(o options) error {
	switch {
	case o.artifactsDir == "":
		return nil
	case o.artifactsLayout == session.LayoutMaka:
		if err := session.MakeMakaDir(o.artifactsDir); err != nil {
			return fmt.Errorf("--artifacts-dir %s (--artifacts-layout maka): %v: relayd makes it, mode 0700, as Maka's relay does; give a directory relayd's user may create and own", o.artifactsDir, unwrapPath(err))
		}
		return nil
	}
	if err := env.CheckDir(o.artifactsDir); err != nil {
		return dirFlagError("artifacts-dir", err)
	}
	return nil
}

// unwrapPath drops the path an *fs.PathError repeats.
func unwrapPath(err error) error {
	if u := errors.Unwrap(err); u != nil {
		return u
	}
	return err
}
