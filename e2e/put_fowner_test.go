package e2e

import (
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// A put with "user" and "mode" sets the mode with the user's rights, on
// the descriptor of the file the user created: relayd needs no
// CAP_FOWNER, which Kubernetes' baseline Pod Security drops (issue 44:
// "setting the mode of ...: permission denied"). relayd runs here without
// CAP_FOWNER in any set (setpriv).
func TestFilesPutModeWithoutFowner(t *testing.T) {
	needRoot(t)
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv(1) not installed (util-linux)")
	}
	dir, err := os.MkdirTemp("", "relayd-fowner-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chown(dir, 65534, 65534); err != nil { // nobody's, as /app is the task user's
		t.Fatal(err)
	}
	d := prepare(t, opts{})
	old := d.cmd
	d.cmd = exec.Command(setpriv, append([]string{"--inh-caps", "-fowner", "--bounding-set", "-fowner", "--"}, old.Args...)...)
	d.cmd.Dir, d.cmd.Env, d.cmd.Stdout, d.cmd.Stderr = old.Dir, old.Env, old.Stdout, old.Stderr
	d.cmd.SysProcAttr = old.SysProcAttr
	d.start()
	defer d.stopClean()
	status, err := os.ReadFile("/proc/" + strconv.Itoa(d.cmd.Process.Pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, set := range []string{"CapEff", "CapBnd"} {
		if hasCap(t, status, set, unix.CAP_FOWNER) {
			t.Fatalf("relayd holds CAP_FOWNER in %s: the test would show nothing", set)
		}
	}
	cl := d.connect()
	target := filepath.Join(dir, "put.bin")
	for _, mode := range []string{"0640", "0755", "2750"} {
		r := cl.request(msg{"kind": "put", "path": target, "user": "nobody", "mode": mode,
			"data": base64.StdEncoding.EncodeToString([]byte("as nobody " + mode))})
		if r["kind"] != "stored" {
			t.Fatalf("put with user nobody and mode %s, relayd without CAP_FOWNER: got %v; want stored", mode, r)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(target, &st); err != nil {
			t.Fatal(err)
		}
		want, _ := strconv.ParseUint(mode, 8, 32)
		if st.Mode&0o7777 != uint32(want) || st.Uid != 65534 {
			t.Fatalf("mode %s: the file has mode %04o, uid %d; want %s, nobody's", mode, st.Mode&0o7777, st.Uid, mode)
		}
	}
}
