package env

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// capNames are the capabilities of capabilities(7) by number, without
// their CAP_ prefix, up to unix.CAP_LAST_CAP.
var capNames = [...]string{
	unix.CAP_CHOWN: "CHOWN", unix.CAP_DAC_OVERRIDE: "DAC_OVERRIDE", unix.CAP_DAC_READ_SEARCH: "DAC_READ_SEARCH",
	unix.CAP_FOWNER: "FOWNER", unix.CAP_FSETID: "FSETID", unix.CAP_KILL: "KILL", unix.CAP_SETGID: "SETGID",
	unix.CAP_SETUID: "SETUID", unix.CAP_SETPCAP: "SETPCAP", unix.CAP_LINUX_IMMUTABLE: "LINUX_IMMUTABLE",
	unix.CAP_NET_BIND_SERVICE: "NET_BIND_SERVICE", unix.CAP_NET_BROADCAST: "NET_BROADCAST",
	unix.CAP_NET_ADMIN: "NET_ADMIN", unix.CAP_NET_RAW: "NET_RAW", unix.CAP_IPC_LOCK: "IPC_LOCK",
	unix.CAP_IPC_OWNER: "IPC_OWNER", unix.CAP_SYS_MODULE: "SYS_MODULE", unix.CAP_SYS_RAWIO: "SYS_RAWIO",
	unix.CAP_SYS_CHROOT: "SYS_CHROOT", unix.CAP_SYS_PTRACE: "SYS_PTRACE", unix.CAP_SYS_PACCT: "SYS_PACCT",
	unix.CAP_SYS_ADMIN: "SYS_ADMIN", unix.CAP_SYS_BOOT: "SYS_BOOT", unix.CAP_SYS_NICE: "SYS_NICE",
	unix.CAP_SYS_RESOURCE: "SYS_RESOURCE", unix.CAP_SYS_TIME: "SYS_TIME", unix.CAP_SYS_TTY_CONFIG: "SYS_TTY_CONFIG",
	unix.CAP_MKNOD: "MKNOD", unix.CAP_LEASE: "LEASE", unix.CAP_AUDIT_WRITE: "AUDIT_WRITE",
	unix.CAP_AUDIT_CONTROL: "AUDIT_CONTROL", unix.CAP_SETFCAP: "SETFCAP", unix.CAP_MAC_OVERRIDE: "MAC_OVERRIDE",
	unix.CAP_MAC_ADMIN: "MAC_ADMIN", unix.CAP_SYSLOG: "SYSLOG", unix.CAP_WAKE_ALARM: "WAKE_ALARM",
	unix.CAP_BLOCK_SUSPEND: "BLOCK_SUSPEND", unix.CAP_AUDIT_READ: "AUDIT_READ", unix.CAP_PERFMON: "PERFMON",
	unix.CAP_BPF: "BPF", unix.CAP_CHECKPOINT_RESTORE: "CHECKPOINT_RESTORE",
}

// CapabilityName is capability n's name without CAP_ ("NET_RAW"), or its
// number for one newer than relayd knows.
func CapabilityName(n int) string {
	if n >= 0 && n < len(capNames) {
		return capNames[n]
	}
	return strconv.Itoa(n)
}

// ParseCapabilities reads a comma-separated list of capability names, as
// capabilities(7) spells them, with or without CAP_, in any case
// ("NET_RAW,cap_net_admin"), into their numbers, sorted, each once. An
// unknown or empty name is an error that names it.
func ParseCapabilities(list string) ([]int, error) {
	var out []int
	for _, item := range strings.Split(list, ",") {
		name := strings.ToUpper(strings.TrimSpace(item))
		if name == "" {
			return nil, fmt.Errorf("%q has an empty capability name: want names such as NET_RAW,NET_ADMIN", list)
		}
		n := slices.Index(capNames[:], strings.TrimPrefix(name, "CAP_"))
		if n < 0 {
			return nil, fmt.Errorf("unknown capability %q: want names of capabilities(7) such as NET_RAW or CAP_NET_RAW", strings.TrimSpace(item))
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// EgressBypass are the capabilities that get under an egress policy kept
// in nftables or iptables: NET_RAW opens an AF_PACKET socket that writes
// beneath the IP hooks, NET_ADMIN deletes the ruleset. Maka's relay refuses
// a subject that holds either.
var EgressBypass = []int{unix.CAP_NET_ADMIN, unix.CAP_NET_RAW}

// capSets are the lines of /proc/PID/status that hold capability sets.
// Maka's relay requires CapEff, CapPrm and CapBnd and counts every Cap*
// line it finds; relayd requires the four every kernel has and reads
// CapAmb (Linux 4.3) where there is one.
var capSets = []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}

// HeldCapabilities reports which of caps relayd itself holds in any of its
// capability sets (inheritable, permitted, effective, bounding, ambient),
// read from /proc/self/status: a subject relayd starts could have any of
// them (the bounding set lets a file-capability or setuid executable get
// them back). held lists names, sorted as Maka's relay lists them; where the sets
// that hold them ("CapPrm CapEff CapBnd").
func HeldCapabilities(caps []int) (held []string, where string, err error) {
	return heldCapabilities("/proc/self/status", caps)
}

func heldCapabilities(status string, caps []int) (held []string, where string, err error) {
	f, err := os.Open(status)
	if err != nil {
		return nil, "", fmt.Errorf("relayd's capability sets cannot be read: %w", err)
	}
	defer f.Close()
	sets := map[string]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ":")
		if !ok || !slices.Contains(capSets, name) {
			continue
		}
		v, err := strconv.ParseUint(strings.TrimSpace(value), 16, 64)
		if err != nil {
			return nil, "", fmt.Errorf("relayd's capability sets cannot be read: %s line of %s: %v", name, status, err)
		}
		sets[name] = v
	}
	if err := sc.Err(); err != nil {
		return nil, "", fmt.Errorf("relayd's capability sets cannot be read: %s: %w", status, err)
	}
	for _, name := range capSets[:4] { // CapAmb came with Linux 4.3; the others always were
		if _, ok := sets[name]; !ok {
			return nil, "", fmt.Errorf("relayd's capability sets cannot be read: %s has no %s line", status, name)
		}
	}
	var setsHolding []string
	for _, name := range capSets {
		v, ok := sets[name]
		if !ok {
			continue
		}
		holds := false
		for _, c := range caps {
			if v&(1<<uint(c)) != 0 {
				holds = true
				if !slices.Contains(held, CapabilityName(c)) {
					held = append(held, CapabilityName(c))
				}
			}
		}
		if holds {
			setsHolding = append(setsHolding, name)
		}
	}
	slices.Sort(held)
	return held, strings.Join(setsHolding, " "), nil
}
