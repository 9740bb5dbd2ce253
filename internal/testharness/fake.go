package testharness

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
)

// BodyRelayd is a fake relayd for a controller's tests of bulk bodies
// (docs/protocol.md 4.6, "Bulk bodies"): it answers ready listing the
// "body" extension, every get with a content line, a raw body of Body
// and a sent line carrying Sent as its sha256, and anything else with
// an unknown-kind error. With Cut, the content line announces 1 MiB more
// than Body and the connection closes after Body: a peer lost inside a
// body. It stands for a relayd, or a path between, that changed the bytes
// or the digest, which a real relayd cannot be made to do.
type BodyRelayd struct {
	Body []byte
	Sent string
	Cut  bool
}

// Serve listens on loopback until stop is called and returns the address.
func (f BodyRelayd) Serve() (addr string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go f.serve(c)
		}
	}()
	return ln.Addr().String(), func() { ln.Close() }, nil
}

func (f BodyRelayd) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return
		}
		var m struct {
			Kind string `json:"kind"`
			ID   int64  `json:"id"`
		}
		_ = json.Unmarshal(line, &m)
		switch m.Kind {
		case "ready":
			fmt.Fprintf(c, `{"kind":"ready","id":%d,"protocol":1,"cwd":"/","scope":"process-group","extensions":["body"]}`+"\n", m.ID)
		case "get":
			n := len(f.Body)
			if f.Cut {
				n += 1 << 20
			}
			fmt.Fprintf(c, `{"kind":"content","id":%d,"bytes":%d,"body":%d}`+"\n", m.ID, n, n)
			c.Write(f.Body)
			if f.Cut {
				return
			}
			fmt.Fprintf(c, `{"kind":"sent","id":%d,"sha256":"%s"}`+"\n", m.ID, f.Sent)
		default:
			fmt.Fprintf(c, `{"kind":"error","id":%d,"error":{"category":"unknown-kind","message":"fake"}}`+"\n", m.ID)
		}
	}
}
