package relayd

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The contract lives in the repository: docs/protocol.md defines every
// rule and section that the code, the tests and the docs cite, under a
// heading the citation can name ("## 6. Lifecycle rules" for "section 6",
// "### 6.4 Transport loss settles" for "rule 6.4"), and no document sends
// its reader to a path outside the repository for it.

const contractDoc = "docs/protocol.md"

// citationNum is one section number: 4, 4.6, 6.13. A number with a
// second dot (a version, another document's 1.2.3) is not a citation.
const citationNum = `[0-9]+(?:\.[0-9]+)*`

// citationList is one or more numbers: "4.2 and 5", "2 to 5", "6.2, 6.5".
const citationList = citationNum + `(?:(?:\s*,\s*(?:and\s+|or\s+)?|\s+and\s+|\s+or\s+|\s+to\s+|\s*[–/]\s*)` + citationNum + `)*`

var (
	// "rule 6.4", "Rules 6.2 and 6.4", "section 4", "sections 4.2 and 5",
	// "protocol 4.6", "docs/protocol.md 6.13", "the contract's 4.7".
	citedByWord = regexp.MustCompile(`(?i)\b(rules?|sections?|protocol(?:\.md)?|contract(?:'s)?)\s+(` + citationList + `)`)
	// "(4.6)", "(6.5; ...)", "(4.2, 4.6)": a parenthesis that opens with a
	// subsection of section 4 or 6 (the two that have them) and ends the
	// number with ")", "," or ";", so that "(4.5 µs)" and "(1.3)" are not
	// citations.
	citedInParens = regexp.MustCompile(`\(((?:4|6)\.[0-9]+(?:(?:\s*,\s*|\s+and\s+)` + citationNum + `)*)[,;)]`)
	citationItem  = regexp.MustCompile(citationNum)
	// The headings a citation can name: "## 6. Lifecycle rules",
	// "### 6.4 Transport loss settles".
	contractHeading = regexp.MustCompile(`^(?:## ([0-9]+)\.|### ([0-9]+\.[0-9]+))\s`)
	// A markdown link's target: [text](target).
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)?`)
)

// trackedFiles lists the repository's files, as git does; without git (a
// source tarball) it walks the tree, leaving out dot directories and
// what the build makes.
func trackedFiles(t *testing.T) []string {
	t.Helper()
	if out, err := exec.Command("git", "ls-files", "-z").Output(); err == nil && len(out) > 0 {
		var files []string
		for _, f := range bytes.Split(bytes.TrimRight(out, "\x00"), []byte{0}) {
			files = append(files, string(f))
		}
		return files
	}
	var files []string
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != "." && (strings.HasPrefix(d.Name(), ".") || p == "bin" || p == "dist") {
			return filepath.SkipDir
		}
		if !d.IsDir() {
			files = append(files, filepath.ToSlash(p))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// contractHeadings reads the numbers docs/protocol.md has headings for.
func contractHeadings(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(contractDoc)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if m := contractHeading.FindStringSubmatch(line); m != nil {
			have[m[1]+m[2]] = true
		}
	}
	return have
}

// citations returns the section numbers one line cites.
func citations(line string) []string {
	var nums []string
	for _, m := range citedByWord.FindAllStringSubmatch(line, -1) {
		word := strings.ToLower(m[1])
		for _, n := range citationItem.FindAllString(m[2], -1) {
			if strings.Count(n, ".") > 1 {
				continue // a version or another document's numbering
			}
			// "protocol 1" is the protocol's version, "rule 3" a table's
			// row: only sections are cited by a bare number.
			if !strings.HasPrefix(word, "section") && !strings.Contains(n, ".") {
				continue
			}
			nums = append(nums, n)
		}
	}
	for _, m := range citedInParens.FindAllStringSubmatch(line, -1) {
		for _, n := range citationItem.FindAllString(m[1], -1) {
			if strings.Count(n, ".") == 1 {
				nums = append(nums, n)
			}
		}
	}
	return nums
}

func TestCitationsPattern(t *testing.T) {
	for line, want := range map[string][]string{
		"settles (rule 6.4) at once":                   {"6.4"},
		"Rules 6.2 and 6.5 hold":                       {"6.2", "6.5"},
		"protocol sections 4.2 and 5":                  {"4.2", "5"},
		"the codec (sections 2 to 5)":                  {"2", "5"},
		"teardown (protocol rules 6.2, 6.5, 6.7 and":   {"6.2", "6.5", "6.7"},
		"files (protocol 4.6, \"Trees\")":              {"4.6"},
		"docs/protocol.md 6.13":                        {"6.13"},
		"the contract's 4.7 sessions":                  {"4.7"},
		"a terminal (4.7) and (6.5; rule 6.1's)":       {"6.1", "4.7", "6.5"},
		"(4.2, 4.6)":                                   {"4.2", "4.6"},
		"took (4.5 µs), at most (1.3) of bare spawn":   nil,
		"wire protocol 1, version 0.1.0 section 4.1.2": nil,
		"rule 3 of the table":                          nil,
	} {
		if got := citations(line); !slices.Equal(got, want) {
			t.Errorf("citations(%q) = %q; want %q", line, got, want)
		}
	}
}

// TestContractDefinesEveryCitedRule: every "rule 6.N", "section N",
// "section 4.N", "protocol 4.N" and "(4.N)" in a .go, .py or .md file of
// the repository names a heading of docs/protocol.md.
func TestContractDefinesEveryCitedRule(t *testing.T) {
	have := contractHeadings(t)
	if len(have) == 0 {
		t.Fatalf("%s has no numbered headings (## N. or ### N.M)", contractDoc)
	}
	missing := map[string]int{}
	for _, f := range trackedFiles(t) {
		switch path.Ext(f) {
		case ".go", ".py", ".md":
		default:
			continue
		}
		b, err := os.ReadFile(filepath.FromSlash(f))
		if err != nil {
			if os.IsNotExist(err) {
				continue // deleted in the work tree, not yet in the index
			}
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, n := range citations(line) {
				if !have[n] {
					missing[n]++
					t.Errorf("%s:%d: cites %s, which %s has no heading for (%s)", f, i+1, n, contractDoc, headingFor(n))
				}
			}
		}
	}
	if len(missing) > 0 {
		var ns []string
		for n, c := range missing {
			ns = append(ns, fmt.Sprintf("%s (%d)", n, c))
		}
		slices.Sort(ns)
		t.Errorf("cited without a heading in %s: %s", contractDoc, strings.Join(ns, ", "))
	}
}

func headingFor(n string) string {
	if strings.Contains(n, ".") {
		return "### " + n + " Title"
	}
	return "## " + n + ". Title"
}

// TestDocsStayInTheRepository: no markdown link in the repository, and
// no path in docs/*.md, leads out of it (`../shared/protocol.md`): the
// contract is docs/protocol.md, and a clone has nothing beside it.
func TestDocsStayInTheRepository(t *testing.T) {
	outside := regexp.MustCompile("(?:^|[\\s(`\"'\\[])((?:\\.\\./)+[^\\s)`\"'\\]]*)")
	for _, f := range trackedFiles(t) {
		if path.Ext(f) != ".md" {
			continue
		}
		b, err := os.ReadFile(filepath.FromSlash(f))
		if err != nil {
			if os.IsNotExist(err) {
				continue
			}
			t.Fatal(err)
		}
		inDocs := path.Dir(f) == "docs"
		for i, line := range strings.Split(string(b), "\n") {
			// A link is relative to its file; a path in prose, to the
			// repository's root (`../shared` "beside this repository").
			type ref struct{ target, from string }
			var refs []ref
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				refs = append(refs, ref{m[1], path.Dir(f)})
			}
			if inDocs {
				prose := mdLink.ReplaceAllString(line, "]")
				for _, m := range outside.FindAllStringSubmatch(prose, -1) {
					refs = append(refs, ref{m[1], "."})
				}
			}
			for _, r := range refs {
				if strings.Contains(r.target, "://") || strings.HasPrefix(r.target, "#") || strings.HasPrefix(r.target, "mailto:") {
					continue
				}
				target, _, _ := strings.Cut(r.target, "#")
				if p := path.Join(r.from, target); p == ".." || strings.HasPrefix(p, "../") {
					t.Errorf("%s:%d: %q leads out of the repository (to %s); the contract is %s, in it", f, i+1, target, p, contractDoc)
				}
			}
		}
	}
}
