package client_test

import (
	"testing"

	"github.com/relayd/relayd/client"
)

// quickHead reads relayd's usual replies and declines everything else,
// which is then decoded in full.
func TestQuickHead(t *testing.T) {
	for _, tt := range []struct {
		line     string
		kind, id string
		ok       bool
	}{
		{`{"token":"t","kind":"executed","id":12,"termination":"exited"}`, "executed", "12", true},
		{`{"token":"t","kind":"ready","instruction":""}`, "ready", "", true},
		{`{"kind":"error","id":-3,"error":{}}`, "error", "-3", true},
		{`{"kind":"error","error":{}}`, "error", "", true},
		{`{"token":"a\"b","kind":"ready"}`, "", "", false},
		{`{"token":"t","kind":"verified","id":"x"}`, "", "", false},
		{`{"id":1,"kind":"executed"}`, "", "", false},
		{`{"token":"t","kind":"execu`, "", "", false},
		{`{"token":"t","kind":"executed","id":}`, "", "", false},
		{` {"kind":"ready"}`, "", "", false},
	} {
		kind, id, ok := client.QuickHead([]byte(tt.line))
		if kind != tt.kind || string(id) != tt.id || ok != tt.ok {
			t.Errorf("quickHead(%s) = %q, %q, %t; want %q, %q, %t", tt.line, kind, id, ok, tt.kind, tt.id, tt.ok)
		}
	}
}
