package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// widenPipe asks for a pipe of bridgeBufBytes when f is a pipe (a bridge's
// stdin or stdout under docker exec -i): fewer wake-ups of the bridge and
// of the process at the other end per byte. The kernel may refuse
// (fs.pipe-max-size, the user's pipe quota); the pipe then stays as it was.
func widenPipe(v any) {
	f, ok := v.(*os.File)
	if !ok {
		return
	}
	rc, err := f.SyscallConn() // not f.Fd(), which would make the file blocking
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		var st unix.Stat_t
		if unix.Fstat(int(fd), &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO {
			_, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, bridgeBufBytes)
		}
	})
}
