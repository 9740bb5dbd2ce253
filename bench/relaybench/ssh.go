package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// sshServer is a private sshd on loopback, with its own config, host key
// and authorized_keys in a temp dir, and a master connection that the
// measured ssh commands multiplex over: the alternative people use today.
type sshServer struct {
	dir       string
	sshPath   string
	host      string // user@127.0.0.1
	opts      []string
	sshd      *exec.Cmd
	exited    chan struct{}
	logPath   string // sshd's stderr (a file, not a pipe: its children inherit it)
	masterPID int
	forget    func()
}

// startSSH starts sshd and the master connection, or says why it cannot.
func (b *bench) startSSH() (*sshServer, string) {
	sshd, why := b.findSSHD()
	if why != "" {
		return nil, why
	}
	sshPath, err1 := exec.LookPath("ssh")
	keygen, err2 := exec.LookPath("ssh-keygen")
	if err1 != nil || err2 != nil {
		return nil, "ssh or ssh-keygen not found (package openssh-client)"
	}
	me, err := user.Current()
	if err != nil {
		return nil, "cannot tell this user's name: " + err.Error()
	}
	dir, err := os.MkdirTemp("", "relaybench-ssh-")
	if err != nil {
		return nil, err.Error()
	}
	s := &sshServer{dir: dir, sshPath: sshPath, host: me.Username + "@127.0.0.1", exited: make(chan struct{}),
		logPath: filepath.Join(dir, "sshd.log")}
	s.forget = atCleanup(s.stop)
	fail := func(format string, args ...any) (*sshServer, string) {
		s.stop()
		return nil, fmt.Sprintf(format, args...)
	}
	for _, key := range []string{"hostkey", "clientkey"} {
		if out, err := exec.Command(keygen, "-q", "-t", "ed25519", "-N", "", "-C", "relaybench", "-f", filepath.Join(dir, key)).CombinedOutput(); err != nil {
			return fail("ssh-keygen: %v: %s", err, bytes.TrimSpace(out))
		}
	}
	pub, err := os.ReadFile(filepath.Join(dir, "clientkey.pub"))
	if err != nil {
		return fail("%v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), pub, 0o600); err != nil {
		return fail("%v", err)
	}
	hostPub, err := os.ReadFile(filepath.Join(dir, "hostkey.pub"))
	if err != nil {
		return fail("%v", err)
	}
	port, err := freePort()
	if err != nil {
		return fail("no free port: %v", err)
	}
	known := fmt.Sprintf("[127.0.0.1]:%d %s", port, hostPub)
	if err := os.WriteFile(filepath.Join(dir, "known_hosts"), []byte(known), 0o600); err != nil {
		return fail("%v", err)
	}
	// The session's HOME is an empty directory: sshd runs the command with
	// the user's shell, and bash reads ~/.bashrc when sshd runs it, which can
	// cost more than everything else (pyenv's init takes seconds). ssh is
	// measured at its best, without any account's rc files.
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o755); err != nil {
		return fail("%v", err)
	}
	config := strings.Join([]string{
		"SetEnv HOME=" + home,
		"ListenAddress 127.0.0.1",
		"HostKey " + filepath.Join(dir, "hostkey"),
		"PidFile " + filepath.Join(dir, "sshd.pid"),
		"AuthorizedKeysFile " + filepath.Join(dir, "authorized_keys"),
		"UsePAM no",
		"StrictModes no",
		"PermitRootLogin prohibit-password",
		"PubkeyAuthentication yes",
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"MaxSessions 100",
		"LogLevel ERROR",
	}, "\n") + "\n"
	configPath := filepath.Join(dir, "sshd_config")
	if err := os.WriteFile(configPath, []byte(config), 0o600); err != nil {
		return fail("%v", err)
	}
	// sshd refuses to start without its privilege separation directory,
	// which the init system makes at boot; a container has none.
	if _, err := os.Stat("/run/sshd"); errors.Is(err, os.ErrNotExist) && os.Geteuid() == 0 {
		if err := os.MkdirAll("/run/sshd", 0o755); err == nil {
			b.report.note("made /run/sshd, sshd's privilege separation directory, which was missing")
		}
	}
	logFile, err := os.Create(s.logPath)
	if err != nil {
		return fail("%v", err)
	}
	defer logFile.Close()
	s.sshd = exec.Command(sshd, "-D", "-e", "-f", configPath, "-p", strconv.Itoa(port))
	s.sshd.Stderr = logFile
	if err := s.sshd.Start(); err != nil {
		return fail("starting sshd: %v", err)
	}
	go func() { _ = s.sshd.Wait(); close(s.exited) }() // waits for this pid only
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-s.exited:
			return fail("sshd exited at start: %s", s.log())
		default:
		}
		if time.Now().After(deadline) {
			return fail("sshd did not listen on %s within 10s", addr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.opts = []string{"-F", "/dev/null", "-p", strconv.Itoa(port), "-i", filepath.Join(dir, "clientkey"),
		"-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
		"-o", "UserKnownHostsFile=" + filepath.Join(dir, "known_hosts"), "-o", "LogLevel=ERROR",
		"-o", "ControlPath=" + filepath.Join(dir, "master.sock")}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// -f: into the background once authenticated; the master is then no
	// child of this process, and keeps its stderr (a file here, so that
	// nothing waits for it to close). Its pid comes from -O check, for stop.
	master := exec.CommandContext(ctx, sshPath, append(append([]string{"-M", "-fN"}, s.opts...), s.host)...)
	master.Stdout, master.Stderr = logFile, logFile
	if err := master.Run(); err != nil {
		return fail("ssh master connection: %v: %s", err, s.log())
	}
	out, err := exec.CommandContext(ctx, sshPath, append(append([]string{}, s.opts...), "-O", "check", s.host)...).CombinedOutput()
	if err != nil {
		return fail("ssh -O check: %v: %s", err, bytes.TrimSpace(out))
	}
	if m := regexp.MustCompile(`pid=(\d+)`).FindSubmatch(out); m != nil {
		s.masterPID, _ = strconv.Atoi(string(m[1]))
	}
	if err := s.trueRoundTrip(); err != nil {
		return fail("ssh %s /bin/true: %v", s.host, err)
	}
	return s, ""
}

// log is the end of what sshd and the master connection wrote.
func (s *sshServer) log() string {
	b, _ := os.ReadFile(s.logPath)
	b = bytes.TrimSpace(b)
	if len(b) > 500 {
		b = b[len(b)-500:]
	}
	return string(b)
}

// trueRoundTrip runs ssh HOST /bin/true over the master connection.
func (s *sshServer) trueRoundTrip() error {
	args := append(append([]string{}, s.opts...), "-o", "ControlMaster=no", s.host, "/bin/true")
	cmd := exec.Command(s.sshPath, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%v: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	return nil
}

// stop ends the master connection and sshd, the ones this run started.
func (s *sshServer) stop() {
	defer s.forget()
	if s.opts != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = exec.CommandContext(ctx, s.sshPath, append(append([]string{}, s.opts...), "-O", "exit", s.host)...).Run()
		cancel()
	}
	if s.masterPID > 0 {
		for i := 0; i < 200 && alive(s.masterPID); i++ {
			time.Sleep(10 * time.Millisecond)
		}
		if alive(s.masterPID) {
			_ = syscall.Kill(s.masterPID, syscall.SIGTERM) // the master this run started
		}
	}
	if s.sshd != nil && s.sshd.Process != nil {
		select {
		case <-s.exited:
		default:
			_ = s.sshd.Process.Signal(syscall.SIGTERM)
			select {
			case <-s.exited:
			case <-time.After(5 * time.Second):
				_ = s.sshd.Process.Kill()
				<-s.exited
			}
		}
	}
	os.RemoveAll(s.dir)
}

// findSSHD finds sshd, installing OpenSSH with apt-get when it is missing,
// this process is root and --install-ssh asked for it.
func (b *bench) findSSHD() (path, why string) {
	look := func() string {
		if _, err := os.Stat("/usr/sbin/sshd"); err == nil {
			return "/usr/sbin/sshd"
		}
		if p, err := exec.LookPath("sshd"); err == nil {
			return p
		}
		return ""
	}
	if p := look(); p != "" {
		return p, ""
	}
	_, noAptGet := exec.LookPath("apt-get")
	if why := sshdMissing(b.cfg.installSSH, os.Geteuid(), noAptGet == nil); why != "" {
		return "", why
	}
	logf("ssh: sshd is missing; apt-get update && apt-get install -y openssh-server openssh-client")
	apt := func(timeout time.Duration, args ...string) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		out, err := cmd.CombinedOutput()
		if err != nil {
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			return fmt.Errorf("apt-get %s: %v: %s", args[0], err, lines[len(lines)-1])
		}
		return nil
	}
	if err := apt(3*time.Minute, "update"); err != nil {
		return "", "cannot install openssh-server: " + err.Error()
	}
	if err := apt(4*time.Minute, "install", "-y", "--no-install-recommends", "openssh-server", "openssh-client"); err != nil {
		return "", "cannot install openssh-server: " + err.Error()
	}
	b.report.note("installed openssh-server and openssh-client with apt-get for the ssh figure")
	if p := look(); p != "" {
		return p, ""
	}
	return "", "apt-get installed openssh-server, but sshd is still not found"
}

// sshdMissing says why the ssh comparison is skipped when sshd is not
// installed, or "" when OpenSSH is to be installed: only when the person
// running the benchmark asked for it (--install-ssh), as root, with apt-get.
// A benchmark does not change the machine it measures on its own.
func sshdMissing(installSSH bool, euid int, haveAptGet bool) string {
	switch {
	case !installSSH:
		return "sshd is not installed; make bench BENCH_INSTALL_SSH=1 (relaybench --install-ssh) installs openssh-server with apt-get, as root"
	case euid != 0:
		return "sshd is not installed, and installing openssh-server with apt-get (--install-ssh) takes root"
	case !haveAptGet:
		return "sshd is not installed, and there is no apt-get to install openssh-server with"
	}
	return ""
}

func sshUser() string {
	if me, err := user.Current(); err == nil {
		return me.Username + "@127.0.0.1"
	}
	return "USER@127.0.0.1"
}

func sshVersion() string {
	out, _ := exec.Command("ssh", "-V").CombinedOutput()
	if f := strings.Fields(string(out)); len(f) > 0 {
		return strings.TrimSuffix(f[0], ",")
	}
	return "unknown"
}

// freePort finds a loopback port nobody listens on (it may be taken again
// before it is used; callers retry).
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
