package protocol

import (
	"encoding/json"
	"strconv"
	"strings"
)

// Verify is a verify request (sections 4.3 and 4.6).
type Verify struct {
	// All asks for the trial boundary of section 4.6: every execution of
	// the daemon ends, and survivors are those of every execution.
	All bool
	// Settle: "survivors":"settle", the survivors are settled too, except
	// Keep and their descendants.
	Settle bool
	Keep   []Kept
	// Files: "files", the filesystem half of the boundary (section 4.9);
	// nil when absent.
	Files *VerifyFiles
}

// Kept names a process a trial boundary leaves alone: its pid and its
// start time (Survivor.Start, ms since the epoch) as a survivors list
// reported them. A pid alone could name another process by the time the
// boundary acts (rule 6.13): only a process with both is kept.
type Kept struct {
	PID   int
	Start int64
}

// MaxKeep bounds the "keep" list of a verify.
const MaxKeep = 1000

// maxPID bounds a kept pid: the kernel's PID_MAX_LIMIT (2^22).
const maxPID = 1 << 22

// Verify validates m as a verify request; it does not look at m.Kind. A
// failure is an *Error of category CatBadRequest that names the field.
// "survivors" and "keep" belong to the trial boundary: without "all": true
// they are refused, so that a controller never believes it settled what an
// ordinary verify leaves alone.
func (m *Message) Verify() (*Verify, *Error) {
	v := &Verify{}
	if raw, ok := m.optional("all"); ok {
		if jsonKind(raw) != kindBool || json.Unmarshal(raw, &v.All) != nil {
			return nil, newError(CatBadRequest, `verify: "all" must be true or false`)
		}
	}
	if raw, ok := m.optional("survivors"); ok {
		s, isString := decodeString(raw)
		switch {
		case !isString || jsonKind(raw) != kindString || (s != "settle" && s != "leave"):
			return nil, newError(CatBadRequest, `verify: "survivors" must be "leave" or "settle"`)
		case !v.All:
			return nil, newError(CatBadRequest, `verify: "survivors" needs "all": true (the trial boundary, section 4.6)`)
		}
		v.Settle = s == "settle"
	}
	if raw, ok := m.optional("keep"); ok {
		if !v.All {
			return nil, newError(CatBadRequest, `verify: "keep" needs "all": true (the trial boundary, section 4.6)`)
		}
		var items []json.RawMessage
		if jsonKind(raw) != kindArray || json.Unmarshal(raw, &items) != nil || len(items) > MaxKeep {
			return nil, newError(CatBadRequest, `verify: "keep" must be an array of at most %d {"pid":P,"start":S} objects`, MaxKeep)
		}
		for i, it := range items {
			k, err := decodeKept(i, it)
			if err != nil {
				return nil, err
			}
			v.Keep = append(v.Keep, k)
		}
	}
	if raw, ok := m.optional("files"); ok {
		if !v.All {
			return nil, newError(CatBadRequest, `verify: "files" needs "all": true (the trial boundary, section 4.9)`)
		}
		f, err := decodeVerifyFiles(raw)
		if err != nil {
			return nil, err
		}
		v.Files = f
	}
	return v, nil
}

// keepForm is how every "keep" error says what an entry must be.
const keepForm = `{"pid":P,"start":S}, pid and start time as a survivors list reported them`

// decodeKept reads entry i of "keep": an object of exactly "pid" (an
// integer from 1 to maxPID) and "start" (an integer from 0 to
// MaxIDInteger, exact in every controller's JSON).
func decodeKept(i int, raw json.RawMessage) (Kept, *Error) {
	if jsonKind(raw) == kindNumber {
		return Kept{}, newError(CatBadRequest, `verify: "keep"[%d] is a bare pid; each entry must be %s (a pid alone may name another process by now)`, i, keepForm)
	}
	var fields map[string]json.RawMessage
	if jsonKind(raw) != kindObject || json.Unmarshal(raw, &fields) != nil {
		return Kept{}, newError(CatBadRequest, `verify: "keep"[%d] must be an object %s`, i, keepForm)
	}
	pid, hasPID := fields["pid"]
	start, hasStart := fields["start"]
	switch {
	case !hasPID:
		return Kept{}, newError(CatBadRequest, `verify: "keep"[%d] lacks "pid"; each entry must be %s`, i, keepForm)
	case !hasStart:
		return Kept{}, newError(CatBadRequest, `verify: "keep"[%d] lacks "start"; each entry must be %s`, i, keepForm)
	case len(fields) != 2:
		return Kept{}, newError(CatBadRequest, `verify: "keep"[%d] holds a field other than "pid" and "start"; each entry must be %s`, i, keepForm)
	}
	var k Kept
	n, ok := plainInteger(pid)
	if !ok || n < 1 || n > maxPID {
		return Kept{}, newError(CatBadRequest, `verify: "keep"[%d] "pid" must be an integer from 1 to %d`, i, maxPID)
	}
	k.PID = int(n)
	if k.Start, ok = plainInteger(start); !ok || k.Start < 0 || k.Start > MaxIDInteger {
		return Kept{}, newError(CatBadRequest, `verify: "keep"[%d] "start" must be an integer from 0 to %d (ms since the epoch, as survivors report it)`, i, MaxIDInteger)
	}
	return k, nil
}

// plainInteger reads raw as a JSON number written as an integer, without
// fraction or exponent.
func plainInteger(raw json.RawMessage) (int64, bool) {
	s := strings.TrimSpace(string(raw))
	if jsonKind(raw) != kindNumber || strings.ContainsAny(s, ".eE") {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}
