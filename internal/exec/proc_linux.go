package exec

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// maxArgvBytes bounds what Argv reads of one command line.
const maxArgvBytes = 4096

// procEntry is one process as /proc/PID/stat shows it.
type procEntry struct {
	pid, ppid, pgrp, sid int
	start                uint64 // start time in clock ticks since boot: with pid, an identity
	state                byte
}

func (p procEntry) dead() bool { return p.state == 'Z' || p.state == 'X' || p.state == 'x' }

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
	// The command name may hold spaces and parentheses: fields start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return procEntry{}, fmt.Errorf("exec.parseStat %d: malformed", pid)
	}
	fields := bytes.Fields(b[i+2:])
	// state(3) ppid(4) pgrp(5) session(6) ... starttime(22), counted from 1 over the whole line.
	if len(fields) < 20 {
		return procEntry{}, fmt.Errorf("exec.parseStat %d: %d fields", pid, len(fields))
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
	if e.start, err = strconv.ParseUint(string(fields[19]), 10, 64); err != nil {
		return e, err
	}
	return e, nil
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
