package exec

import (
	"os"
	"path/filepath"
	"testing"
)

// A leaf's memory counters are read for the reply after the scope was
// closed: its OOM kills and peak are those read just before the leaf was
// removed. This host's memory controller is on cgroup v1, so no leaf here
// has memory.events or memory.peak: a directory stands in for the leaf
// (mocked: the cgroup v2 memory controller cannot exist here).
func TestLeafCountersOutliveTheLeaf(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "leaf")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("memory.events", "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\noom_group_kill 0\n")
	write("memory.peak", "104857600\n")
	s := &cgScope{c: &Cgroups{controllers: map[string]bool{"memory": true}}, dir: dir}
	if n, ok := ScopeOOMKills(s); !ok || n != 1 {
		t.Fatalf("ScopeOOMKills = %d, %v; want 1", n, ok)
	}
	write("memory.events", "oom_kill 2\n")
	write("memory.peak", "209715200\n")
	s.remove() // reads the counters, then cannot rmdir (a plain directory with files)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	s.removed.Store(true) // as the kernel's rmdir of an empty leaf would
	if n, ok := ScopeOOMKills(s); !ok || n != 2 {
		t.Fatalf("after removal ScopeOOMKills = %d, %v; want 2 (read before the removal)", n, ok)
	}
	if n, ok := ScopeMemoryPeak(s); !ok || n != 200<<20 {
		t.Fatalf("after removal ScopeMemoryPeak = %d, %v; want %d", n, ok, 200<<20)
	}
	none := &cgScope{c: &Cgroups{controllers: map[string]bool{}}, dir: dir}
	if _, ok := ScopeOOMKills(none); ok {
		t.Fatal("ScopeOOMKills without a memory controller: ok")
	}
}
