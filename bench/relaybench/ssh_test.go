package main

import (
	"strings"
	"testing"
)

// OpenSSH is installed only when asked for: a benchmark run must not change
// the machine it measures unless the person running it opted in.
func TestSSHDMissing(t *testing.T) {
	tests := []struct {
		name       string
		installSSH bool
		euid       int
		haveApt    bool
		want       []string // substrings of the reason; nil: install
	}{
		{"not asked, as root", false, 0, true, []string{"sshd is not installed", "make bench BENCH_INSTALL_SSH=1", "--install-ssh"}},
		{"not asked, as a user", false, 1000, true, []string{"sshd is not installed", "BENCH_INSTALL_SSH=1"}},
		{"asked, not root", true, 1000, true, []string{"sshd is not installed", "root"}},
		{"asked, root, no apt-get", true, 0, false, []string{"sshd is not installed", "no apt-get"}},
		{"asked, root, apt-get", true, 0, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := sshdMissing(tt.installSSH, tt.euid, tt.haveApt)
			if tt.want == nil {
				if got != "" {
					t.Fatalf("sshdMissing(%v, %d, %v) = %q; want \"\" (install)", tt.installSSH, tt.euid, tt.haveApt, got)
				}
				return
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Fatalf("sshdMissing(%v, %d, %v) = %q; want it to contain %q", tt.installSSH, tt.euid, tt.haveApt, got, w)
				}
			}
		})
	}
}

func TestInstallSSHIsOptIn(t *testing.T) {
	tests := []struct {
		args []string
		want bool
	}{
		{[]string{"--relayd", "/bin/true"}, false},
		{[]string{"--relayd", "/bin/true", "--install-ssh"}, true},
	}
	for _, tt := range tests {
		cfg, err := parseFlags(tt.args)
		if err != nil {
			t.Fatalf("parseFlags(%q) = %v", tt.args, err)
		}
		if cfg.installSSH != tt.want {
			t.Errorf("parseFlags(%q).installSSH = %v; want %v", tt.args, cfg.installSSH, tt.want)
		}
	}
}
