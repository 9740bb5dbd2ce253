package client_test

import (
	"bufio"
	"context"
	"net"
	"strings"
	"testing"

	"github.com/relayd/relayd/client"
)

// BenchmarkExecuteFake is the client's own cost of an execute round trip
// (encode, write, read, decode), against a loopback peer that answers at
// once with the reply relayd writes for /bin/true: what relaybench's round
// trip adds to relayd's.
func BenchmarkExecuteFake(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			i := strings.Index(line, `"id":`)
			id := line[i+5 : i+5+strings.IndexAny(line[i+5:], ",}")]
			var reply string
			if strings.Contains(line, `"kind":"ready"`) {
				reply = `{"token":"tok","kind":"ready","id":` + id + `,"protocol":1,"cwd":"/","scope":"process-group"}` + "\n"
			} else {
				reply = `{"token":"tok","kind":"executed","id":` + id + `,"termination":"exited","exitCode":0,"stdout":"",` +
					`"diagnostic":{"category":"none"},"execution":"x-1","settlement":"none","survivors":[],` +
					`"scope":{"mechanism":"process-group"},"stdoutTruncated":false,"durationMs":2}` + "\n"
			}
			if _, err := c.Write([]byte(reply)); err != nil {
				return
			}
		}
	}()
	c, err := (&client.Dialer{MaxWait: 60e9}).Dial(context.Background(), ln.Addr().String(), "tok")
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	req := client.Request{Command: "/bin/true"}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		e, err := c.Execute(ctx, req)
		if err != nil || e.ExitCode != 0 {
			b.Fatal(e, err)
		}
	}
}
