package session

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/relayd/relayd/internal/exec"
)

// The /proc reading of describe (survivors.go): a survivor's uid, session,
// start time and name, the boot time, and the listening TCP sockets.

// maxDescriptors bounds the descriptors of one survivor looked at for
// listening sockets, so that a process with a million open files costs a
// bounded reply.
const maxDescriptors = 4096

// procInfo is what describe reads of one process besides its command line:
// its stat (exec.ReadStat) and its real uid.
type procInfo struct {
	exec.ProcStat
	uid int
}

// readProcInfo reads /proc/PID/stat and the Uid line of /proc/PID/status;
// false when the process is gone (or its entries unreadable).
func readProcInfo(pid int) (procInfo, bool) {
	st, err := exec.ReadStat(pid)
	if err != nil {
		return procInfo{}, false
	}
	info := procInfo{ProcStat: st}
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return procInfo{}, false
	}
	var ok bool
	if info.uid, ok = parseUID(status); !ok {
		return procInfo{}, false
	}
	return info, true
}

// parseUID returns the real uid of a /proc/PID/status ("Uid:\treal\teffective\t...").
func parseUID(status []byte) (int, bool) {
	for _, line := range bytes.Split(status, []byte{'\n'}) {
		if rest, ok := bytes.CutPrefix(line, []byte("Uid:")); ok {
			f := bytes.Fields(rest)
			if len(f) == 0 {
				return 0, false
			}
			uid, err := strconv.Atoi(string(f[0]))
			return uid, err == nil
		}
	}
	return 0, false
}

// startMs is a process's start time as survivors report it and as a
// verify's "keep" names it (protocol 4.6): ms since the Unix epoch, the
// boot time plus ticks at exec.ClockTicks a second; false when the boot time
// is unknown. The boot time is read once in relayd's life: /proc/stat's
// btime moves when the wall clock is stepped, and a start copied from one
// reply must still name the same process in a later request.
func startMs(ticks uint64) (int64, bool) {
	bt, ok := cachedBootTime()
	if !ok {
		return 0, false
	}
	return bt*1000 + int64(ticks)*1000/exec.ClockTicks, true
}

// cachedBootTime is bootTime, read once; a failed read is tried again.
var cachedBootTime = func() func() (int64, bool) {
	var (
		mu sync.Mutex
		bt int64
	)
	return func() (int64, bool) {
		mu.Lock()
		defer mu.Unlock()
		if bt == 0 {
			bt, _ = bootTime()
		}
		return bt, bt > 0
	}
}()

// bootTime returns the boot time in seconds since the Unix epoch (the
// btime line of /proc/stat).
func bootTime() (int64, bool) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20) // a machine of many CPUs has long lines
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "btime "); ok {
			bt, err := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
			return bt, err == nil && bt > 0
		}
	}
	return 0, false
}

// readListening adds the listening TCP sockets of relayd's network
// namespace (/proc/net/tcp and tcp6) to into, by inode. An unreadable
// table adds nothing.
func readListening(into map[uint64]int) {
	for _, name := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		if f, err := os.Open(name); err == nil {
			parseListening(f, into)
			f.Close()
		}
	}
}

// parseListening adds the rows of a /proc/net/tcp or tcp6 table that are
// in the LISTEN state (st 0A) to into: inode → local port. Other rows, the
// header and malformed lines are skipped.
//
//	sl  local_address rem_address   st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode ...
//	0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000 1000 0 12345 1 ...
func parseListening(r io.Reader, into map[uint64]int) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[3] != "0A" {
			continue
		}
		_, portHex, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		port, err := strconv.ParseUint(portHex, 16, 16)
		if err != nil {
			continue
		}
		ino, err := strconv.ParseUint(f[9], 10, 64)
		if err != nil || ino == 0 {
			continue
		}
		into[ino] = int(port)
	}
}

// socketInodes returns the inodes of the sockets among the first max
// descriptors of pid (links "socket:[N]" in /proc/PID/fd), with the error
// that kept the directory or a link from being read: fs.ErrPermission for
// another user's process without CAP_SYS_PTRACE (see portsDenied).
func socketInodes(pid, max int) ([]uint64, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd/"
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, _ := d.Readdirnames(max)
	var out []uint64
	var denied error
	for _, n := range names {
		link, err := os.Readlink(dir + n)
		if err != nil {
			if errors.Is(err, fs.ErrPermission) {
				denied = err
			}
			continue
		}
		if num, ok := strings.CutPrefix(link, "socket:["); ok {
			if ino, err := strconv.ParseUint(strings.TrimSuffix(num, "]"), 10, 64); err == nil {
				out = append(out, ino)
			}
		}
	}
	return out, denied
}

// readIDs returns the uid and gid that pid's real, effective and saved
// ids all are (the Uid and Gid lines of /proc/PID/status): the fsuid and
// fsgid that may read its /proc/PID/fd without CAP_SYS_PTRACE. false when
// they differ, or the process is gone.
func readIDs(pid int) (uid, gid uint32, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0, false
	}
	return parseIDs(b)
}

func parseIDs(status []byte) (uid, gid uint32, ok bool) {
	var got int
	for _, line := range bytes.Split(status, []byte{'\n'}) {
		for _, key := range []string{"Uid:", "Gid:"} {
			rest, found := bytes.CutPrefix(line, []byte(key))
			if !found {
				continue
			}
			f := bytes.Fields(rest)
			if len(f) < 3 {
				return 0, 0, false
			}
			id, err := strconv.ParseUint(string(f[0]), 10, 32)
			if err != nil || !bytes.Equal(f[1], f[0]) || !bytes.Equal(f[2], f[0]) {
				return 0, 0, false
			}
			if key == "Uid:" {
				uid = uint32(id)
			} else {
				gid = uint32(id)
			}
			got++
		}
	}
	return uid, gid, got == 2
}
