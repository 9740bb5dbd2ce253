package main

import (
	"bufio"
	"net"
	"strings"
	"testing"
)

// A relayd that does not know a field relayctl sends says so in "ignored"
// (protocol 4.6); relayctl prints one line about it on stderr and goes
// on. No relayd of this tree ignores a field relayctl sends, so the relayd
// here is a stand-in that answers as an older one would.
func TestIgnoredPrintsOneLine(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		r := bufio.NewReader(c)
		for _, reply := range []string{
			`{"token":"tok","kind":"ready","id":1,"protocol":1,"version":"old","cwd":"/","scope":"process-group"}`,
			`{"token":"tok","kind":"verified","id":2,"quiescent":true,"survivors":[],"ignored":["all","keep"]}`,
		} {
			if _, err := r.ReadBytes('\n'); err != nil {
				return
			}
			c.Write([]byte(reply + "\n"))
		}
	}()
	res := relayctl(t, []string{"RELAYD_TOKEN=tok"}, "verify", "--addr", ln.Addr().String())
	if res.code != 0 {
		t.Fatalf("relayctl verify: exit %d; want 0 (stderr %q)", res.code, res.stderr)
	}
	var lines []string
	for _, l := range strings.Split(res.stderr, "\n") {
		if strings.Contains(l, "ignored") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "relayctl: ") || !strings.Contains(lines[0], `"all", "keep"`) {
		t.Fatalf("stderr %q; want one relayctl line naming the ignored \"all\", \"keep\"", res.stderr)
	}
}
