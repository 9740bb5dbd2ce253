package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Rule 6.11, artifacts: with --artifacts-dir, each stream's artifact stops
// growing at --max-artifact-bytes, set here through its environment twin,
// while the output is still drained: neither the subject nor a survivor that
// writes on after the reply ever blocks.
func TestArtifactLimit(t *testing.T) { eachScope(t, artifactLimit) }

func artifactLimit(t *testing.T, mech string) {
	const limit = 100000
	art := t.TempDir()
	d := startRelayd(t, opts{scope: mech, args: []string{"--artifacts-dir", art},
		env: []string{"RELAYD_MAX_ARTIFACT_BYTES=100kB"}})
	c := d.connect()
	done := filepath.Join(d.dir, "survivor-done")
	pid := d.pidFile("writer.pid")
	// 3 MB on each stream from the subject, then 50 MB more on stdout from a
	// survivor that marks when it has written them all.
	r := c.sh(`head -c 3000000 /dev/zero; head -c 3000000 /dev/zero >&2
(head -c 50000000 /dev/zero; : > `+q(done)+`) & echo $! > `+q(pid)+`
exit 0`, msg{"timeoutMs": 60000})
	wantExit(t, r, "exited", 0)
	id := r["execution"].(string)
	waitFor(t, 60*time.Second, "the survivor to write 50 MB through the drain", func() bool {
		_, err := os.Stat(done)
		return err == nil
	})
	size := func(stream string) int64 {
		info, err := os.Stat(filepath.Join(art, id+"."+stream+".txt"))
		if err != nil {
			t.Fatal(err)
		}
		return info.Size()
	}
	for _, stream := range []string{"stdout", "stderr"} {
		if got := size(stream); got != limit {
			t.Errorf("%s artifact is %d bytes; want exactly --max-artifact-bytes, %d", stream, got, limit)
		}
	}
	d.stopClean()
}
