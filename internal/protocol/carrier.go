package protocol

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"sync"
	"unicode"
	"unicode/utf8"
)

// This file holds the result-carrier rules of protocol section 5, all of them.

// Carrier accumulates a subject's stdout in carrier mode: it counts and
// hashes every byte written, keeps at most CarrierLimit+1 bytes in memory,
// and never returns an error from Write, so the subject never blocks on a
// full pipe or dies of SIGPIPE because the carrier is too long.
//
// A Carrier is safe for concurrent use: Result may be called while a drain
// goroutine still writes (for example while survivors hold the pipe open),
// and then reports the bytes written so far.
type Carrier struct {
	mu  sync.Mutex
	buf []byte    // the first CarrierLimit+1 bytes
	n   int64     // every byte written
	sum hash.Hash // SHA-256 of every byte written
	// text, when set (CountText), counts the carrier's text as well: its
	// counts are then those of the text (replaced.go).
	text *textCount
}

// CountText makes the counts of every diagnostic (bytes, sha256, and the
// oversize limit) those of the carrier's text, each ill-formed UTF-8
// sequence replaced by U+FFFD, as Maka's relay counts what Harbor's exec
// gives it: the maka layout's counts (docs/protocol.md, section 5). Call it
// before the first Write.
func (c *Carrier) CountText() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.text = newTextCount()
}

// NewCarrier returns an empty Carrier.
func NewCarrier() *Carrier {
	return &Carrier{sum: sha256.New()}
}

// Write counts and hashes p and keeps what fits under the limit. It always
// returns len(p), nil.
func (c *Carrier) Write(p []byte) (int, error) {
	n := len(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n += int64(n)
	c.sum.Write(p)
	c.buf = appendCapped(c.buf, p, CarrierLimit+1)
	if c.text != nil {
		c.text.write(p)
	}
	return n, nil
}

// Result applies the carrier rules of section 5 to everything written so
// far, in order: oversize (more than CarrierLimit bytes in all), missing,
// ambiguous, invalid, unstructured-output, none. It returns the stdout of the
// reply (the payload, or "") and the diagnostic.
func (c *Carrier) Result(resultToken string) (string, Diagnostic) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.text != nil {
		// The text is at least as long as the bytes: within the limit,
		// buf holds the whole carrier.
		if n, sum := c.text.result(); n > CarrierLimit {
			return "", Diagnostic{Category: DiagOversize, Bytes: n, SHA256: sum, Counted: true}
		}
		return parseCarrier(c.buf, resultToken, true)
	}
	if c.n > CarrierLimit {
		return "", Diagnostic{
			Category: DiagOversize,
			Bytes:    c.n,
			SHA256:   hex.EncodeToString(c.sum.Sum(nil)),
			Counted:  true,
		}
	}
	return ParseCarrier(c.buf, resultToken)
}

// ParseCarrier applies the carrier rules of section 5 to a complete carrier,
// exactly as Maka's reference relay (_decode_result_carrier in
// packages/eval/harbor/relay_agent.py) reads the same bytes:
//
//	carrier longer than CarrierLimit                 "", result-frame-oversize, counts of the carrier
//	no line starts with "<FramePrefix> <token> "     "", result-frame-missing, counts of the carrier
//	more than one such line                          "", result-frame-ambiguous, counts of the carrier
//	the one line is malformed                        "", result-frame-invalid, counts of the carrier
//	a valid frame, and other output too              payload, unstructured-output, counts of the carrier without the frame line
//	a valid frame and nothing else                   payload, none
//
// The rules, each as the reference has it in Python:
//
//	lines        str.splitlines(keepends=True) of the carrier decoded as UTF-8, invalid bytes replaced:
//	             a line ends after "\n", "\r\n", "\r", "\v", "\f", "\x1c", "\x1d", "\x1e", U+0085,
//	             U+2028 or U+2029 (as UTF-8: C2 85, E2 80 A8, E2 80 A9); a stray 85 byte is no
//	             break; the last line needs none
//	frame line   the one line that starts with "<FramePrefix> <token> ", with its line break
//	fields       line.rstrip("\r\n").split(" ", 4): exactly five; only "\r" and "\n" are
//	             stripped, so a frame line ended by another break is invalid (the break is
//	             left in the payload field)
//	<length>     int(): white space around (str.isspace but not "\x1c"-"\x1f"), then an optional
//	             "+" or "-", then decimal digits (any Unicode Nd digit), single "_" between
//	             digits, leading zeros allowed, at most 4300 digits (Python's default
//	             int_max_str_digits); then 0 <= length <= MaxPayload ("-0" is 0)
//	<sha256>     re.fullmatch("[0-9a-f]{64}") and equal to the SHA-256 of the decoded bytes
//	<payload>    base64.b64decode(payload + "="*(-len(payload)%4), altchars=b"-_", validate=True)
//	             as Python 3.12.4 and later decode it: "-" and "+" are 62, "_" and "/" are 63
//	             (either alphabet, even mixed); padding only at the end, optional or partial,
//	             never more than the last group needs ("YQ", "YQ=", "YQ==" are "a"; "YWFh=" is
//	             invalid); a length of 4n+1 characters is invalid; bits past the last byte are
//	             ignored; any other character is invalid; decoded length == <length>
//	UTF-8        the decoded bytes decode as strict UTF-8; they are the returned stdout
//	noise        carrier.replace(frame, "", 1): the carrier without the first occurrence of the
//	             frame line's bytes, which is the end of an earlier line when that line ends
//	             with the same text
//
// Unlike the reference, which sees text its framework decoded (each invalid
// sequence U+FFFD, three bytes), the counts are of raw bytes (section 5:
// "bytes counts raw bytes"); where the carrier is UTF-8 the two agree.
// ParseCarrierText counts as the reference does.
func ParseCarrier(carrier []byte, resultToken string) (string, Diagnostic) {
	return parseCarrier(carrier, resultToken, false)
}

// ParseCarrierText is ParseCarrier with the counts of the carrier's text
// (Carrier.CountText): each ill-formed UTF-8 sequence counts as U+FFFD,
// three bytes, in bytes, sha256 and the oversize limit, as the reference
// counts them.
func ParseCarrierText(carrier []byte, resultToken string) (string, Diagnostic) {
	return parseCarrier(carrier, resultToken, true)
}

func parseCarrier(carrier []byte, resultToken string, text bool) (string, Diagnostic) {
	counted := countedDiagnostic
	if text {
		counted = func(category string, b []byte) Diagnostic { return textDiagnostic(category, b) }
		if n, _ := replacedCounts(carrier); n > CarrierLimit {
			return "", counted(DiagOversize, carrier)
		}
	}
	if len(carrier) > CarrierLimit {
		return "", counted(DiagOversize, carrier)
	}
	start, end, frames := findFrameLine(carrier, resultToken)
	switch {
	case frames == 0:
		return "", counted(DiagMissing, carrier)
	case frames > 1:
		return "", counted(DiagAmbiguous, carrier)
	}
	line := carrier[start:end]
	var buf [MaxPayload]byte
	n, ok := parseFrame(line, resultToken, &buf)
	if !ok {
		return "", counted(DiagInvalid, carrier)
	}
	payload := string(buf[:n])
	if len(line) == len(carrier) {
		return payload, NoneDiagnostic()
	}
	at := bytes.Index(carrier, line) // at or before start
	if text {
		return payload, textDiagnostic(DiagUnstructured, carrier[:at], carrier[at+len(line):])
	}
	h := sha256.New()
	h.Write(carrier[:at])
	h.Write(carrier[at+len(line):])
	return payload, Diagnostic{
		Category: DiagUnstructured,
		Bytes:    int64(len(carrier) - len(line)),
		SHA256:   hex.EncodeToString(h.Sum(nil)),
		Counted:  true,
	}
}

// framePrefix starts every frame line, whatever its token.
var framePrefix = []byte(FramePrefix + " ")

// findFrameLine counts the lines of carrier that start with
// "<FramePrefix> <token> " (it stops counting at two) and returns where the
// first is: carrier[start:end], its line break included.
func findFrameLine(carrier []byte, token string) (start, end, n int) {
	for pos := 0; pos < len(carrier); {
		i := bytes.Index(carrier[pos:], framePrefix)
		if i < 0 {
			break
		}
		i += pos
		pos = i + len(framePrefix)
		rest := carrier[pos:]
		if !startsLine(carrier, i) || len(rest) <= len(token) || string(rest[:len(token)]) != token || rest[len(token)] != ' ' {
			continue
		}
		brk, next := lineEnd(carrier, pos)
		if brk <= pos+len(token) {
			continue // a line break inside the token: this line ends before the prefix does
		}
		if n++; n == 1 {
			start, end = i, next
		} else {
			break
		}
	}
	return start, end, n
}

// startsLine reports whether a line starts at b[i], given that b[i] is not
// "\n": at the start of b, or right after a line break. A "\r" before b[i]
// is then a break of its own, not the first half of "\r\n". The lead bytes
// C2 and E2 are never continuation bytes, so C2 85 and E2 80 A8/A9 are
// always the characters U+0085, U+2028, U+2029, whatever precedes them.
func startsLine(b []byte, i int) bool {
	if i == 0 {
		return true
	}
	switch b[i-1] {
	case '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e:
		return true
	case 0x85:
		return i >= 2 && b[i-2] == 0xc2
	case 0xa8, 0xa9:
		return i >= 3 && b[i-3] == 0xe2 && b[i-2] == 0x80
	}
	return false
}

// lineEnd finds the end of the line that holds b[from]: brk is where its
// line break starts and next where the next line starts (both len(b) for a
// last line without a break).
func lineEnd(b []byte, from int) (brk, next int) {
	for i := from; i < len(b); i++ {
		switch b[i] {
		case '\n', '\v', '\f', 0x1c, 0x1d, 0x1e:
			return i, i + 1
		case '\r':
			if i+1 < len(b) && b[i+1] == '\n' {
				return i, i + 2
			}
			return i, i + 1
		case 0xc2:
			if i+1 < len(b) && b[i+1] == 0x85 {
				return i, i + 2
			}
		case 0xe2:
			if i+2 < len(b) && b[i+1] == 0x80 && (b[i+2] == 0xa8 || b[i+2] == 0xa9) {
				return i, i + 3
			}
		}
	}
	return len(b), len(b)
}

// parseFrame checks a frame line (which starts with the prefix and the
// token, and ends with its line break) and decodes its payload into buf,
// returning the payload's length.
func parseFrame(line []byte, token string, buf *[MaxPayload]byte) (int, bool) {
	for len(line) > 0 && (line[len(line)-1] == '\n' || line[len(line)-1] == '\r') {
		line = line[:len(line)-1]
	}
	var fields [4][]byte // the fifth, the payload, is the rest of the line
	for k := range fields {
		i := bytes.IndexByte(line, ' ')
		if i < 0 {
			return 0, false
		}
		fields[k], line = line[:i], line[i+1:]
	}
	if string(fields[1]) != token {
		return 0, false
	}
	length, ok := parseLength(fields[2])
	if !ok {
		return 0, false
	}
	digest, ok := parseDigest(fields[3])
	if !ok {
		return 0, false
	}
	n, ok := decodeBase64(line, buf)
	if !ok || n != length || sha256.Sum256(buf[:n]) != digest || !utf8.Valid(buf[:n]) {
		return 0, false
	}
	return n, true
}

// maxIntDigits is Python's default int_max_str_digits: int() refuses a
// decimal string of more digits, leading zeros included.
const maxIntDigits = 4300

// parseLength reads a frame's length field as Python's int() reads a str,
// and checks 0 <= length <= MaxPayload.
//
// int() strips white space (unicode.IsSpace is exactly its set: str.isspace
// without "\x1c"-"\x1f", which it keeps as ASCII and then refuses), then
// takes an optional sign and decimal digits of any script (Unicode Nd),
// with single underscores between digits.
func parseLength(b []byte) (int, bool) {
	b = trimSpace(b)
	negative := false
	if len(b) > 0 && (b[0] == '+' || b[0] == '-') {
		negative = b[0] == '-'
		b = b[1:]
	}
	n, digits, underscore := 0, 0, false
	for len(b) > 0 {
		if b[0] == '_' {
			if digits == 0 || underscore {
				return 0, false // leading or doubled
			}
			underscore = true
			b = b[1:]
			continue
		}
		d, size := decimalDigit(b)
		if size == 0 {
			return 0, false
		}
		b = b[size:]
		n, digits, underscore = n*10+d, digits+1, false
		if n > MaxPayload {
			return 0, false
		}
	}
	if digits == 0 || underscore || digits > maxIntDigits || negative && n != 0 {
		return 0, false
	}
	return n, true
}

// trimSpace drops leading and trailing white space as int() does.
func trimSpace(b []byte) []byte {
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if !unicode.IsSpace(r) {
			break
		}
		b = b[size:]
	}
	for len(b) > 0 {
		r, size := utf8.DecodeLastRune(b)
		if !unicode.IsSpace(r) {
			break
		}
		b = b[:len(b)-size]
	}
	return b
}

// decimalDigit returns the value of the decimal digit b starts with, and
// its length in bytes (0 when b does not start with one). Unicode encodes
// every set of decimal digits as a run of ten from zero, and unicode.Nd
// holds them as ranges of whole runs, so a digit's value is its distance
// from its range's start, modulo ten.
func decimalDigit(b []byte) (value, size int) {
	if c := b[0]; c < utf8.RuneSelf {
		if c >= '0' && c <= '9' {
			return int(c - '0'), 1
		}
		return 0, 0
	}
	r, size := utf8.DecodeRune(b)
	for _, rg := range unicode.Nd.R16 {
		if lo, hi := rune(rg.Lo), rune(rg.Hi); r >= lo && r <= hi {
			return int(r-lo) % 10, size
		}
	}
	for _, rg := range unicode.Nd.R32 {
		if lo, hi := rune(rg.Lo), rune(rg.Hi); r >= lo && r <= hi {
			return int(r-lo) % 10, size
		}
	}
	return 0, 0
}

// parseDigest reads 64 lower-case hex digits.
func parseDigest(b []byte) (sum [sha256.Size]byte, ok bool) {
	if len(b) != 2*sha256.Size {
		return sum, false
	}
	for i, c := range b {
		var v byte
		switch {
		case c >= '0' && c <= '9':
			v = c - '0'
		case c >= 'a' && c <= 'f':
			v = c - 'a' + 10
		default:
			return sum, false
		}
		sum[i/2] = sum[i/2]<<4 | v
	}
	return sum, true
}

// base64Value maps both base64 alphabets to their values: "-" and "+" are
// 62, "_" and "/" are 63. Every other byte is 0xff.
var base64Value = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	const std = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	for i := 0; i < len(std); i++ {
		t[std[i]] = byte(i)
	}
	t['-'], t['_'] = 62, 63
	return t
}()

// decodeBase64 decodes a frame's payload field into out as the reference
// does (see ParseCarrier): padding only at the end and never more than the
// last group needs, no length of 4n+1, bits past the last byte ignored. It
// refuses a payload longer than out.
func decodeBase64(b []byte, out *[MaxPayload]byte) (int, bool) {
	data := len(b)
	for data > 0 && b[data-1] == '=' {
		data--
	}
	if pad := len(b) - data; data%4 == 1 || pad > (4-data%4)%4 {
		return 0, false
	}
	if data*3/4 > len(out) {
		return 0, false
	}
	n, acc := 0, uint32(0)
	for i, c := range b[:data] {
		v := base64Value[c]
		if v == 0xff {
			return 0, false // "=" inside, white space, anything else
		}
		acc = acc<<6 | uint32(v)
		if i%4 == 3 {
			out[n], out[n+1], out[n+2] = byte(acc>>16), byte(acc>>8), byte(acc)
			n, acc = n+3, 0
		}
	}
	switch data % 4 {
	case 2:
		out[n] = byte(acc >> 4)
		n++
	case 3:
		out[n], out[n+1] = byte(acc>>10), byte(acc>>2)
		n += 2
	}
	return n, true
}
