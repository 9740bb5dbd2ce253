package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// No cluster runs here: deploy/kubernetes/pod.yaml is checked by reading
// it. yamlSubset reads the part of YAML the manifest uses (block mappings
// and sequences, flow sequences of double-quoted strings, {} and plain or
// double-quoted scalars, # comments) without a dependency, and fails on
// anything else, so the manifest cannot drift out of what is checked.

type yamlLine struct {
	n      int // line number, for errors
	indent int
	text   string
}

func yamlSubset(src string) (any, error) {
	var lines []yamlLine
	for i, l := range strings.Split(src, "\n") {
		if strings.ContainsRune(l, '\t') {
			return nil, fmt.Errorf("line %d: tab", i+1)
		}
		t := strings.TrimRight(stripComment(l), " ")
		if strings.TrimSpace(t) == "" {
			continue
		}
		lines = append(lines, yamlLine{i + 1, len(t) - len(strings.TrimLeft(t, " ")), strings.TrimLeft(t, " ")})
	}
	if len(lines) == 0 {
		return nil, fmt.Errorf("empty document")
	}
	p := &yamlParser{lines: lines}
	v, err := p.block(lines[0].indent)
	if err == nil && p.i < len(lines) {
		err = fmt.Errorf("line %d: unexpected indentation", lines[p.i].n)
	}
	return v, err
}

// stripComment drops a # comment that starts a line or follows a space,
// outside double quotes.
func stripComment(l string) string {
	quoted := false
	for i := 0; i < len(l); i++ {
		switch {
		case l[i] == '\\' && quoted:
			i++
		case l[i] == '"':
			quoted = !quoted
		case l[i] == '#' && !quoted && (i == 0 || l[i-1] == ' '):
			return l[:i]
		}
	}
	return l
}

type yamlParser struct {
	lines []yamlLine
	i     int
}

func (p *yamlParser) block(indent int) (any, error) {
	if strings.HasPrefix(p.lines[p.i].text+" ", "- ") {
		return p.sequence(indent)
	}
	return p.mapping(indent)
}

func (p *yamlParser) sequence(indent int) (any, error) {
	var seq []any
	for p.i < len(p.lines) && p.lines[p.i].indent == indent && strings.HasPrefix(p.lines[p.i].text+" ", "- ") {
		l := p.lines[p.i]
		rest := strings.TrimLeft(strings.TrimPrefix(l.text, "-"), " ")
		if rest == "" {
			return nil, fmt.Errorf("line %d: empty sequence item", l.n)
		}
		if _, _, isKey := splitKey(rest); isKey {
			// "- key: value": a mapping whose keys sit where "key" does.
			p.lines[p.i] = yamlLine{l.n, l.indent + len(l.text) - len(rest), rest}
			m, err := p.mapping(p.lines[p.i].indent)
			if err != nil {
				return nil, err
			}
			seq = append(seq, m)
			continue
		}
		v, err := scalar(rest, l.n)
		if err != nil {
			return nil, err
		}
		seq = append(seq, v)
		p.i++
	}
	return seq, nil
}

func (p *yamlParser) mapping(indent int) (any, error) {
	m := map[string]any{}
	for p.i < len(p.lines) && p.lines[p.i].indent == indent {
		l := p.lines[p.i]
		key, rest, ok := splitKey(l.text)
		if !ok {
			return nil, fmt.Errorf("line %d: want key: value, got %q", l.n, l.text)
		}
		if _, dup := m[key]; dup {
			return nil, fmt.Errorf("line %d: key %q twice", l.n, key)
		}
		p.i++
		if rest != "" {
			v, err := scalar(rest, l.n)
			if err != nil {
				return nil, err
			}
			m[key] = v
			continue
		}
		if p.i == len(p.lines) || p.lines[p.i].indent <= indent {
			return nil, fmt.Errorf("line %d: %q has no value", l.n, key)
		}
		v, err := p.block(p.lines[p.i].indent)
		if err != nil {
			return nil, err
		}
		m[key] = v
	}
	if p.i < len(p.lines) && p.lines[p.i].indent > indent {
		return nil, fmt.Errorf("line %d: unexpected indentation", p.lines[p.i].n)
	}
	return m, nil
}

var yamlKey = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9_.-]*):(?: +(.*))?$`)

func splitKey(s string) (key, rest string, ok bool) {
	m := yamlKey.FindStringSubmatch(s)
	if m == nil {
		return "", "", false
	}
	return m[1], m[2], true
}

func scalar(s string, n int) (any, error) {
	switch {
	case s == "{}":
		return map[string]any{}, nil
	case strings.HasPrefix(s, "["):
		var items []string // double-quoted strings only: JSON's syntax
		if err := json.Unmarshal([]byte(s), &items); err != nil {
			return nil, fmt.Errorf("line %d: flow sequence %s: %v", n, s, err)
		}
		seq := make([]any, len(items))
		for i, it := range items {
			seq[i] = it
		}
		return seq, nil
	case strings.HasPrefix(s, `"`):
		var v string
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			return nil, fmt.Errorf("line %d: quoted scalar %s: %v", n, s, err)
		}
		return v, nil
	case strings.ContainsAny(s[:1], "'{&*!|>%@`") || strings.Contains(s, ": "):
		return nil, fmt.Errorf("line %d: %q is outside the YAML subset read here", n, s)
	}
	return s, nil
}

// Navigation helpers: each fails the test when the shape is not the one asked.

func field(t *testing.T, v any, keys ...string) any {
	t.Helper()
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("pod.yaml: want a mapping holding %q, got %T", k, v)
		}
		if v, ok = m[k]; !ok {
			t.Fatalf("pod.yaml: no %q (in %v)", k, keys)
		}
	}
	return v
}

func str(t *testing.T, v any, keys ...string) string {
	t.Helper()
	s, ok := field(t, v, keys...).(string)
	if !ok {
		t.Fatalf("pod.yaml: %v is not a scalar", keys)
	}
	return s
}

func list(t *testing.T, v any, keys ...string) []any {
	t.Helper()
	s, ok := field(t, v, keys...).([]any)
	if !ok {
		t.Fatalf("pod.yaml: %v is not a sequence", keys)
	}
	return s
}

func strs(t *testing.T, v any, keys ...string) []string {
	t.Helper()
	var out []string
	for _, it := range list(t, v, keys...) {
		s, ok := it.(string)
		if !ok {
			t.Fatalf("pod.yaml: %v holds a non-scalar", keys)
		}
		out = append(out, s)
	}
	return out
}

// optStrs is like strs but an absent key is an empty list.
func optStrs(t *testing.T, v any, key string) []string {
	t.Helper()
	if _, ok := v.(map[string]any)[key]; !ok {
		return nil
	}
	return strs(t, v, key)
}

func named(t *testing.T, items []any, name string) any {
	t.Helper()
	for _, it := range items {
		if s, _ := it.(map[string]any)["name"].(string); s == name {
			return it
		}
	}
	t.Fatalf("pod.yaml: nothing named %q", name)
	return nil
}

// mountOf returns the path where container c mounts volume vol, and whether read-only.
func mountOf(t *testing.T, c any, vol string) (string, bool) {
	t.Helper()
	m := named(t, list(t, c, "volumeMounts"), vol)
	ro, _ := m.(map[string]any)["readOnly"].(string)
	return path.Clean(str(t, m, "mountPath")), ro == "true"
}

// flagValue returns the value of --name in args (--name v or --name=v).
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// dockerfileCopy returns the source and destination of the Dockerfile's last COPY.
func dockerfileCopy(t *testing.T, file string) (src, dest string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "COPY" {
			src, dest = f[len(f)-2], f[len(f)-1]
		}
	}
	if dest == "" {
		t.Fatalf("%s has no COPY", file)
	}
	return src, dest
}

func TestKubernetesPodManifest(t *testing.T) {
	dir := filepath.Join("..", "..", "deploy", "kubernetes")
	b, err := os.ReadFile(filepath.Join(dir, "pod.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	pod, err := yamlSubset(string(b))
	if err != nil {
		t.Fatalf("pod.yaml: %v", err)
	}
	if str(t, pod, "apiVersion") != "v1" || str(t, pod, "kind") != "Pod" {
		t.Fatalf("pod.yaml: want apiVersion v1, kind Pod")
	}
	spec := field(t, pod, "spec")

	// Volumes: one emptyDir for the binary, one Secret for the token at 0400.
	var binVol, tokenVol string
	for _, v := range list(t, spec, "volumes") {
		vm := v.(map[string]any)
		switch {
		case vm["emptyDir"] != nil:
			binVol = str(t, v, "name")
		case vm["secret"] != nil:
			tokenVol = str(t, v, "name")
			mode, err := strconv.ParseInt(str(t, v, "secret", "defaultMode"), 0, 32)
			if err != nil || mode != 0o400 {
				t.Errorf("pod.yaml: the Secret's defaultMode is %q; want 0400 (256)", str(t, v, "secret", "defaultMode"))
			}
			if _, items := vm["secret"].(map[string]any)["items"]; items {
				t.Errorf("pod.yaml: the Secret volume lists items; the test expects the key as the file name")
			}
		}
	}
	if binVol == "" || tokenVol == "" {
		t.Fatalf("pod.yaml: want an emptyDir volume and a secret volume (got %q, %q)", binVol, tokenVol)
	}

	// The init image holds relayd where relayd's own image does.
	_, scratchPath := dockerfileCopy(t, filepath.Join("..", "..", "Dockerfile"))
	initSrc, initDest := dockerfileCopy(t, filepath.Join(dir, "Dockerfile"))
	if initSrc != scratchPath || initDest != scratchPath {
		t.Errorf("deploy/kubernetes/Dockerfile copies %s to %s; want relayd's image's %s at %s", initSrc, initDest, scratchPath, scratchPath)
	}

	// The init container copies that file into the emptyDir.
	inits := list(t, spec, "initContainers")
	if len(inits) != 1 {
		t.Fatalf("pod.yaml: %d init containers; want 1", len(inits))
	}
	initMount, initRO := mountOf(t, inits[0], binVol)
	if initRO {
		t.Errorf("pod.yaml: the init container mounts %s read-only; it must write relayd there", binVol)
	}
	cp := append(optStrs(t, inits[0], "command"), optStrs(t, inits[0], "args")...)
	if len(cp) != 3 || path.Base(cp[0]) != "cp" || cp[1] != initDest {
		t.Fatalf("pod.yaml: the init container runs %q; want [cp %s DEST]", cp, initDest)
	}
	dest := path.Clean(cp[2])
	if dest == initMount {
		dest = path.Join(initMount, path.Base(initDest))
	}
	rel, err := filepath.Rel(initMount, dest)
	if err != nil || strings.HasPrefix(rel, "..") || strings.Contains(rel, "/") {
		t.Fatalf("pod.yaml: the init container copies relayd to %s, not into the emptyDir at %s", dest, initMount)
	}

	// The task container runs that binary from its own mount of the emptyDir.
	containers := list(t, spec, "containers")
	if len(containers) != 1 {
		t.Fatalf("pod.yaml: %d containers; want 1 (the task's)", len(containers))
	}
	task := containers[0]
	taskMount, _ := mountOf(t, task, binVol)
	cmd := strs(t, task, "command")
	if want := path.Join(taskMount, rel); len(cmd) != 1 || cmd[0] != want {
		t.Errorf("pod.yaml: the task container's command is %q; want [%s], where the init container put relayd", cmd, want)
	}
	args := strs(t, task, "args")

	// The flags: relayd itself accepts them, and they say what matters.
	o, _, err := parseFlags(args, func(string) string { return "" })
	if err != nil {
		t.Fatalf("pod.yaml: relayd refuses the task container's args %q: %v", args, err)
	}
	if !regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?\.[A-Za-z0-9-]+\.svc(\.cluster\.local)?:[0-9]+$`).MatchString(o.connect) {
		t.Errorf("pod.yaml: --connect %q; want dial-out to a Service's DNS name, SERVICE.NAMESPACE.svc:PORT", o.connect)
	}
	tokenMount, tokenRO := mountOf(t, task, tokenVol)
	if path.Dir(path.Clean(o.tokenFile)) != tokenMount {
		t.Errorf("pod.yaml: --token-file %q is not a file of the Secret's mount %s", o.tokenFile, tokenMount)
	}
	if !tokenRO {
		t.Errorf("pod.yaml: the Secret is mounted writable; want readOnly: true")
	}
	if o.workspace == "" || !path.IsAbs(o.workspace) {
		t.Errorf("pod.yaml: --workspace %q; want the task's directory", o.workspace)
	}
	if v, _ := flagValue(args, "peer-timeout"); v != "30s" {
		t.Errorf("pod.yaml: --peer-timeout %q; want 30s", v)
	}

	// No token on a command line or in the environment: only --token-file
	// and its path may speak of a token.
	for _, c := range append(append([]any{}, inits...), containers...) {
		line := append(optStrs(t, c, "command"), optStrs(t, c, "args")...)
		for i, a := range line {
			if !strings.Contains(strings.ToLower(a), "token") || a == "--token-file" ||
				(i > 0 && line[i-1] == "--token-file") {
				continue
			}
			t.Errorf("pod.yaml: container %s has %q on its command line", str(t, c, "name"), a)
		}
		if _, ok := c.(map[string]any)["env"]; ok {
			for _, e := range list(t, c, "env") {
				if n, _ := e.(map[string]any)["name"].(string); n == "RELAYD_TOKEN" {
					t.Errorf("pod.yaml: container %s sets RELAYD_TOKEN; mount the Secret as a file instead", str(t, c, "name"))
				}
			}
		}
	}
}

// The subset reader refuses what it does not understand rather than misread it.
func TestYAMLSubsetRefuses(t *testing.T) {
	for _, src := range []string{
		"a: 1\n  b: 2\n",
		"a: 'x'\n",
		"a: &anchor x\n",
		"a: [x, y]\n",
		"a: 1\na: 2\n",
		"a:\n",
		"a: |\n  x\n",
	} {
		if v, err := yamlSubset(src); err == nil {
			t.Errorf("yamlSubset(%q) = %v; want an error", src, v)
		}
	}
	v, err := yamlSubset("a:\n  - b: \"x # y\" # c\n    c: {}\n  - d\n")
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(v); got != "map[a:[map[b:x # y c:map[]] d]]" {
		t.Errorf("got %s", got)
	}
}
