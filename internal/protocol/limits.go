package protocol

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Limits are the resource limits of an execution (section 4.8), by name:
// each a whole number of its unit.
type Limits map[string]uint64

// The names of section 4.8's limits: those set as resource limits on the
// subject, then those set on the scope's cgroup.
var (
	RlimitNames = []string{"nofile", "processes", "cpuSeconds", "fileBytes", "stackBytes", "addressSpaceBytes"}
	CgroupNames = []string{"memoryBytes", "pids"}
)

// CgroupLimitHelp says what to do where the cgroup limit name cannot be
// set (section 4.8): run relayd where it can, or use the resource limit
// that comes closest, which every mechanism sets.
func CgroupLimitHelp(name string) string {
	rlimit := map[string]string{"memoryBytes": "addressSpaceBytes", "pids": "processes"}[name]
	return "run relayd with --scope=cgroup on a writable cgroup2 that offers the " +
		map[string]string{"memoryBytes": "memory", "pids": "pids"}[name] +
		" controller, or use the " + rlimit + " rlimit instead"
}

// minNofile is the smallest nofile accepted: the shim that forks the
// subject holds the limit during its fork, and needs a few descriptors of
// its own (the pidfd it makes is one).
const minNofile = 16

// checkLimit reports what is wrong with value for the limit name, or "".
func checkLimit(name string, value uint64) string {
	switch {
	case !slices.Contains(RlimitNames, name) && !slices.Contains(CgroupNames, name):
		return fmt.Sprintf("%s is not a limit (one of %s)", quoteName(name), strings.Join(append(slices.Clone(RlimitNames), CgroupNames...), ", "))
	case value < 1:
		return fmt.Sprintf("%q must be at least 1", name)
	case name == "nofile" && value < minNofile:
		return fmt.Sprintf("%q must be at least %d", name, minNofile)
	case name == "cpuSeconds" && value > 1<<40:
		return fmt.Sprintf("%q must be at most %d", name, uint64(1<<40))
	}
	return ""
}

// limits reads "limits": an object whose fields are limits' names and
// whose values are integers of at least 1.
func (m *Message) limits(x *Execute) *Error {
	raw, present := m.optional("limits")
	if !present {
		return nil
	}
	var fields map[string]json.RawMessage
	if jsonKind(raw) != kindObject || json.Unmarshal(raw, &fields) != nil {
		return badExecute(`"limits" must be an object of integers`)
	}
	lim := Limits{}
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		v, err := strconv.ParseUint(strings.TrimSpace(string(fields[name])), 10, 64)
		if jsonKind(fields[name]) != kindNumber || err != nil {
			if !slices.Contains(RlimitNames, name) && !slices.Contains(CgroupNames, name) {
				return badExecute(`"limits": %s`, checkLimit(name, 1))
			}
			return badExecute(`"limits": %q must be an integer of at least 1`, name)
		}
		if msg := checkLimit(name, v); msg != "" {
			return badExecute(`"limits": %s`, msg)
		}
		lim[name] = v
	}
	x.Limits = lim
	return nil
}

// ParseLimits reads limits written as "name=value,name=value" (relayd's
// --default-limits, relayctl's --limit); the error says which part is wrong.
func ParseLimits(s string) (Limits, error) {
	lim := Limits{}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, val, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not name=value", part)
		}
		v, err := strconv.ParseUint(val, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a whole number", name, val)
		}
		if msg := checkLimit(name, v); msg != "" {
			return nil, fmt.Errorf("%s", msg)
		}
		lim[name] = v
	}
	if len(lim) == 0 {
		return nil, fmt.Errorf("no limit given")
	}
	return lim, nil
}
