package client

import "unicode/utf8"

// decodeExecutedFast decodes an executed reply as relayd writes it: one
// compact object whose keys are Executed's own (or token, kind, id), whose
// strings have no escapes, control characters or invalid UTF-8, and whose
// survivors list is empty. It reports false for anything else, and the
// caller then decodes with encoding/json, whose result it gives whenever it
// reports true: only exact keys and plain values are taken, and a
// duplicate key's last value wins, as in encoding/json. It exists because
// a round trip's reply is decoded on the round trip's critical path
// (relaybench's /bin/true), where encoding/json's reflection was most of
// the client's own time.
func decodeExecutedFast(line []byte, e *Executed) bool {
	d := fastDecoder{b: line}
	var out Executed
	ok := d.object(func(key []byte) bool {
		switch string(key) { // no allocation: the compiler compares in place
		case "token", "kind":
			_, ok := d.str()
			return ok
		case "id":
			_, ok := d.int()
			return ok
		case "termination":
			return into(&d, &out.Termination)
		case "exitCode":
			return d.intoInt(&out.ExitCode)
		case "stdout":
			return into(&d, &out.Stdout)
		case "stdoutTruncated":
			return d.intoBool(&out.StdoutTruncated)
		case "stderr":
			return into(&d, &out.Stderr)
		case "stderrTruncated":
			return d.intoBool(&out.StderrTruncated)
		case "diagnostic":
			return d.object(func(key []byte) bool {
				switch string(key) {
				case "category":
					return into(&d, &out.Diagnostic.Category)
				case "bytes":
					n, ok := d.int()
					out.Diagnostic.Bytes = &n
					return ok
				case "sha256":
					return into(&d, &out.Diagnostic.SHA256)
				}
				return false
			})
		case "execution":
			return into(&d, &out.Execution)
		case "settlement":
			return into(&d, &out.Settlement)
		case "survivors":
			// Only the empty list; a real one goes to encoding/json.
			if !d.lit("[]") {
				return false
			}
			out.Survivors = []Survivor{}
			return true
		case "survivorsOmitted":
			return d.intoInt(&out.SurvivorsOmitted)
		case "scope":
			return d.object(func(key []byte) bool {
				return string(key) == "mechanism" && into(&d, &out.Scope.Mechanism)
			})
		case "signal":
			return into(&d, &out.Signal)
		case "detail":
			return into(&d, &out.Detail)
		case "durationMs":
			n, ok := d.int()
			out.DurationMs = n
			return ok
		case "usage":
			if out.Usage == nil { // a duplicate key merges, as in encoding/json
				out.Usage = &Usage{}
			}
			u := out.Usage
			return d.object(func(key []byte) bool {
				var field *int64
				switch string(key) {
				case "cpuUserMs":
					field = &u.CPUUserMs
				case "cpuSystemMs":
					field = &u.CPUSystemMs
				case "maxRssBytes":
					field = &u.MaxRSSBytes
				case "processes":
					field = &u.Processes
				case "readBytes":
					field = &u.ReadBytes
				case "writeBytes":
					field = &u.WriteBytes
				default:
					return false // another key: the slow path decodes it
				}
				n, ok := d.int()
				*field = n
				return ok
			})
		case "cause":
			return into(&d, &out.Cause)
		case "limit":
			return into(&d, &out.Limit)
		case "session":
			return into(&d, &out.Session)
		case "cwd":
			return into(&d, &out.Cwd)
		case "sessionEnded":
			return d.intoBool(&out.SessionEnded)
		}
		return false
	})
	if !ok {
		return false
	}
	for ; d.i < len(d.b); d.i++ { // only white space may follow
		switch d.b[d.i] {
		case ' ', '\t', '\r', '\n':
		default:
			return false
		}
	}
	*e = out
	return true
}

// fastDecoder reads the plain JSON of decodeExecutedFast; every method
// reports false for what it does not take.
type fastDecoder struct {
	b []byte
	i int
}

func (d *fastDecoder) lit(s string) bool {
	if len(d.b)-d.i < len(s) || string(d.b[d.i:d.i+len(s)]) != s {
		return false
	}
	d.i += len(s)
	return true
}

// object reads {"key":value,...}, calling field with the reader on each
// value; keys are plain strings.
func (d *fastDecoder) object(field func(key []byte) bool) bool {
	if !d.lit("{") {
		return false
	}
	if d.lit("}") {
		return true
	}
	for {
		key, ok := d.raw()
		if !ok || !d.lit(":") || !field(key) {
			return false
		}
		if d.lit("}") {
			return true
		}
		if !d.lit(",") {
			return false
		}
	}
}

// raw reads a plain string: no escapes, no control characters, valid UTF-8.
func (d *fastDecoder) raw() ([]byte, bool) {
	if !d.lit(`"`) {
		return nil, false
	}
	start, ascii := d.i, true
	for ; d.i < len(d.b); d.i++ {
		switch c := d.b[d.i]; {
		case c == '"':
			s := d.b[start:d.i]
			d.i++
			return s, ascii || utf8.Valid(s)
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= 0x80:
			ascii = false
		}
	}
	return nil, false
}

// Values relayd sends in every reply, so that they cost no allocation.
var commonStrings = []string{string(Exited), string(FrameworkTimeout), string(SettlementNone), string(Settled),
	DiagNone, "cgroup", "process-group", ""}

func (d *fastDecoder) str() (string, bool) {
	b, ok := d.raw()
	if !ok {
		return "", false
	}
	for _, s := range commonStrings {
		if string(b) == s {
			return s, true
		}
	}
	return string(b), true
}

// int reads an integer as JSON writes one (no fraction or exponent).
func (d *fastDecoder) int() (int64, bool) {
	start := d.i
	if d.i < len(d.b) && d.b[d.i] == '-' {
		d.i++
	}
	digits := d.i
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		d.i++
	}
	switch {
	case d.i == digits, d.b[digits] == '0' && d.i-digits > 1: // none, or a leading zero
		return 0, false
	case d.i < len(d.b) && (d.b[d.i] == '.' || d.b[d.i] == 'e' || d.b[d.i] == 'E'):
		return 0, false
	}
	if d.i-digits > 18 { // might not fit: encoding/json decides
		return 0, false
	}
	var n int64
	for _, c := range d.b[digits:d.i] {
		n = n*10 + int64(c-'0')
	}
	if digits > start {
		n = -n
	}
	return n, true
}

// into reads a string into p.
func into[T ~string](d *fastDecoder, p *T) bool {
	s, ok := d.str()
	*p = T(s)
	return ok
}

// intoInt reads an integer that must fit an int into p.
func (d *fastDecoder) intoInt(p *int) bool {
	n, ok := d.int()
	*p = int(n)
	return ok && int64(int(n)) == n
}

func (d *fastDecoder) intoBool(p *bool) bool {
	v, ok := d.bool()
	*p = v
	return ok
}

func (d *fastDecoder) bool() (bool, bool) {
	if d.lit("true") {
		return true, true
	}
	return false, d.lit("false")
}
