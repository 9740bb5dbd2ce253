package main

import (
	"bytes"
	"strconv"
	"strings"
)

// Reattaching (relayctl shell --session) shows the session's screen again
// from the ring relayd keeps (protocol 4.7, read), and what a program
// printed there long ago can hold questions to the terminal: vim asks
// where the cursor is (ESC[6n), what the terminal is (ESC[c, ESC[>c), its
// colours (ESC]11;?). The local terminal answers what it is shown, and
// its answers would reach the shell as typed keys (2RRpwd: command not
// found), long after whoever asked stopped waiting. So the replay drops
// every query; what comes live afterwards passes as it is, for a program
// running then waits for its answers.

// maxPending bounds an escape sequence held back because the replay ended
// in it: one longer than this is no query and passes as it came.
const maxPending = 4096

// replayFilter drops terminal queries from replayed screen text. An
// escape sequence cut by the replay's end is held until its rest comes.
type replayFilter struct {
	pending []byte
}

// replay returns data without its terminal queries. A sequence cut at the
// end is held back for the next call.
func (f *replayFilter) replay(data []byte) []byte {
	data = append(f.pending, data...)
	f.pending = nil
	out := make([]byte, 0, len(data))
	for i := 0; i < len(data); {
		c := data[i]
		if c == 0x05 { // ENQ asks for the answerback message
			i++
			continue
		}
		if c != 0x1b {
			out = append(out, c)
			i++
			continue
		}
		n, query := escape(data[i:])
		if n == 0 { // cut by the end
			if len(data)-i > maxPending {
				out = append(out, data[i:]...)
			} else {
				f.pending = append(f.pending, data[i:]...)
			}
			break
		}
		if !query {
			out = append(out, data[i:i+n]...)
		}
		i += n
	}
	return out
}

// live returns data as it came, after the rest of a sequence the replay
// ended in: that sequence is judged whole, the rest passes unchanged.
func (f *replayFilter) live(data []byte) []byte {
	if len(f.pending) == 0 {
		return data
	}
	held := append(f.pending, data...)
	f.pending = nil
	n, query := escape(held)
	switch {
	case n == 0 && len(held) <= maxPending:
		f.pending = held
		return nil
	case n == 0:
		return held
	case query:
		return held[n:]
	}
	return held
}

// escape reads the escape sequence at the start of b (b[0] is ESC): its
// length (0 when b ends before it does) and whether it asks the terminal
// for an answer.
func escape(b []byte) (n int, query bool) {
	if len(b) < 2 {
		return 0, false
	}
	switch b[1] {
	case '[':
		return csi(b)
	case ']', 'P', '_', '^', 'X': // OSC, DCS, APC, PM, SOS: a string to its terminator
		end, body := stringEnd(b)
		if end == 0 {
			return 0, false
		}
		switch b[1] {
		case ']':
			return end, oscQuery(body)
		case 'P':
			// DECRQSS (DCS $ q) and XTGETTCAP (DCS + q) ask.
			return end, bytes.HasPrefix(body, []byte("$q")) || bytes.HasPrefix(body, []byte("+q"))
		}
		return end, false
	case 'Z': // DECID: the same question as DA
		return 2, true
	}
	if b[1] >= 0x20 && b[1] <= 0x2f { // ESC, intermediates, a final byte
		for i := 2; i < len(b); i++ {
			if b[i] < 0x20 || b[i] > 0x2f {
				return i + 1, false
			}
		}
		return 0, false
	}
	return 2, false
}

// csi reads a control sequence: ESC [, a private prefix (? > = <),
// parameters, intermediates, and a final byte.
func csi(b []byte) (n int, query bool) {
	i := 2
	var prefix byte
	if i < len(b) && b[i] >= 0x3c && b[i] <= 0x3f {
		prefix = b[i]
		i++
	}
	ps := i
	for i < len(b) && b[i] >= 0x30 && b[i] <= 0x3f {
		i++
	}
	params := string(b[ps:i])
	is := i
	for i < len(b) && b[i] >= 0x20 && b[i] <= 0x2f {
		i++
	}
	inter := string(b[is:i])
	if i >= len(b) {
		return 0, false
	}
	final := b[i]
	if final < 0x40 || final > 0x7e { // not a control sequence: pass what was read
		return i, false
	}
	return i + 1, csiQuery(prefix, params, inter, final)
}

// csiQuery says whether a control sequence asks the terminal for a reply.
func csiQuery(prefix byte, params, inter string, final byte) bool {
	first, second := -1, -1
	if f, rest, _ := strings.Cut(params, ";"); f != "" {
		first, _ = strconv.Atoi(f)
		if s, _, _ := strings.Cut(rest, ";"); s != "" {
			second, _ = strconv.Atoi(s)
		}
	}
	switch {
	case inter == "$" && final == 'p': // DECRQM, ANSI and private modes
		return true
	case inter == "" && final == 'n': // DSR: status, cursor position, ?-reports
		return prefix == 0 || prefix == '?'
	case inter == "" && final == 'c': // DA1, DA2, DA3
		return prefix == 0 || prefix == '>' || prefix == '='
	case inter == "" && final == 'q' && prefix == '>': // XTVERSION
		return true
	case inter == "" && final == 't' && prefix == 0: // window reports
		switch first {
		case 11, 13, 14, 15, 16, 18, 19, 20, 21:
			return true
		}
	case inter == "" && final == 'u' && prefix == '?': // the kitty keyboard flags
		return true
	case inter == "" && final == 'm' && prefix == '?': // XTQMODKEYS
		return true
	case inter == "" && final == 'S' && prefix == '?': // XTSMGRAPHICS reads
		return second == 1 || second == 4
	case inter == "" && final == 'x' && prefix == 0: // DECREQTPARM
		return true
	case inter == "*" && final == 'y': // DECRQCRA, a checksum
		return true
	case inter == "$" && (final == 'w' || final == 'u'): // DECRQPSR, DECRQTSR
		return true
	}
	return false
}

// stringEnd finds the end of a control string (its terminator BEL or
// ESC \ included) and returns its length and its body.
func stringEnd(b []byte) (n int, body []byte) {
	for i := 2; i < len(b); i++ {
		switch {
		case b[i] == 0x07:
			return i + 1, b[2:i]
		case b[i] == 0x1b && i+1 < len(b) && b[i+1] == '\\':
			return i + 2, b[2:i]
		case b[i] == 0x1b && i+1 < len(b):
			return i, b[2:i] // cancelled by another escape sequence
		}
	}
	return 0, nil
}

// oscQuery says whether an operating system command asks: OSC 10;? (the
// foreground colour), 11;?, 4;N;?, 52;c;? and their kind, a "?" in place
// of a value.
func oscQuery(body []byte) bool {
	for _, f := range bytes.Split(body, []byte(";"))[1:] {
		if string(f) == "?" {
			return true
		}
	}
	return false
}
