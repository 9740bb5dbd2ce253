package protocol

import (
	"errors"
	"io"
	"sync/atomic"
)

// Overlap moves a stream through two buffers of size bytes in two
// goroutines, so that filling one overlaps draining the other: on two
// CPUs a body's socket copy and sha256 on one side, its file or socket
// write on the other (section 4.6, "Bulk bodies"). fill fills b (as much
// of it as it wants) and returns how many bytes it put there, with
// io.EOF after the last piece or another error to stop; drain takes
// those bytes, in order, from a second goroutine, and returning an error
// stops the filling after the piece it is in. Memory stays the two
// buffers. It returns fill's error (io.EOF not counted) and drain's.
func Overlap(size int, fill func(b []byte) (int, error), drain func(p []byte) error) (ferr, derr error) {
	free := make(chan []byte, 2)
	free <- make([]byte, size)
	free <- make([]byte, size)
	full := make(chan []byte, 2)
	drained := make(chan error, 1)
	var stopped atomic.Bool
	go func() {
		var err error
		for p := range full {
			if err == nil {
				if err = drain(p); err != nil {
					stopped.Store(true)
				}
			}
			free <- p[:cap(p)]
		}
		drained <- err
	}()
	for !stopped.Load() {
		b := <-free
		k, err := fill(b)
		if k > 0 {
			full <- b[:k]
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				ferr = err
			}
			break
		}
	}
	close(full)
	return ferr, <-drained
}
