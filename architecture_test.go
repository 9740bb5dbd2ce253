// Package relayd holds no code: its one test file checks ARCHITECTURE.md
// against the module, so that the map cannot drift from the house.
package relayd

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/relayd/relayd"

// aliases are the short names ARCHITECTURE.md's "may import" cells use
// for packages outside the module.
var aliases = map[string]string{
	"zerolog": "github.com/rs/zerolog",
	"pflag":   "github.com/spf13/pflag",
	"x/sys":   "golang.org/x/sys/unix",
}

// room is one row of ARCHITECTURE.md's table of packages.
type room struct {
	names    []string // module-relative package paths; "." is the module root
	mayUse   []string // import paths outside the standard library
	anything bool     // "—": not a Go package
}

var backticked = regexp.MustCompile("`([^`]+)`")

// rooms parses the table under "## Rooms", keyed by package path.
func rooms(t *testing.T) map[string]room {
	t.Helper()
	b, err := os.ReadFile("ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Rooms\n")
	if !ok {
		t.Fatal("ARCHITECTURE.md has no \"## Rooms\" section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	out := map[string]room{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if !strings.HasPrefix(line, "| `") || len(cells) < 5 {
			continue
		}
		var r room
		for _, m := range backticked.FindAllStringSubmatch(cells[1], -1) {
			r.names = append(r.names, strings.TrimSuffix(strings.Fields(m[1])[0], "/"))
		}
		may := strings.TrimSpace(cells[3])
		r.anything = may == "—"
		for _, m := range backticked.FindAllStringSubmatch(may, -1) {
			p := m[1]
			if a, ok := aliases[p]; ok {
				p = a
			} else if !strings.Contains(strings.Split(p, "/")[0], ".") {
				p = module + "/" + p
			}
			r.mayUse = append(r.mayUse, p)
		}
		for _, n := range r.names {
			out[n] = r
		}
	}
	if len(out) == 0 {
		t.Fatal("ARCHITECTURE.md: no rows found under \"## Rooms\"")
	}
	return out
}

// pkg is one line of go list: a package and what it imports (or, with
// -deps, everything it links).
type pkg struct {
	path    string // module-relative, "." for the root
	imports []string
}

// goList runs go list ./... with format, whose first word is the import path.
func goList(t *testing.T, format string, tags string) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-tags", tags, "-f", format, "./...")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var ps []pkg
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		p := strings.TrimPrefix(strings.TrimPrefix(f[0], module), "/")
		if p == "" {
			p = "."
		}
		ps = append(ps, pkg{p, f[1:]})
	}
	return ps
}

// TestArchitectureNamesEveryPackage fails when a package exists without a
// row in ARCHITECTURE.md, or a row names a package that does not exist.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	rs := rooms(t)
	exists := map[string]bool{}
	for _, p := range goList(t, "{{.ImportPath}}", "docker") {
		exists[p.path] = true
		if _, ok := rs[p.path]; !ok {
			t.Errorf("package %s has no row in ARCHITECTURE.md's Rooms: add one (what it owns, may import, must not do)", p.path)
		}
	}
	// The rooms that are not Go packages: each client library under clients/.
	dirs, _ := filepath.Glob("clients/*")
	for _, d := range dirs {
		exists[d] = true
		if _, ok := rs[d]; !ok {
			t.Errorf("%s has no row in ARCHITECTURE.md's Rooms", d)
		}
	}
	for n := range rs {
		if !exists[n] {
			t.Errorf("ARCHITECTURE.md names %s, which is no package of this module: remove or rename its row", n)
		}
	}
}

// TestArchitectureImports enforces the "may import" column: a package
// imports nothing outside the standard library that its row does not name.
// Test files are not checked (any test may use testharness).
func TestArchitectureImports(t *testing.T) {
	rs := rooms(t)
	for _, tags := range []string{"", "relayd_faults,relayd_profile,docker"} {
		for _, p := range goList(t, `{{.ImportPath}} {{join .Imports " "}}`, tags) {
			r, ok := rs[p.path]
			if !ok || r.anything {
				continue // TestArchitectureNamesEveryPackage says so
			}
			for _, imp := range p.imports {
				if !strings.Contains(strings.Split(imp, "/")[0], ".") {
					continue // the standard library
				}
				if !slices.Contains(r.mayUse, imp) {
					t.Errorf("%s imports %s (tags %q), which its row in ARCHITECTURE.md does not allow: drop the import, or change the rule and say why", p.path, imp, tags)
				}
			}
		}
	}
}

// mustNotImport are "must not" cells an import list can show: a
// package's direct imports (non-test files) exclude these.
var mustNotImport = map[string][]string{
	"internal/protocol":    {"net", "log", "os/exec"}, // no I/O on a connection, no logging, runs nothing
	"internal/session":     {"os/exec"},               // starts nothing itself: internal/exec does
	"internal/testharness": {"testing"},               // a caller turns its errors into failures
}

// TestArchitectureMustNot enforces the "must not" rules that an import
// graph can show: direct imports (mustNotImport), and over everything
// each package links, zerolog's global logger, testharness, and os/exec
// in relayd.
func TestArchitectureMustNot(t *testing.T) {
	for _, p := range goList(t, `{{.ImportPath}} {{join .Imports " "}}`, "relayd_faults,relayd_profile") {
		for _, imp := range p.imports {
			if slices.Contains(mustNotImport[p.path], imp) {
				t.Errorf("%s imports %s, which ARCHITECTURE.md's \"must not\" cell rules out", p.path, imp)
			}
		}
	}
	for _, p := range goList(t, `{{.ImportPath}} {{join .Deps " "}}`, "") {
		for _, d := range p.imports {
			switch {
			case d == "github.com/rs/zerolog/log":
				t.Errorf("%s links zerolog's global logger (via %s): pass the logger main built", p.path, d)
			case d == module+"/internal/testharness" && p.path != "bench/relaybench":
				t.Errorf("%s links internal/testharness: it is for tests only", p.path)
			case d == "os/exec" && p.path == "cmd/relayd":
				t.Error("relayd links os/exec: every process is started by a shim and reaped by the one reaper; a second waiter steals exit statuses")
			}
		}
	}
}

// forbidden is a "must not" cell that an import list cannot show: the
// identifiers (a regular expression over their names) of one imported
// package that a package's non-test files may not refer to.
type forbidden struct {
	pkg   string // import path
	names string // regular expression, anchored
	why   string
}

// mustNotUse: internal/session imports x/sys for its sockets and files,
// and os for everything; it must still not signal a process, pin one with
// a pidfd or drive a terminal: those are internal/exec's (its pidfd,
// Part, Terminal and ReadStat).
var mustNotUse = map[string][]forbidden{
	"internal/session": {
		{"golang.org/x/sys/unix", `Kill|Tgkill|Tkill|Pidfd.*|PIDFD_.*|Ioctl.*|SYS_IOCTL|SYS_KILL|SYS_TGKILL|SYS_TKILL|SYS_PIDFD_.*|TIOC.*|TC[GS]ETS.*|TCFLSH|TCIFLUSH`,
			"signals, pidfds and terminal ioctls are internal/exec's (SignalPinned, Part, Terminal)"},
		{"syscall", `Kill|Tgkill|Tkill|SYS_IOCTL|SYS_KILL|SYS_TGKILL|SYS_TKILL|SYS_PIDFD_.*|TIOC.*|TCGETS|TCSETS`,
			"signals and terminal ioctls are internal/exec's"},
		{"os", `FindProcess|StartProcess`, "session starts and signals no process: internal/exec does"},
	},
}

// TestArchitectureMustNotUse enforces mustNotUse: it reads each package's
// non-test files and fails on every reference to a forbidden identifier,
// whatever name the file imports its package under.
func TestArchitectureMustNotUse(t *testing.T) {
	for dir, rules := range mustNotUse {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no Go files (%v)", dir, err)
		}
		fset := token.NewFileSet()
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			local := map[string]forbidden{} // by the name the file imports a ruled package under
			names := map[string]*regexp.Regexp{}
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				for _, r := range rules {
					if r.pkg != path {
						continue
					}
					n := filepath.Base(path)
					if imp.Name != nil {
						n = imp.Name.Name
					}
					if n == "." {
						t.Errorf("%s dot-imports %s: name it, so that %s can be checked", name, path, t.Name())
					}
					local[n] = r
					names[n] = regexp.MustCompile(`^(?:` + r.names + `)$`)
				}
			}
			ast.Inspect(f, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				id, ok := sel.X.(*ast.Ident)
				if !ok {
					return true
				}
				r, ok := local[id.Name]
				if ok && names[id.Name].MatchString(sel.Sel.Name) {
					t.Errorf("%s: %s.%s, which ARCHITECTURE.md's \"must not\" cell of %s rules out: %s",
						fset.Position(sel.Pos()), id.Name, sel.Sel.Name, dir, r.why)
				}
				return true
			})
		}
	}
}

// filesInDoc are the packages whose doc comment maps their files: each
// file of the package is named there (a * stands for any text), and
// each name there is a file. A package doc that covers a third of its
// package fails here.
var filesInDoc = map[string]string{
	"bench/relaybench": "main.go",
	"cmd/relayd":       "main.go",
	"internal/exec":    "doc.go",
	"internal/marks":   "doc.go",
}

var goFileName = regexp.MustCompile(`[A-Za-z0-9_*]+\.go\b`)

func TestPackageDocsNameEveryFile(t *testing.T) {
	for dir, docFile := range filesInDoc {
		b, err := os.ReadFile(filepath.Join(dir, docFile))
		if err != nil {
			t.Fatal(err)
		}
		doc, _, _ := strings.Cut(string(b), "\npackage ")
		names := goFileName.FindAllString(doc, -1)
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		named := map[string]bool{}
		for _, f := range files {
			f = filepath.Base(f)
			if strings.HasSuffix(f, "_test.go") || f == docFile && docFile == "doc.go" {
				continue
			}
			for _, n := range names {
				if ok, _ := filepath.Match(n, f); ok {
					named[n] = true
					named[f] = true
				}
			}
			if !named[f] {
				t.Errorf("%s/%s is not named in the package doc (%s): say what it holds", dir, f, docFile)
			}
		}
		for _, n := range names {
			if !named[n] {
				t.Errorf("the package doc of %s (%s) names %s, which is no file there", dir, docFile, n)
			}
		}
	}
}
