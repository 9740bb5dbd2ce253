package env

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func TestBaseDropsConfiguration(t *testing.T) {
	environ := []string{
		"PATH=/usr/bin",
		"RELAYD_TOKEN=secret",
		"RELAYD_TERM_GRACE=2s",
		"RELAYD_=odd",
		"HOME=/root",
		"XRELAYD_KEEP=1", // only the prefix counts
		"relayd_lower=1", // names are case-sensitive
	}
	got := Base(environ)
	want := []string{"PATH=/usr/bin", "HOME=/root", "XRELAYD_KEEP=1", "relayd_lower=1"}
	if !slices.Equal(got, want) {
		t.Fatalf("Base = %q; want %q", got, want)
	}
	for _, kv := range got {
		if strings.HasPrefix(kv, ConfigPrefix) {
			t.Fatalf("Base kept %q", kv)
		}
	}
	if environ[1] != "RELAYD_TOKEN=secret" {
		t.Fatalf("Base modified its input: %q", environ)
	}
}

func TestSubject(t *testing.T) {
	base := Base([]string{"PATH=/usr/bin", "RELAYD_TOKEN=secret", "LANG=C", "HOME=/root", "API_KEY=relayd-own"})
	baseCopy := slices.Clone(base)

	tests := []struct {
		name        string
		environment map[string]string
		credentials map[string]string
		token       string
		want        []string
	}{
		{
			name: "nothing added",
			want: []string{"PATH=/usr/bin", "LANG=C", "HOME=/root", "API_KEY=relayd-own"},
		},
		{
			name:        "environment added, sorted",
			environment: map[string]string{"ZED": "z", "ALPHA": "a", "MID": "m"},
			want:        []string{"PATH=/usr/bin", "LANG=C", "HOME=/root", "API_KEY=relayd-own", "ALPHA=a", "MID=m", "ZED=z"},
		},
		{
			name:        "environment replaces relayd's own name",
			environment: map[string]string{"LANG": "C.UTF-8", "PATH": "/opt/bin"},
			want:        []string{"HOME=/root", "API_KEY=relayd-own", "LANG=C.UTF-8", "PATH=/opt/bin"},
		},
		{
			name:        "credentials replace relayd's own name and come after environment",
			environment: map[string]string{"B": "env"},
			credentials: map[string]string{"API_KEY": "sk-1", "A_SECRET": "s"},
			want:        []string{"PATH=/usr/bin", "LANG=C", "HOME=/root", "B=env", "API_KEY=sk-1", "A_SECRET=s"},
		},
		{
			name:  "result token only",
			token: "0123456789abcdef0123456789abcdef",
			want:  []string{"PATH=/usr/bin", "LANG=C", "HOME=/root", "API_KEY=relayd-own", ResultTokenVar + "=0123456789abcdef0123456789abcdef"},
		},
		{
			name:        "everything, token last",
			environment: map[string]string{"E": "1"},
			credentials: map[string]string{"C": "2"},
			token:       "ffffffffffffffffffffffffffffffff",
			want:        []string{"PATH=/usr/bin", "LANG=C", "HOME=/root", "API_KEY=relayd-own", "E=1", "C=2", ResultTokenVar + "=ffffffffffffffffffffffffffffffff"},
		},
		{
			name:        "empty value is still a value",
			environment: map[string]string{"HOME": ""},
			want:        []string{"PATH=/usr/bin", "LANG=C", "API_KEY=relayd-own", "HOME="},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Subject(base, tt.environment, tt.credentials, tt.token)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("Subject = %q;\nwant %q", got, tt.want)
			}
			names := map[string]bool{}
			for _, kv := range got {
				name, _, _ := strings.Cut(kv, "=")
				if names[name] {
					t.Fatalf("Subject holds %s twice: %q", name, got)
				}
				names[name] = true
				if strings.HasPrefix(name, ConfigPrefix) {
					t.Fatalf("Subject holds relayd's configuration %q", kv)
				}
			}
			if _, ok := Lookup(got, ResultTokenVar); ok != (tt.token != "") {
				t.Fatalf("%s present = %v; want %v", ResultTokenVar, ok, tt.token != "")
			}
			if !slices.Equal(base, baseCopy) {
				t.Fatalf("Subject modified base: %q; was %q", base, baseCopy)
			}
		})
	}
}

func TestSubjectDeterministic(t *testing.T) {
	base := []string{"PATH=/bin", "HOME=/"}
	environment := map[string]string{}
	credentials := map[string]string{}
	for _, c := range "qwertyuiopasdfghjklzxcvbnm" {
		environment["E_"+string(c)] = string(c)
		credentials["C_"+string(c)] = string(c)
	}
	first := Subject(base, environment, credentials, "0123456789abcdef0123456789abcdef")
	for i := 0; i < 50; i++ { // map iteration order differs from run to run
		if got := Subject(base, environment, credentials, "0123456789abcdef0123456789abcdef"); !slices.Equal(got, first) {
			t.Fatalf("run %d: Subject = %q; want the same order as before, %q", i, got, first)
		}
	}
	env := first[len(base) : len(base)+len(environment)]
	if !slices.IsSorted(env) {
		t.Fatalf("environment part %q is not sorted", env)
	}
	cred := first[len(base)+len(environment) : len(first)-1]
	if !slices.IsSorted(cred) {
		t.Fatalf("credentials part %q is not sorted", cred)
	}
}

func TestCwd(t *testing.T) {
	tests := []struct{ workspace, cwd, want string }{
		{"/workspace", "", "/workspace"},
		{"/workspace", "/tmp", "/tmp"},
		{"/workspace", "/tmp/a/../b/", "/tmp/b"},
		{"/workspace", "sub", "/workspace/sub"},
		{"/workspace", "./sub/dir/", "/workspace/sub/dir"},
		{"/workspace", "..", "/"},
		{"/workspace", ".", "/workspace"},
	}
	for _, tt := range tests {
		if got := Cwd(tt.workspace, tt.cwd); got != tt.want {
			t.Errorf("Cwd(%q, %q) = %q; want %q", tt.workspace, tt.cwd, got, tt.want)
		}
	}
}

func TestCheckDir(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := CheckDir(dir); err != nil {
		t.Fatalf("CheckDir(%s) = %v; want nil", dir, err)
	}
	// The message is what a person reads after a flag's name
	// ("--workspace /nope: no such directory"): the path and what is wrong,
	// without the sentinel's package prefix.
	tests := []struct {
		dir      string
		want     string
		notExist bool
	}{
		{filepath.Join(dir, "missing"), filepath.Join(dir, "missing") + ": no such directory", true},
		{file, file + ": not a directory", false},
		{filepath.Join(file, "below"), filepath.Join(file, "below") + ": not a directory", false},
	}
	for _, tt := range tests {
		err := CheckDir(tt.dir)
		if !errors.Is(err, ErrBadDir) {
			t.Errorf("CheckDir(%s) = %v; want ErrBadDir", tt.dir, err)
			continue
		}
		if err.Error() != tt.want {
			t.Errorf("CheckDir(%s) = %q; want %q", tt.dir, err, tt.want)
		}
		if got := errors.Is(err, fs.ErrNotExist); got != tt.notExist {
			t.Errorf("CheckDir(%s): errors.Is(err, fs.ErrNotExist) = %v; want %v", tt.dir, got, tt.notExist)
		}
	}
}

func TestWorkspace(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)

	tests := []struct {
		in, want string
		err      error
	}{
		{"", dir, nil},
		{".", dir, nil},
		{"sub", filepath.Join(dir, "sub"), nil},
		{"sub/../sub/", filepath.Join(dir, "sub"), nil},
		{dir, dir, nil},
		{"missing", "", ErrBadDir},
		{"file", "", ErrBadDir},
	}
	for _, tt := range tests {
		got, err := Workspace(tt.in)
		if tt.err != nil {
			if !errors.Is(err, tt.err) {
				t.Errorf("Workspace(%q) = %q, %v; want error %v", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || !sameDir(t, got, tt.want) || !filepath.IsAbs(got) {
			t.Errorf("Workspace(%q) = %q, %v; want absolute %q", tt.in, got, err, tt.want)
		}
	}
}

// sameDir compares directories, allowing for a temporary directory reached
// through a symbolic link.
func sameDir(t *testing.T, a, b string) bool {
	t.Helper()
	ia, err1 := os.Stat(a)
	ib, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(ia, ib)
}

// fixture makes dir/rel with the given mode (a directory when mode has ModeDir).
func fixture(t *testing.T, dir, rel string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if mode.IsDir() {
		if err := os.Mkdir(p, mode.Perm()); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if err := os.WriteFile(p, []byte("#!/bin/sh\nexit 0\n"), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // the umask does not apply
		t.Fatal(err)
	}
	return p
}

func TestLookPath(t *testing.T) {
	dir := t.TempDir() // the subject's working directory
	fixture(t, dir, "bin/tool", 0o755)
	fixture(t, dir, "bin/plain", 0o644)
	fixture(t, dir, "first/both", 0o755)
	fixture(t, dir, "second/both", 0o755)
	fixture(t, dir, "noexec/late", 0o644)
	fixture(t, dir, "exec/late", 0o755)
	fixture(t, dir, "dirs/cmd", os.ModeDir|0o755)
	fixture(t, dir, "files/cmd", 0o755)
	fixture(t, dir, "onlydir/dcmd", os.ModeDir|0o755)
	fixture(t, dir, "here", 0o755)
	abs := func(rel string) string { return filepath.Join(dir, rel) }
	path := func(rels ...string) []string {
		var ps []string
		for _, r := range rels {
			if r != "" && !strings.HasPrefix(r, "/") {
				r = abs(r)
			}
			ps = append(ps, r)
		}
		return []string{"HOME=/", "PATH=" + strings.Join(ps, ":")}
	}

	tests := []struct {
		name    string
		command string
		environ []string
		want    string // absolute; a relative result is taken from dir
		err     error
	}{
		{"absolute path", abs("bin/tool"), nil, abs("bin/tool"), nil},
		{"slash path relative to dir", "bin/tool", nil, abs("bin/tool"), nil},
		{"dot-slash path relative to dir", "./bin/tool", path("/nonexistent"), abs("bin/tool"), nil},
		{"slash path ignores PATH", "./here", path("bin"), abs("here"), nil},
		{"absolute path not executable", abs("bin/plain"), nil, "", ErrNotExecutable},
		{"relative path not executable", "bin/plain", nil, "", ErrNotExecutable},
		{"path missing", "bin/missing", nil, "", ErrNotFound},
		{"path through a file", "bin/tool/x", nil, "", ErrNotFound},
		{"slash path to a directory", "./bin", nil, "", ErrNotExecutable},
		{"PATH search", "tool", path("/nonexistent", "bin"), abs("bin/tool"), nil},
		{"PATH order: first wins", "both", path("first", "second"), abs("first/both"), nil},
		{"PATH order: other first", "both", path("second", "first"), abs("second/both"), nil},
		{"PATH entry relative to dir", "tool", []string{"PATH=bin"}, abs("bin/tool"), nil},
		{"empty PATH entry is dir", "here", []string{"PATH=/nonexistent:"}, abs("here"), nil},
		{"non-executable skipped for a later one", "late", path("noexec", "exec"), abs("exec/late"), nil},
		{"only non-executable", "plain", path("bin"), "", ErrNotExecutable},
		{"directory named like the command is skipped", "cmd", path("dirs", "files"), abs("files/cmd"), nil},
		{"only a directory", "dcmd", path("onlydir"), "", ErrNotExecutable},
		{"not in PATH", "nothing-by-this-name", path("bin", "first"), "", ErrNotFound},
		{"not in the working directory without PATH", "here", []string{"HOME=/"}, "", ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := LookPath(tt.command, tt.environ, dir, nil)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("LookPath(%q) = %q, %v; want %v", tt.command, got, err, tt.err)
				}
				if !strings.Contains(err.Error(), tt.command) {
					t.Fatalf("error %q does not name the command %q", err, tt.command)
				}
				return
			}
			if err != nil {
				t.Fatalf("LookPath(%q) = %v; want %s", tt.command, err, tt.want)
			}
			resolved := got
			if !filepath.IsAbs(resolved) {
				resolved = filepath.Join(dir, resolved)
			}
			if filepath.Clean(resolved) != tt.want {
				t.Fatalf("LookPath(%q) = %q (from %s: %s); want %s", tt.command, got, dir, resolved, tt.want)
			}
		})
	}
}

// A relative slash path is taken from the subject's directory, not from
// relayd's own working directory.
func TestLookPathNotFromOwnDirectory(t *testing.T) {
	own := t.TempDir()
	fixture(t, own, "tool", 0o755)
	t.Chdir(own)
	subjectDir := t.TempDir()
	if got, err := LookPath("./tool", nil, subjectDir, nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("LookPath(./tool) from %s = %q, %v; want ErrNotFound (the tool is only in relayd's own directory)", subjectDir, got, err)
	}
}

func TestLookPathDefaultPath(t *testing.T) {
	got, err := LookPath("sh", []string{"HOME=/", "LANG=C"}, t.TempDir(), nil)
	if err != nil {
		t.Fatalf("LookPath(sh) without PATH = %v; want a hit in %s", err, DefaultPath)
	}
	if filepath.Base(got) != "sh" || !slices.Contains(filepath.SplitList(DefaultPath), filepath.Dir(got)) {
		t.Fatalf("LookPath(sh) without PATH = %q; want sh in one of %s", got, DefaultPath)
	}
	// The first directory of DefaultPath that has it, as execvp does.
	for _, d := range filepath.SplitList(DefaultPath) {
		if executable(filepath.Join(d, "sh"), nil) == nil {
			if got != filepath.Join(d, "sh") {
				t.Fatalf("LookPath(sh) = %q; want the first hit %s", got, filepath.Join(d, "sh"))
			}
			break
		}
	}
	// A PATH that is present but lacks the program does not fall back.
	if got, err := LookPath("sh", []string{"PATH=" + t.TempDir()}, "/", nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("LookPath(sh) with a PATH lacking it = %q, %v; want ErrNotFound", got, err)
	}
}

func TestLookup(t *testing.T) {
	environ := []string{"PATH=/bin", "B=", "NOEQUALS", "A=2", "PATHX=/x", "C=x=y"}
	tests := []struct {
		name, want string
		ok         bool
	}{
		{"A", "2", true},
		{"PATH", "/bin", true},
		{"B", "", true},
		{"C", "x=y", true},
		{"NOEQUALS", "", false},
		{"PAT", "", false},
		{"path", "", false},
		{"", "", false},
		{"MISSING", "", false},
	}
	for _, tt := range tests {
		if got, ok := Lookup(environ, tt.name); got != tt.want || ok != tt.ok {
			t.Errorf("Lookup(%q) = %q, %v; want %q, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
	if _, ok := Lookup(nil, "A"); ok {
		t.Error("Lookup in nil found something")
	}
}

// The lookup is the subject's: a PATH directory only root may search is
// skipped for nobody, and root still finds its own copy first.
func TestLookPathAsUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the lookup is made as nobody")
	}
	base, err := os.MkdirTemp("", "relayd-lookpath-") // t.TempDir's parent is 0700
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	fixture(t, base, "private/prog", 0o755)
	fixture(t, base, "public/prog", 0o755)
	fixture(t, base, "public/plain", 0o644)
	for _, d := range []struct {
		dir  string
		mode os.FileMode
	}{{"private", 0o700}, {"public", 0o755}} {
		if err := os.Chmod(filepath.Join(base, d.dir), d.mode); err != nil {
			t.Fatal(err)
		}
	}
	environ := []string{"PATH=" + filepath.Join(base, "private") + ":" + filepath.Join(base, "public")}
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	if got, err := LookPath("prog", environ, "/", nobody); err != nil || got != filepath.Join(base, "public/prog") {
		t.Fatalf("LookPath(prog) as nobody = %q, %v; want %s", got, err, filepath.Join(base, "public/prog"))
	}
	if got, err := LookPath("prog", environ, "/", nil); err != nil || got != filepath.Join(base, "private/prog") {
		t.Fatalf("LookPath(prog) as relayd = %q, %v; want %s", got, err, filepath.Join(base, "private/prog"))
	}
	if got, err := LookPath(filepath.Join(base, "private/prog"), nil, "/", nobody); !errors.Is(err, ErrNotExecutable) {
		t.Fatalf("LookPath(private/prog) as nobody = %q, %v; want ErrNotExecutable", got, err)
	}
	if got, err := LookPath("plain", environ, "/", nobody); !errors.Is(err, ErrNotExecutable) {
		t.Fatalf("LookPath(plain) as nobody = %q, %v; want ErrNotExecutable", got, err)
	}
}
