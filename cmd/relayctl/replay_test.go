package main

import (
	"strings"
	"testing"
)

// What vim, less, python and their kind print, replayed: every query
// dropped, everything else kept byte for byte; and live, nothing dropped.
func TestReplayDropsTerminalQueries(t *testing.T) {
	const e = "\x1b"
	for _, c := range []struct{ in, want string }{
		{"plain text\r\n", "plain text\r\n"},
		{e + "[6n", ""},               // DSR, the cursor's position
		{e + "[5n", ""},               // DSR, status
		{e + "[?6n", ""},              // DEC DSR
		{e + "[?996n", ""},            // the colour scheme
		{e + "[c" + e + "[0c", ""},    // DA1
		{e + "[>c" + e + "[>0c", ""},  // DA2
		{e + "[=c", ""},               // DA3
		{e + "[14t" + e + "[18t", ""}, // window size reports
		{e + "[16t" + e + "[21t", ""}, // cell size, title
		{e + "[22;0t" + e + "[8;24;80t", e + "[22;0t" + e + "[8;24;80t"}, // title save, resize: no reply
		{e + "[?12$p" + e + "[4$p", ""},                                  // DECRQM
		{e + "[>q" + e + "[>0q", ""},                                     // XTVERSION
		{e + "[?u", ""},                                                  // kitty keyboard flags
		{e + "[?4m", ""},                                                 // XTQMODKEYS
		{e + "]10;?\x07" + e + "]11;?" + e + "\\", ""},                   // OSC colours, BEL and ST
		{e + "]4;1;?\x07", ""},
		{e + "]52;c;?\x07", ""},
		{e + "P$q q" + e + "\\", ""},             // DECRQSS
		{e + "P+q544e" + e + "\\", ""},           // XTGETTCAP
		{e + "Z", ""},                            // DECID
		{"a\x05b", "ab"},                         // ENQ
		{e + "]0;title\x07", e + "]0;title\x07"}, // a title: no reply
		{e + "[?1049h" + e + "[H" + e + "[2J" + e + "[1;31mred" + e + "[0m" + e + "[?1049l",
			e + "[?1049h" + e + "[H" + e + "[2J" + e + "[1;31mred" + e + "[0m" + e + "[?1049l"},
		{e + "[?1h" + e + "=" + e + "(B" + e + "[>4;2m", e + "[?1h" + e + "=" + e + "(B" + e + "[>4;2m"},
		{"bash-5.2# vi\r\n" + e + "[?1049h" + e + "[>4;2m" + e + "[?1h" + e + "=" + e + "[6n" + e + "[>c" + e + "]11;?\x07~\r\n",
			"bash-5.2# vi\r\n" + e + "[?1049h" + e + "[>4;2m" + e + "[?1h" + e + "=~\r\n"},
		{"héllo " + e + "[6n wörld", "héllo  wörld"},
	} {
		var f replayFilter
		if got := string(f.replay([]byte(c.in))); got != c.want || len(f.pending) != 0 {
			t.Errorf("replay(%q) = %q (held %q), want %q", c.in, got, f.pending, c.want)
		}
		var live replayFilter
		if got := string(live.live([]byte(c.in))); got != c.in {
			t.Errorf("live(%q) = %q: live output must pass as it came", c.in, got)
		}
	}
}

// A query cut by the replay's end is held, then dropped whole when its
// rest comes live; what follows it passes, queries included.
func TestReplayHoldsACutQuery(t *testing.T) {
	const e = "\x1b"
	for _, cut := range []string{e, e + "[", e + "[>", e + "]11;", e + "]11;?", e + "P$q"} {
		whole := map[string]string{e: e + "[6n", e + "[": e + "[6n", e + "[>": e + "[>c",
			e + "]11;": e + "]11;?\x07", e + "]11;?": e + "]11;?" + e + "\\", e + "P$q": e + "P$q q" + e + "\\"}[cut]
		var f replayFilter
		if got := string(f.replay([]byte("before" + cut))); got != "before" {
			t.Fatalf("replay(before%q) = %q, want before", cut, got)
		}
		rest := strings.TrimPrefix(whole, cut)
		if got := string(f.live([]byte(rest + "after" + e + "[6n"))); got != "after"+e+"[6n" {
			t.Errorf("live after a cut %q: %q, want %q", cut, got, "after"+e+"[6n")
		}
	}
	var f replayFilter // a cut sequence that is no query comes whole
	f.replay([]byte(e + "[1;3"))
	if got := string(f.live([]byte("1mred"))); got != e+"[1;31mred" {
		t.Errorf("live after a cut colour: %q", got)
	}
	if got := string(f.live([]byte(e + "[6n"))); got != e+"[6n" {
		t.Errorf("live: %q", got)
	}
}
