package main

import (
	"os"
	"path/filepath"
	"testing"
)

// transfer is opt-in (it moves gigabytes): a default run leaves it out,
// --only transfer runs it alone.
func TestOnlyTransfer(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "relayd")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, err := parseFlags([]string{"--relayd", bin})
	if err != nil || cfg.only["transfer"] {
		t.Fatalf("default run: transfer selected %v, err %v; want false", cfg.only["transfer"], err)
	}
	if cfg, err = parseFlags([]string{"--relayd", bin, "--only", "transfer"}); err != nil {
		t.Fatal(err)
	}
	if got := selected(cfg); len(got) != 1 || got[0] != "transfer" {
		t.Fatalf("--only transfer selected %v; want [transfer]", got)
	}
}

// Without the docker CLI every transfer figure is skipped with the
// reason, and nothing is started.
func TestTransferSkippedWithoutDocker(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	b := &bench{report: &report{}}
	b.transfer()
	sec := b.report.Sections[0]
	want := len(loopbackNames) + 15
	if sec.Name != "transfer" || len(sec.Figures) != want {
		t.Fatalf("got section %q with %d figures; want transfer with %d skipped", sec.Name, len(sec.Figures), want)
	}
	for _, f := range sec.Figures[:len(loopbackNames)] {
		if f.Skipped != "no relayd binary" {
			t.Errorf("%s: skipped %q; want %q", f.Name, f.Skipped, "no relayd binary")
		}
	}
	for _, f := range sec.Figures[len(loopbackNames):] {
		if f.Skipped != "docker CLI not installed" {
			t.Errorf("%s: skipped %q; want %q", f.Name, f.Skipped, "docker CLI not installed")
		}
	}
}

// bridge is opt-in too; without the docker CLI its rows are skipped
// with the reason.
func TestBridgeSkippedWithoutDocker(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "relayd")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, err := parseFlags([]string{"--relayd", bin})
	if err != nil || cfg.only["bridge"] {
		t.Fatalf("default run: bridge selected %v, err %v; want false", cfg.only["bridge"], err)
	}
	t.Setenv("PATH", t.TempDir())
	b := &bench{report: &report{}, cfg: config{bridgeRounds: 1}}
	b.bridge()
	sec := b.report.Sections[0]
	if sec.Name != "bridge" || len(sec.Figures) != len(bridgeNames) {
		t.Fatalf("got section %q with %d figures; want bridge with %d skipped", sec.Name, len(sec.Figures), len(bridgeNames))
	}
	for _, f := range sec.Figures {
		if f.Skipped != "docker CLI not installed" {
			t.Errorf("%s: skipped %q; want %q", f.Name, f.Skipped, "docker CLI not installed")
		}
	}
}
