package marks

import (
	"errors"
	"runtime"
	"slices"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A listing is what a directory holds: each name, in byte order, with
// its lstat. Walks and restores list a directory with getdents on the
// descriptor they hold (no os.File, no second descriptor) and lstat each
// name relative to it; the listings of the subdirectories a walk will
// enter next are made ahead of it by a few goroutines (a lister), so that
// the lstats of a large tree run on every CPU.

// dirent is one name of a listing.
type dirent struct {
	name string
	st   unix.Stat_t
	err  error // the lstat's: an entry whose lstat failed has only its name
	job  *job  // its listing, being made ahead (a directory to enter); nil once taken
}

// direntsBuf is the size of the buffer getdents fills.
const direntsBuf = 32 << 10

// readNames lists the names in the directory fd, just opened (getdents
// reads on from the descriptor's offset), sorted in byte order, with
// getdents into buf.
func readNames(fd int, buf []byte) ([]string, error) {
	var names []string
	for {
		n, err := unix.Getdents(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			break
		}
		for b := buf[:n]; len(b) > 0; {
			// struct linux_dirent64: ino 8, off 8, reclen 2, type 1, name.
			if len(b) < 19 {
				return nil, unix.EIO
			}
			reclen := int(*(*uint16)(unsafe.Pointer(&b[16])))
			if reclen < 19 || reclen > len(b) {
				return nil, unix.EIO
			}
			name := b[19:reclen]
			if i := slices.Index(name, 0); i >= 0 {
				name = name[:i]
			}
			b = b[reclen:]
			if len(name) == 0 || len(name) == 1 && name[0] == '.' || len(name) == 2 && name[0] == '.' && name[1] == '.' {
				continue
			}
			names = append(names, string(name))
		}
	}
	slices.Sort(names)
	return names, nil
}

// list lists the directory fd: its names, sorted, each with its lstat
// (a name gone meanwhile is left out).
func list(fd int, buf []byte) ([]dirent, error) {
	names, err := readNames(fd, buf)
	if err != nil {
		return nil, err
	}
	ents := make([]dirent, 0, len(names))
	for _, name := range names {
		ents = append(ents, dirent{name: name})
		d := &ents[len(ents)-1]
		if d.err = unix.Fstatat(fd, name, &d.st, unix.AT_SYMLINK_NOFOLLOW); errors.Is(d.err, unix.ENOENT) {
			ents = ents[:len(ents)-1] // gone meanwhile
		}
	}
	return ents, nil
}

// openFunc opens the directory name in pfd, which a listing saw as st;
// fd -1 and no error when what is there is no longer that directory.
type openFunc func(pfd int, name string, st *unix.Stat_t) (int, error)

// job is the listing of one directory, made ahead of the walk that
// needs it, by a lister's goroutine or, when none has begun it, by the
// walk itself.
type job struct {
	pfd   int
	name  string
	st    *unix.Stat_t
	open  openFunc
	state int // jobQueued, jobTaken, jobCancelled (under the lister's mu)
	token bool
	done  chan struct{}
	// The result: fd -1 for a directory replaced meanwhile.
	fd   int
	ents []dirent
	err  error // of the open (opening) or of the listing (not opening)
	// opening: err is the open's, not the listing's.
	opening bool
}

const (
	jobQueued = iota
	jobTaken
	jobCancelled
)

// lister makes listings ahead of a walk. Its queue is a stack: the
// listings of the subdirectories of the directory the walk just listed
// are the next it needs (it walks depth first). At most ahead listings
// are made and not yet taken, each holding its directory open.
type lister struct {
	mu     sync.Mutex
	cond   *sync.Cond
	stack  []*job
	closed bool
	tokens chan struct{}
	wg     sync.WaitGroup
}

// listers is how many goroutines make listings ahead of one walk.
func listers() int { return min(runtime.GOMAXPROCS(0), 4) }

// newLister starts a lister of n goroutines; close ends them.
func newLister(n int) *lister {
	l := &lister{tokens: make(chan struct{}, 4*n+4)}
	l.cond = sync.NewCond(&l.mu)
	for range n {
		l.wg.Add(1)
		go l.work()
	}
	return l
}

func (l *lister) work() {
	defer l.wg.Done()
	buf := make([]byte, direntsBuf)
	for {
		l.tokens <- struct{}{} // a listing made and not taken holds one
		l.mu.Lock()
		var j *job
		for {
			for j == nil && len(l.stack) > 0 {
				j = l.stack[len(l.stack)-1]
				l.stack[len(l.stack)-1] = nil
				l.stack = l.stack[:len(l.stack)-1]
				if j.state != jobQueued {
					j = nil
				}
			}
			if j != nil || l.closed {
				break
			}
			l.cond.Wait()
		}
		if j == nil {
			l.mu.Unlock()
			<-l.tokens
			return
		}
		j.state, j.token = jobTaken, true
		l.mu.Unlock()
		j.run(buf)
		close(j.done)
	}
}

// close ends the lister's goroutines, once every job queued was taken
// or cancelled.
func (l *lister) close() {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.closed = true
	l.cond.Broadcast()
	l.mu.Unlock()
	l.wg.Wait()
}

// queue queues the listings of the directories ents[i] for which want
// is true, the first to be needed on top; pfd stays open until each is
// taken or cancelled (cancel).
func (l *lister) queue(pfd int, ents []dirent, open openFunc, want func(i int) bool) {
	if l == nil {
		return
	}
	var jobs []*job
	for i := range ents {
		d := &ents[i]
		if d.err == nil && d.st.Mode&unix.S_IFMT == unix.S_IFDIR && want(i) {
			d.job = &job{pfd: pfd, name: d.name, st: &d.st, open: open, done: make(chan struct{}), fd: -1}
			jobs = append(jobs, d.job)
		}
	}
	if len(jobs) == 0 {
		return
	}
	l.mu.Lock()
	for i := len(jobs) - 1; i >= 0; i-- {
		l.stack = append(l.stack, jobs[i])
	}
	l.cond.Broadcast()
	l.mu.Unlock()
}

// run opens the directory and lists it.
func (j *job) run(buf []byte) {
	j.fd, j.err = j.open(j.pfd, j.name, j.st)
	if j.err != nil || j.fd < 0 {
		j.opening = true
		return
	}
	j.ents, j.err = list(j.fd, buf)
}

// take returns the listing of the directory d in pfd: made ahead, or
// made now (with open). The caller closes fd (>= 0); fd -1 and no
// error: the directory was replaced meanwhile.
func (l *lister) take(pfd int, d *dirent, open openFunc, buf []byte) (j *job) {
	j, d.job = d.job, nil
	if j == nil {
		j = &job{pfd: pfd, name: d.name, st: &d.st, open: open, fd: -1}
		j.run(buf)
		return j
	}
	l.mu.Lock()
	if j.state == jobQueued {
		j.state = jobTaken
		l.mu.Unlock()
		j.run(buf)
		close(j.done)
		return j
	}
	l.mu.Unlock()
	<-j.done
	if j.token {
		<-l.tokens
	}
	return j
}

// cancel drops the listings of ents not taken, closing what they hold
// open; every listing queued for ents is taken or cancelled before
// their directory's descriptor is closed.
func (l *lister) cancel(ents []dirent) {
	for i := range ents {
		j := ents[i].job
		if j == nil {
			continue
		}
		ents[i].job = nil
		l.mu.Lock()
		if j.state == jobQueued {
			j.state = jobCancelled
			l.mu.Unlock()
			continue
		}
		l.mu.Unlock()
		<-j.done
		if j.fd >= 0 {
			unix.Close(j.fd)
		}
		if j.token {
			<-l.tokens
		}
	}
}

// skipsUnder reports whether a path of skip is inside p (not p itself):
// only then can a name in p be skipped.
func skipsUnder(p string, skip []string) bool {
	for _, s := range skip {
		if s != p && Under(s, p) {
			return true
		}
	}
	return false
}
