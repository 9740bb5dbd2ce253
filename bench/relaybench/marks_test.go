package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayd/relayd/internal/testharness"
)

// The marks section runs by default and alone with --only marks.
func TestOnlyMarks(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "relayd")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, err := parseFlags([]string{"--relayd", bin})
	if err != nil || !cfg.only["marks"] {
		t.Fatalf("default run: marks selected %v, err %v; want true", cfg.only["marks"], err)
	}
	if cfg, err = parseFlags([]string{"--relayd", bin, "--only", "marks"}); err != nil {
		t.Fatal(err)
	}
	if got := selected(cfg); len(got) != 1 || got[0] != "marks" {
		t.Fatalf("--only marks selected %v; want [marks]", got)
	}
}

// Without a relayd every row is skipped with the reason, each with its
// goal.
func TestMarksSkippedWithoutRelayd(t *testing.T) {
	b := &bench{report: &report{}}
	b.marks()
	sec := b.report.Sections[0]
	if sec.Name != "marks" || len(sec.Figures) != len(marksNames) {
		t.Fatalf("got section %q with %d figures; want marks with %d", sec.Name, len(sec.Figures), len(marksNames))
	}
	for i, f := range sec.Figures {
		if f.Name != marksNames[i] || f.Skipped != "no relayd binary" {
			t.Errorf("row %d: %q skipped %q; want %q skipped %q", i, f.Name, f.Skipped, marksNames[i], "no relayd binary")
		}
	}
}

// The section against a real relayd on a tiny tree, one turn: every
// relayd row measured (the replies checked by the section itself), and
// with neither git nor docker on PATH their rows skipped, saying so.
func TestMarksSmoke(t *testing.T) {
	cp, err := exec.LookPath("cp")
	if err != nil {
		t.Skip("cp not installed")
	}
	bin := filepath.Join(t.TempDir(), "relayd")
	if err := testharness.Build(bin, "relayd"); err != nil {
		t.Fatal(err)
	}
	path := t.TempDir() // cp alone: no git, no docker
	if err := os.Symlink(cp, filepath.Join(path, "cp")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", path)
	b := &bench{cfg: config{relayd: bin}, report: &report{}, deadline: time.Now().Add(time.Hour)}
	b.marksWith(marksShape{dirs: 3, perDir: 10, bigDirs: 2, bigPerDir: 50, turns: 1, minTurns: 1, budget: time.Minute, docker: true})
	sec := b.report.Sections[0]
	if len(sec.Figures) != len(marksNames) {
		t.Fatalf("%d figures; want %d", len(sec.Figures), len(marksNames))
	}
	skips := map[int]string{1: "git not installed", 7: "docker CLI not installed"}
	for i, f := range sec.Figures {
		if why, ok := skips[i]; ok {
			if f.Skipped != why {
				t.Errorf("%s: skipped %q; want %q", f.Name, f.Skipped, why)
			}
			continue
		}
		if f.Skipped != "" || f.N != 1 || f.Median <= 0 {
			t.Errorf("%s: skipped %q, n %d, median %v; want one sample", f.Name, f.Skipped, f.N, f.Median)
		}
		if baseline := i == 3; f.Target == "" && !baseline {
			t.Errorf("%s: no goal", f.Name)
		}
	}
	for row, base := range map[int]int{2: 3, 4: 2, 5: 2} {
		if f := sec.Figures[row]; f.Baseline == nil || f.Baseline.Name != marksNames[base] || f.Met == nil {
			t.Errorf("%s: baseline %+v, met %v; want %q and a verdict", f.Name, f.Baseline, f.Met, marksNames[base])
		}
	}
	if !strings.Contains(b.report.table(), "== Marks (protocol 4.9)") {
		t.Errorf("the table has no marks section:\n%s", b.report.table())
	}
}
