package session

import "testing"

// A terminal's last bytes can come after its session ended (the drain
// runs on past the shell's end): they are kept, and nothing panics (a
// write after end closed the ended channel again, and relayd died with a
// pty session open at shutdown).
func TestScreenWriteAfterEnd(t *testing.T) {
	r := newScreen(16)
	r.Write([]byte("ab"))
	r.end()
	r.Write([]byte("cd"))
	data, next, _, ended, changed := r.since(0)
	if string(data) != "abcd" || next != 4 || !ended {
		t.Fatalf("since(0) = %q, %d, ended %v; want abcd, 4, true", data, next, ended)
	}
	select {
	case <-changed:
	default:
		t.Fatal("an ended screen's changed channel is open: a reader would wait")
	}
}
