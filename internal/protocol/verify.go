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
	Keep   []int
}

// MaxKeep bounds the "keep" list of a verify.
const MaxKeep = 1000

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
			return nil, newError(CatBadRequest, `verify: "keep" must be an array of at most %d pids`, MaxKeep)
		}
		for _, it := range items {
			pid, err := strconv.Atoi(strings.TrimSpace(string(it)))
			if jsonKind(it) != kindNumber || err != nil || pid < 1 {
				return nil, newError(CatBadRequest, `verify: "keep" must hold pids: integers of at least 1`)
			}
			v.Keep = append(v.Keep, pid)
		}
	}
	return v, nil
}
