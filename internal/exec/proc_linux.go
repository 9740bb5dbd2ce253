package exec

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// maxArgvBytes bounds what Argv reads of one command line.
const maxArgvBytes = 4096

// procEntry is one process as /proc/PID/stat shows it, as a look at a
// scope reads it (parseStat, with no allocation); ProcStat is the same
// line for the rest of relayd and its tests.
type procEntry struct {
	pid, ppid, pgrp, sid int
	start                uint64 // start time in clock ticks since boot: with pid, an identity
	state                byte
	threads              int
	utime, stime         uint64 // clock ticks of its threads (not its children) in user and system mode
	cutime, cstime       int64  // clock ticks of the children it reaped, in user and system mode
}

// ClockTicks is the unit of /proc/PID/stat's times: USER_HZ, 100 on every
// Linux architecture Go supports (sysconf(_SC_CLK_TCK) needs cgo).
const ClockTicks = 100

// ProcStat is what /proc/PID/stat says of a process: the one reader of
// that line (ReadStat; parseStat under it) for relayd and its tests.
type ProcStat struct {
	Comm           string // the kernel's name of the process, at most 15 bytes
	State          byte   // 'R', 'S', 'D', 'Z', 'T', ...
	PPID           int
	PGID           int
	SID            int
	Threads        int
	UTime, STime   uint64 // clock ticks of its threads (not its children) in user and system mode
	CUTime, CSTime int64  // clock ticks of the children it reaped, in user and system mode
	Start          uint64 // start time in clock ticks since boot: with the pid, an identity
}

// ReadStat reads /proc/PID/stat; an error when the process is gone (or
// its stat unreadable or malformed).
func ReadStat(pid int) (ProcStat, error) {
	b, err := readSmall("/proc/"+strconv.Itoa(pid)+"/stat", make([]byte, 512))
	if err != nil {
		return ProcStat{}, err
	}
	return procStatOf(pid, b)
}

// procStatOf is parseStat's reading of a stat line, with the command name.
func procStatOf(pid int, b []byte) (ProcStat, error) {
	e, err := parseStat(pid, b)
	if err != nil {
		return ProcStat{}, err
	}
	return ProcStat{Comm: string(b[bytes.IndexByte(b, '(')+1 : bytes.LastIndexByte(b, ')')]),
		State: e.state, PPID: e.ppid, PGID: e.pgrp, SID: e.sid, Threads: e.threads,
		UTime: e.utime, STime: e.stime, CUTime: e.cutime, CSTime: e.cstime, Start: e.start}, nil
}

// dead reports whether the process has ended. A zombie main thread is not
// enough: while another thread of it runs, the process lives (its stat
// counts the zombie main thread among its threads).
func (p procEntry) dead() bool {
	return (p.state == 'Z' || p.state == 'X' || p.state == 'x') && p.threads <= 1
}

// procTable reads every process of /proc. An error means the scan is not
// complete and proves nothing; processes that end during the scan are skipped.
func procTable(root string) (map[int]procEntry, error) {
	d, err := os.Open(root)
	if err != nil {
		return nil, fmt.Errorf("exec.procTable: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("exec.procTable: %w", err)
	}
	table := make(map[int]procEntry, len(names))
	buf := make([]byte, 1024)
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid <= 0 {
			continue
		}
		e, err := readStat(root, pid, buf)
		if err != nil {
			continue // ended while we looked
		}
		table[pid] = e
	}
	if len(table) == 0 {
		return nil, fmt.Errorf("exec.procTable: %s lists no process", root)
	}
	return table, nil
}

// readStat parses /proc/PID/stat.
func readStat(root string, pid int, buf []byte) (procEntry, error) {
	fd, err := unix.Open(root+"/"+strconv.Itoa(pid)+"/stat", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return procEntry{}, err
	}
	n, err := unix.Read(fd, buf)
	unix.Close(fd)
	if err != nil {
		return procEntry{}, err
	}
	return parseStat(pid, buf[:n])
}

func parseStat(pid int, b []byte) (procEntry, error) {
	// The command name may hold spaces and parentheses: it starts after
	// the first '(', and fields start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if open := bytes.IndexByte(b, '('); open < 0 || i < open || i+2 >= len(b) {
		return procEntry{}, fmt.Errorf("exec.parseStat %d: malformed", pid)
	}
	// state(3) ppid(4) pgrp(5) session(6) ... starttime(22), counted from 1
	// over the whole line: the first 20 fields after the name, split in
	// place (a look reads one stat per process, so no allocation here).
	var fields [20][]byte
	n := 0
	for rest := b[i+2:]; n < len(fields); n++ {
		j := 0
		for j < len(rest) && asciiSpace(rest[j]) {
			j++
		}
		rest = rest[j:]
		if len(rest) == 0 {
			break
		}
		k := 0
		for k < len(rest) && !asciiSpace(rest[k]) {
			k++
		}
		fields[n], rest = rest[:k], rest[k:]
	}
	if n < len(fields) {
		return procEntry{}, fmt.Errorf("exec.parseStat %d: %d fields", pid, n)
	}
	if len(fields[0]) != 1 {
		return procEntry{}, fmt.Errorf("exec.parseStat %d: state %q", pid, fields[0])
	}
	e := procEntry{pid: pid, state: fields[0][0]}
	var err error
	if e.ppid, err = strconv.Atoi(string(fields[1])); err != nil {
		return e, err
	}
	if e.pgrp, err = strconv.Atoi(string(fields[2])); err != nil {
		return e, err
	}
	if e.sid, err = strconv.Atoi(string(fields[3])); err != nil {
		return e, err
	}
	if e.utime, err = strconv.ParseUint(string(fields[11]), 10, 64); err != nil {
		return e, err
	}
	if e.stime, err = strconv.ParseUint(string(fields[12]), 10, 64); err != nil {
		return e, err
	}
	if e.cutime, err = strconv.ParseInt(string(fields[13]), 10, 64); err != nil {
		return e, err
	}
	if e.cstime, err = strconv.ParseInt(string(fields[14]), 10, 64); err != nil {
		return e, err
	}
	if e.threads, err = strconv.Atoi(string(fields[17])); err != nil {
		return e, err
	}
	if e.start, err = strconv.ParseUint(string(fields[19]), 10, 64); err != nil {
		return e, err
	}
	return e, nil
}

func asciiSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\t' }

// canWalk reports whether the kernel lists children (/proc/PID/task/TID/children,
// CONFIG_PROC_CHILDREN), which lets a look follow the process tree instead
// of reading every process.
func canWalk(root string, self int) bool {
	_, err := taskChildren(root, self, 1)
	return err == nil
}

// walkInto adds to table every process reachable through children links
// from queue, reading each one's stat and the children of each of its
// threads. A process that ends while it is walked is skipped; its children,
// handed to a reaper, appear in the next read of the reaper's children.
func walkInto(root string, self int, table map[int]procEntry, queue []int, buf []byte) {
	for i := 0; i < len(queue); i++ {
		pid := queue[i]
		if _, seen := table[pid]; seen || pid == self || pid <= 0 {
			continue
		}
		e, err := readStat(root, pid, buf)
		if err != nil {
			continue
		}
		table[pid] = e
		if e.dead() {
			continue
		}
		threads := e.threads
		if e.state == 'Z' {
			threads = -1 // the main thread is gone: list every thread
		}
		kids, err := taskChildren(root, pid, threads)
		if err != nil {
			continue
		}
		queue = append(queue, kids...)
	}
}

// taskChildren lists the children of every thread of pid; threads is the
// thread count when known (1 skips listing the task directory), -1 when not.
func taskChildren(root string, pid, threads int) ([]int, error) {
	dir := root + "/" + strconv.Itoa(pid) + "/task/"
	tids := []string{strconv.Itoa(pid)}
	if threads != 1 {
		d, err := os.Open(dir)
		if err != nil {
			return nil, err
		}
		tids, err = d.Readdirnames(-1)
		d.Close()
		if err != nil {
			return nil, err
		}
	}
	var out []int
	buf := make([]byte, 4096)
	for _, tid := range tids {
		b, err := readSmall(dir+tid+"/children", buf)
		if err != nil {
			if len(tids) == 1 {
				return nil, err
			}
			continue // a thread that ended
		}
		for _, f := range bytes.Fields(b) {
			if c, err := strconv.Atoi(string(f)); err == nil {
				out = append(out, c)
			}
		}
	}
	return out, nil
}

// runtimeOf is how long pid has run, in nanoseconds, summed over its threads
// (the first field of each thread's schedstat, which the scheduler updates
// whenever the thread runs).
func runtimeOf(root string, pid, threads int) (uint64, error) {
	dir := root + "/" + strconv.Itoa(pid) + "/task/"
	tids := []string{strconv.Itoa(pid)}
	if threads != 1 {
		d, err := os.Open(dir)
		if err != nil {
			return 0, err
		}
		tids, err = d.Readdirnames(-1)
		d.Close()
		if err != nil {
			return 0, err
		}
	}
	var sum uint64
	buf := make([]byte, 128)
	for _, tid := range tids {
		b, err := readSmall(dir+tid+"/schedstat", buf)
		if err != nil {
			return 0, err
		}
		f := bytes.Fields(b)
		if len(f) == 0 {
			return 0, fmt.Errorf("exec.runtimeOf %d: empty schedstat", pid)
		}
		ns, err := strconv.ParseUint(string(f[0]), 10, 64)
		if err != nil {
			return 0, err
		}
		sum += ns
	}
	return sum, nil
}

// readSmall reads a whole /proc file, growing buf as needed.
func readSmall(path string, buf []byte) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	n := 0
	for {
		if n == len(buf) {
			buf = append(buf, make([]byte, len(buf))...)
		}
		m, err := unix.Read(fd, buf[n:])
		if err != nil {
			return nil, err
		}
		if m == 0 {
			return buf[:n], nil
		}
		n += m
	}
}

// Argv reads a process's command line; nil when it cannot be read (a zombie,
// a kernel thread, a process that ended).
// It reads at most maxArgvBytes: a reply never grows with a subject's arguments.
func Argv(pid int) []string {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return nil
	}
	defer f.Close()
	b := make([]byte, maxArgvBytes)
	n, _ := io.ReadFull(f, b)
	b = b[:n]
	if len(b) == 0 {
		return nil
	}
	b = bytes.TrimSuffix(b, []byte{0})
	parts := bytes.Split(b, []byte{0})
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = string(p)
	}
	return out
}

// signalMember signals one process only if it is still the one that was
// seen: the pidfd pins the process, and its start time proves that the pid
// was not reused in between.
func signalMember(procRoot string, m Member, sig syscall.Signal) error {
	return SignalPinned(m.PID, sig, func() bool {
		e, err := readStat(procRoot, m.PID, make([]byte, 1024))
		return err == nil && e.start == m.Start
	})
}
