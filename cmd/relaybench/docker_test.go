package main

import (
	"os"
	"path/filepath"
	"testing"
)

// The docker section runs by default and alone with --only docker.
func TestOnlyDocker(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "relayd")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, err := parseFlags([]string{"--relayd", bin, "--only", "docker"})
	if err != nil {
		t.Fatal(err)
	}
	if got := selected(cfg); len(got) != 1 || got[0] != "docker" {
		t.Fatalf("--only docker selected %v; want [docker]", got)
	}
	if cfg, err = parseFlags([]string{"--relayd", bin}); err != nil || !cfg.only["docker"] {
		t.Fatalf("default run: docker selected %v, err %v; want true", cfg.only["docker"], err)
	}
}

// Without the docker CLI the section is skipped with a plain reason, and
// nothing is started.
func TestDockerSkippedWithoutDocker(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	b := &bench{report: &report{}}
	b.dockerSection()
	sec := b.report.Sections[0]
	if len(sec.Figures) != 2 {
		t.Fatalf("got %d figures; want 2 skipped", len(sec.Figures))
	}
	for _, f := range sec.Figures {
		if f.Skipped != "docker CLI not installed" {
			t.Errorf("%s: skipped %q; want %q", f.Name, f.Skipped, "docker CLI not installed")
		}
	}
}
