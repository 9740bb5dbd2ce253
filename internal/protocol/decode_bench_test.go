package protocol

import "testing"

// BenchmarkDecodeExecute decodes the execute message of a /bin/true round
// trip; BenchmarkDecodeExecuteReference does it with the decoder that built
// every field before the token was checked (fuzz_test.go).
var executeLine = []byte(`{"token":"0123456789abcdef0123456789abcdef","kind":"execute","id":7,"command":"/bin/true","args":[],"environment":{"LANG":"C.UTF-8"},"credentials":{},"captureStdout":true,"timeoutMs":60000}`)

func BenchmarkDecodeExecute(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		m, _ := Decode(executeLine)
		if _, err := m.Execute(); err != nil {
			b.Fatal(err)
		}
	}
}
