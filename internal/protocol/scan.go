package protocol

import (
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// This file walks a JSON object without building its values: Decode uses
// it to find the few fields relayd reads in a line of any number of fields
// at the cost of the line's own bytes. Every function here expects JSON that
// encoding/json found valid; on anything else they stop early or report
// failure, and never index out of range.

// walkObject calls f with the raw key (between its quotes, still escaped)
// and the raw value (no surrounding white space) of each member of the
// top-level object in obj, in order. obj must be valid JSON whose first
// value is an object.
func walkObject(obj []byte, f func(key, value []byte)) {
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return
	}
	i++
	for {
		i = skipSpace(obj, i)
		if i >= len(obj) || obj[i] != '"' {
			return // '}' or not an object
		}
		kEnd := skipString(obj, i)
		if kEnd-1 < i+1 || obj[kEnd-1] != '"' {
			return
		}
		key := obj[i+1 : kEnd-1]
		i = skipSpace(obj, kEnd)
		if i >= len(obj) || obj[i] != ':' {
			return
		}
		i = skipSpace(obj, i+1)
		vEnd := skipValue(obj, i)
		if vEnd <= i {
			return
		}
		f(key, obj[i:vEnd])
		i = skipSpace(obj, vEnd)
		if i >= len(obj) || obj[i] != ',' {
			return
		}
		i++
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the string that opens at b[i]
// (a '"'), or len(b) if it does not close.
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++ // the escaped byte; \uXXXX's digits are plain bytes
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// skipValue returns the index just past the value that starts at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = skipString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return len(b)
	}
	for i < len(b) && !strings.ContainsRune(",}] \t\r\n", rune(b[i])) {
		i++ // a number, true, false or null
	}
	return i
}

// unescapeShort appends the unescaped form of the raw JSON string s (no
// quotes) to buf, within buf's capacity, and reports false when it would
// not fit. It serves to compare keys with relayd's field names, which are
// ASCII: any other character is written as 0xFF, which matches no name.
func unescapeShort(s, buf []byte) ([]byte, bool) {
	for i := 0; i < len(s); i++ {
		if len(buf) == cap(buf) {
			return buf, false
		}
		c := s[i]
		if c != '\\' {
			if c >= utf8.RuneSelf {
				c = 0xFF
			}
			buf = append(buf, c)
			continue
		}
		if i+1 >= len(s) {
			return buf, false
		}
		i++
		switch s[i] {
		case 'u':
			r := hex4(s[i+1:])
			if r < 0 {
				return buf, false
			}
			i += 4
			c = 0xFF
			if r < utf8.RuneSelf {
				c = byte(r)
			}
		case 'b':
			c = '\b'
		case 'f':
			c = '\f'
		case 'n':
			c = '\n'
		case 'r':
			c = '\r'
		case 't':
			c = '\t'
		default: // '"', '\\', '/'
			c = s[i]
		}
		buf = append(buf, c)
	}
	return buf, true
}

// unquote returns the value of the raw JSON string s (no quotes) as
// encoding/json decodes it: escapes resolved, a \u escape of a lone
// surrogate and a byte that is not UTF-8 both U+FFFD. ok is false for a
// control character or a bad escape, which valid JSON does not hold.
func unquote(s []byte) (string, bool) {
	plain := true
	for _, c := range s {
		if c == '\\' || c < ' ' || c >= utf8.RuneSelf {
			plain = false
			break
		}
	}
	if plain {
		return string(s), true
	}
	var b strings.Builder
	b.Grow(len(s)) // enough for valid UTF-8: no escape decodes to more bytes than it takes
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c < ' ':
			return "", false
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(s[i:])
			b.WriteRune(r) // U+FFFD for a bad byte, as encoding/json
			i += size
			continue
		case c != '\\':
			b.WriteByte(c)
			i++
			continue
		}
		if i+1 >= len(s) {
			return "", false
		}
		switch e := s[i+1]; e {
		case '"', '\\', '/':
			b.WriteByte(e)
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'u':
			r := hex4(s[i+2:])
			if r < 0 {
				return "", false
			}
			i += 6
			if utf16.IsSurrogate(r) {
				if i+1 < len(s) && s[i] == '\\' && s[i+1] == 'u' {
					if r1 := hex4(s[i+2:]); r1 >= 0 {
						if dec := utf16.DecodeRune(r, r1); dec != unicode.ReplacementChar {
							b.WriteRune(dec)
							i += 6
							continue
						}
					}
				}
				r = unicode.ReplacementChar
			}
			b.WriteRune(r)
			continue
		default:
			return "", false
		}
		i += 2
	}
	return b.String(), true
}

// hex4 returns the value of the four hex digits that s starts with, or -1.
func hex4(s []byte) rune {
	if len(s) < 4 {
		return -1
	}
	var r rune
	for _, c := range s[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}
