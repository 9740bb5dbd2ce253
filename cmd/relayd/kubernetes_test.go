package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Without a cluster (make k8s-test applies them on one): the files of
// deploy/kubernetes (the kustomize bases restricted/ and baseline/, as they
// stand and as kustomize renders one trial's overlay of them,
// networkpolicy.yaml, inspect-values.yaml) are checked by reading them. yamlSubset reads the part of YAML they use (block mappings
// and sequences, flow sequences of double-quoted strings, {} and plain or
// double-quoted scalars, # comments) without a dependency, and fails on
// anything else, so the files cannot drift out of what is checked.

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
		if p.i < len(p.lines) && p.lines[p.i].indent == indent && strings.HasPrefix(p.lines[p.i].text+" ", "- ") {
			// A sequence may sit at its key's indentation (kustomize
			// writes them so): it ends where its "- " items do.
			v, err := p.sequence(indent)
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

// Keys may hold "/" for label keys such as app.kubernetes.io/name.
var yamlKey = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9_./-]*):(?: +(.*))?$`)

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
			t.Fatalf("want a mapping holding %q, got %T", k, v)
		}
		if v, ok = m[k]; !ok {
			t.Fatalf("no %q (in %v)", k, keys)
		}
	}
	return v
}

func str(t *testing.T, v any, keys ...string) string {
	t.Helper()
	s, ok := field(t, v, keys...).(string)
	if !ok {
		t.Fatalf("%v is not a scalar", keys)
	}
	return s
}

func list(t *testing.T, v any, keys ...string) []any {
	t.Helper()
	s, ok := field(t, v, keys...).([]any)
	if !ok {
		t.Fatalf("%v is not a sequence", keys)
	}
	return s
}

func strs(t *testing.T, v any, keys ...string) []string {
	t.Helper()
	var out []string
	for _, it := range list(t, v, keys...) {
		s, ok := it.(string)
		if !ok {
			t.Fatalf("%v holds a non-scalar", keys)
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
	t.Fatalf("nothing named %q", name)
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

// dockerfileFroms returns the image of each FROM of the Dockerfile.
func dockerfileFroms(t *testing.T, file string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var froms []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && strings.EqualFold(f[0], "FROM") {
			froms = append(froms, f[1])
		}
	}
	return froms
}

// k8sDir holds the manifests checked here.
var k8sDir = filepath.Join("..", "..", "deploy", "kubernetes")

func loadYAML(t *testing.T, name string) any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(k8sDir, name))
	if err != nil {
		t.Fatal(err)
	}
	v, err := yamlSubset(string(b))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return v
}

// has reports whether mapping v holds key.
func has(v any, key string) bool {
	m, ok := v.(map[string]any)
	if !ok {
		return false
	}
	_, ok = m[key]
	return ok
}

// optStr is str but "" when any key on the way is absent.
func optStr(t *testing.T, v any, keys ...string) string {
	t.Helper()
	for i, k := range keys {
		if !has(v, k) {
			return ""
		}
		if i < len(keys)-1 {
			v = v.(map[string]any)[k]
		}
	}
	return str(t, v, keys[len(keys)-1])
}

// mountsOf maps each volume container c mounts to its path and read-only flag.
func mountsOf(t *testing.T, c any) map[string]struct {
	path string
	ro   bool
} {
	t.Helper()
	out := map[string]struct {
		path string
		ro   bool
	}{}
	if !has(c, "volumeMounts") {
		return out
	}
	for _, m := range list(t, c, "volumeMounts") {
		out[str(t, m, "name")] = struct {
			path string
			ro   bool
		}{path.Clean(str(t, m, "mountPath")), optStr(t, m, "readOnly") == "true"}
	}
	return out
}

// under reports whether p is dir or below it.
func under(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// The capabilities each manifest adds back after dropping ALL, as its
// comments and docs/deploy.md say: none for relayd as a non-root user;
// for relayd as root with --subject-user, SETUID and SETGID to start
// subjects as that user and KILL to signal them; and in the baseline Pod
// DAC_OVERRIDE, CHOWN and FOWNER besides, for marks (protocol 4.9) of
// the subject's files: reading them to mark them, writing them back
// with their owner, mode and times to restore them (e2e's
// TestK8sTrialExec on a cluster).
var (
	capsNonRoot     = []string{}
	capsSubjectUser = []string{"KILL", "SETGID", "SETUID"}
	capsMarks       = []string{"CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID"}
)

// checkSecurity checks container c's effective securityContext (its own
// over the pod's): seccomp RuntimeDefault, no privilege escalation, not
// privileged, capabilities ALL dropped and exactly add added back; and
// when nonRoot, runAsNonRoot true and a uid that is not 0.
func checkSecurity(t *testing.T, podSC, c any, add []string, nonRoot bool) {
	t.Helper()
	name := str(t, c, "name")
	if !has(c, "securityContext") {
		t.Errorf("container %s has no securityContext", name)
		return
	}
	sc := field(t, c, "securityContext")
	eff := func(keys ...string) string {
		if v := optStr(t, sc, keys...); v != "" {
			return v
		}
		return optStr(t, podSC, keys...)
	}
	if v := eff("seccompProfile", "type"); v != "RuntimeDefault" {
		t.Errorf("container %s: seccompProfile %q; want RuntimeDefault", name, v)
	}
	if v := optStr(t, sc, "allowPrivilegeEscalation"); v != "false" {
		t.Errorf("container %s: allowPrivilegeEscalation %q; want false", name, v)
	}
	if v := optStr(t, sc, "privileged"); v == "true" {
		t.Errorf("container %s is privileged", name)
	}
	if drop := optStrs(t, optField(sc, "capabilities"), "drop"); len(drop) != 1 || drop[0] != "ALL" {
		t.Errorf("container %s drops capabilities %q; want [ALL]", name, drop)
	}
	got := append([]string{}, optStrs(t, optField(sc, "capabilities"), "add")...)
	sort.Strings(got)
	if strings.Join(got, ",") != strings.Join(add, ",") {
		t.Errorf("container %s adds capabilities %q; want exactly %q", name, got, add)
	}
	uid := eff("runAsUser")
	if nonRoot {
		if eff("runAsNonRoot") != "true" {
			t.Errorf("container %s: runAsNonRoot %q; want true", name, eff("runAsNonRoot"))
		}
		if uid == "" || uid == "0" {
			t.Errorf("container %s: runAsUser %q; want a non-root uid (the image's USER is unknown here)", name, uid)
		}
	}
}

// optField is v[key], or an empty mapping when v has no key.
func optField(v any, key string) any {
	if !has(v, key) {
		return map[string]any{}
	}
	return v.(map[string]any)[key]
}

// checkRelaydArgs parses args with relayd's own flag parser and checks
// the listen mode that pod.yaml, pod-baseline.yaml and inspect-values.yaml
// share, or with connect, the dial-out mode of trial.sh's overlay (relayd
// dials connect). It returns the options.
func checkRelaydArgs(t *testing.T, args []string, connect string) options {
	t.Helper()
	o, _, err := parseFlags(args, func(string) string { return "" })
	if err != nil {
		t.Fatalf("relayd refuses the args %q: %v", args, err)
	}
	if connect != "" {
		if o.connect != connect {
			t.Errorf("--connect %q; want %s (dial-out)", o.connect, connect)
		}
		if v, ok := flagValue(args, "listen"); ok {
			t.Errorf("--listen %q in dial-out mode", v)
		}
	} else if o.connect != "" || o.listen != ":7700" {
		t.Errorf("--connect %q, --listen %q; want listen mode on :7700 (relayd bridge through kubectl exec)", o.connect, o.listen)
	}
	if o.socket != defaultOptions().socket {
		t.Errorf("--socket %q; want relayd bridge's default %s", o.socket, defaultOptions().socket)
	}
	if o.workspace == "" || !path.IsAbs(o.workspace) {
		t.Errorf("--workspace %q; want the task's directory", o.workspace)
	}
	if v, _ := flagValue(args, "peer-timeout"); v != "30s" {
		t.Errorf("--peer-timeout %q; want 30s", v)
	}
	return o
}

// checkProbe checks that c is ready only once relayd listens on port.
func checkProbe(t *testing.T, c any, listen string) {
	t.Helper()
	if !has(c, "readinessProbe") {
		t.Errorf("container %s has no readinessProbe", str(t, c, "name"))
		return
	}
	_, port, _ := strings.Cut(listen, ":")
	if got := optStr(t, field(t, c, "readinessProbe"), "tcpSocket", "port"); got != port {
		t.Errorf("readinessProbe tcpSocket port %q; want %s, where relayd listens", got, port)
	}
}

// secretName is the Secret the manifests mount: in the bases, the name
// the overlay's secretGenerator (trial.sh) makes, prefixed and hashed; in
// inspect-values.yaml, the name its comments' kubectl create secret says.
const secretName = "relayd-token"

// checkSecretVolume checks the Secret volume v's name and mode.
func checkSecretVolume(t *testing.T, v any, name string, mode int64) {
	t.Helper()
	if n := str(t, v, "secret", "secretName"); n != name {
		t.Errorf("the Secret is %q; want %s", n, name)
	}
	got, err := strconv.ParseInt(str(t, v, "secret", "defaultMode"), 0, 32)
	if err != nil || got != mode {
		t.Errorf("the Secret's defaultMode is %q; want %04o", str(t, v, "secret", "defaultMode"), mode)
	}
	if has(field(t, v, "secret"), "items") {
		t.Errorf("the Secret volume lists items; the test expects the key as the file name")
	}
}

func TestKubernetesPodManifest(t *testing.T) {
	for _, tc := range []struct {
		file       string
		restricted bool // Pod Security "restricted": relayd non-root, no --subject-user
	}{
		{"restricted/pod.yaml", true},
		{"baseline/pod.yaml", false},
	} {
		t.Run(tc.file, func(t *testing.T) {
			pod := loadYAML(t, tc.file)
			checkPod(t, pod, tc.restricted, secretName, "")
			// What differs between trials is the overlay's.
			if has(field(t, pod, "metadata"), "namespace") {
				t.Errorf("the base names a namespace; the overlay's namespace: sets it")
			}
			spec := field(t, pod, "spec")
			for _, c := range append(list(t, spec, "initContainers"), list(t, spec, "containers")...) {
				if img := str(t, c, "image"); img != baseTaskImage && img != baseInitImage {
					t.Errorf("container %s: image %q; want %s or %s, the names trial.sh's images: replace", str(t, c, "name"), img, baseTaskImage, baseInitImage)
				}
			}
		})
	}
}

// The image names of the bases, which a trial's overlay replaces.
const (
	baseTaskImage = "task-image"
	baseInitImage = "relayd-init"
)

// checkPod checks a Pod of the bases, as it stands or rendered; secret is
// the name its token's Secret must have; connect, when not "", the address
// relayd dials (trial.sh's MODE=dial-out).
func checkPod(t *testing.T, pod any, restricted bool, secret, connect string) {
	t.Helper()
	if str(t, pod, "apiVersion") != "v1" || str(t, pod, "kind") != "Pod" {
		t.Fatalf("want apiVersion v1, kind Pod")
	}
	spec := field(t, pod, "spec")
	podSC := optField(spec, "securityContext")

	// Nothing in the Pod may talk to the API server as the Pod.
	if v := optStr(t, spec, "automountServiceAccountToken"); v != "false" {
		t.Errorf("automountServiceAccountToken %q; want false", v)
	}
	for _, k := range []string{"hostNetwork", "hostPID", "hostIPC", "shareProcessNamespace"} {
		if optStr(t, spec, k) == "true" {
			t.Errorf("%s: true", k)
		}
	}

	// Volumes: emptyDirs and one Secret for the token, nothing of the host's.
	var tokenVol string
	var tokenSpec any
	emptyDirs := map[string]bool{}
	for _, v := range list(t, spec, "volumes") {
		vm := v.(map[string]any)
		switch {
		case vm["emptyDir"] != nil:
			emptyDirs[str(t, v, "name")] = true
		case vm["secret"] != nil && tokenVol == "":
			tokenVol, tokenSpec = str(t, v, "name"), v
		default:
			t.Errorf("volume %s is neither an emptyDir nor the one Secret", str(t, v, "name"))
		}
	}
	if tokenVol == "" {
		t.Fatalf("no secret volume")
	}

	// The init image holds relayd where relayd's own image does.
	_, scratchPath := dockerfileCopy(t, filepath.Join("..", "..", "Dockerfile"))
	initSrc, initDest := dockerfileCopy(t, filepath.Join(k8sDir, "Dockerfile"))
	if initSrc != scratchPath || initDest != scratchPath {
		t.Errorf("deploy/kubernetes/Dockerfile copies %s to %s; want relayd's image's %s at %s", initSrc, initDest, scratchPath, scratchPath)
	}
	// It is built from nothing but relayd's image: no registry is asked.
	froms := dockerfileFroms(t, filepath.Join(k8sDir, "Dockerfile"))
	for _, f := range froms {
		if f != "scratch" && f != "${RELAYD_IMAGE}" {
			t.Errorf("deploy/kubernetes/Dockerfile starts FROM %s; want only scratch and ${RELAYD_IMAGE}, which need no pull", f)
		}
	}
	if len(froms) == 0 || froms[len(froms)-1] != "scratch" {
		t.Errorf("deploy/kubernetes/Dockerfile's image is FROM %q; want scratch", froms)
	}

	// The init container copies that file into the emptyDir it mounts.
	inits := list(t, spec, "initContainers")
	if len(inits) != 1 {
		t.Fatalf("%d init containers; want 1", len(inits))
	}
	var binVol, initMount string
	for vol, m := range mountsOf(t, inits[0]) {
		if emptyDirs[vol] {
			binVol, initMount = vol, m.path
			if m.ro {
				t.Errorf("the init container mounts %s read-only; it must write relayd there", vol)
			}
		}
	}
	if binVol == "" {
		t.Fatalf("the init container mounts no emptyDir")
	}
	// FROM scratch: no cp, relayd copies itself.
	cp := append(optStrs(t, inits[0], "command"), optStrs(t, inits[0], "args")...)
	if len(cp) != 3 || cp[0] != initDest || cp[1] != "install" {
		t.Fatalf("the init container runs %q; want [%s install DEST]", cp, initDest)
	}
	dest := path.Clean(cp[2])
	if dest == initMount {
		dest = path.Join(initMount, path.Base(initDest))
	}
	rel, err := filepath.Rel(initMount, dest)
	if err != nil || strings.HasPrefix(rel, "..") || strings.Contains(rel, "/") {
		t.Fatalf("the init container copies relayd to %s, not into the emptyDir at %s", dest, initMount)
	}

	// The task container runs that binary from a read-only mount of the
	// emptyDir, so that no subject can replace it.
	containers := list(t, spec, "containers")
	if len(containers) != 1 {
		t.Fatalf("%d containers; want 1 (the task's)", len(containers))
	}
	task := containers[0]
	taskMounts := mountsOf(t, task)
	bin, ok := taskMounts[binVol]
	if !ok || !bin.ro {
		t.Errorf("the task container mounts %s at %+v; want it read-only", binVol, bin)
	}
	cmd := strs(t, task, "command")
	if want := path.Join(bin.path, rel); len(cmd) != 1 || cmd[0] != want {
		t.Errorf("the task container's command is %q; want [%s], where the init container put relayd", cmd, want)
	}
	args := strs(t, task, "args")
	o := checkRelaydArgs(t, args, connect)

	// The token: a file of the Secret's read-only mount, mounted into the
	// container running relayd and no other.
	tok, ok := taskMounts[tokenVol]
	if !ok || path.Dir(path.Clean(o.tokenFile)) != tok.path {
		t.Errorf("--token-file %q is not a file of the Secret's mount %+v", o.tokenFile, tok)
	}
	if !tok.ro {
		t.Errorf("the Secret is mounted writable; want readOnly: true")
	}
	if _, ok := mountsOf(t, inits[0])[tokenVol]; ok {
		t.Errorf("the init container mounts the Secret; only relayd's container may")
	}

	// Who runs relayd and its subjects, and who can read the token.
	checkSecurity(t, podSC, inits[0], capsNonRoot, true)
	if restricted {
		// relayd and its subjects are one non-root uid; the Secret is
		// root's, readable by that uid's group through fsGroup.
		checkSecurity(t, podSC, task, capsNonRoot, true)
		if o.subjectUser != "" {
			t.Errorf("--subject-user %q needs root, which restricted forbids", o.subjectUser)
		}
		gid := optStr(t, optField(task, "securityContext"), "runAsGroup")
		if gid == "" {
			gid = optStr(t, podSC, "runAsGroup")
		}
		if fs := optStr(t, podSC, "fsGroup"); fs == "" || fs != gid {
			t.Errorf("fsGroup %q, relayd's runAsGroup %q; want them equal, so that relayd can read the Secret at 0440", fs, gid)
		}
		checkSecretVolume(t, tokenSpec, secret, 0o440)
		// uid 1000 cannot make /run/relayd: its socket and state directory
		// go on an emptyDir it can write.
		sockDir := ""
		for vol, m := range taskMounts {
			if emptyDirs[vol] && !m.ro && under(o.socket, m.path) {
				sockDir = m.path
			}
		}
		if sockDir == "" || !under(o.stateDir, sockDir) || o.stateDir == sockDir {
			t.Errorf("socket %s, state directory %s: want both on a writable emptyDir mount (the state directory below it, for relayd to make 0700)", o.socket, o.stateDir)
		}
	} else {
		// relayd is root with exactly the capabilities --subject-user
		// and marks need; subjects are another, non-root user; the
		// Secret is root's alone.
		checkSecurity(t, podSC, task, capsMarks, false)
		if u := optStr(t, optField(task, "securityContext"), "runAsUser"); u != "0" {
			t.Errorf("the task container's runAsUser %q; want 0 (relayd as root, for --subject-user)", u)
		}
		if o.subjectUser == "" || o.subjectUser == "0" || o.subjectUser == "root" {
			t.Errorf("--subject-user %q; want a non-root user", o.subjectUser)
		}
		if fs := optStr(t, podSC, "fsGroup"); fs != "" {
			t.Errorf("fsGroup %s would make the Secret group-readable; want none", fs)
		}
		checkSecretVolume(t, tokenSpec, secret, 0o400)
		// An emptyDir is 0777: a subject could replace the socket in it.
		for vol, m := range taskMounts {
			if emptyDirs[vol] && (under(o.socket, m.path) || under(o.stateDir, m.path)) {
				t.Errorf("the socket %s or state directory %s is on emptyDir %s, which subjects can write", o.socket, o.stateDir, vol)
			}
		}
	}

	if connect == "" {
		checkProbe(t, task, o.listen)
	} else if has(task, "readinessProbe") || has(task, "ports") {
		// Nothing listens: a probe of 7700 would never succeed.
		t.Errorf("the dial-out Pod keeps a readinessProbe or ports; nothing listens there")
	}

	// SIGTERM: the kubelet waits long enough for relayd's settlement and
	// what follows (docs/deploy.md: at least --teardown-timeout + 5 s).
	grace, err := strconv.Atoi(optStr(t, spec, "terminationGracePeriodSeconds"))
	if want := o.teardownTimeout + 5*time.Second; err != nil || time.Duration(grace)*time.Second < want {
		t.Errorf("terminationGracePeriodSeconds %q; want at least %s (--teardown-timeout %s + 5 s)", optStr(t, spec, "terminationGracePeriodSeconds"), want, o.teardownTimeout)
	}

	// Every container has cpu and memory limits.
	for _, c := range append(append([]any{}, inits...), containers...) {
		for _, r := range []string{"cpu", "memory"} {
			if optStr(t, optField(optField(c, "resources"), "limits"), r) == "" {
				t.Errorf("container %s has no %s limit", str(t, c, "name"), r)
			}
		}
	}

	// Requests small, so that a node holds many trials; limits as they were.
	checkResources(t, inits, containers)

	// No token on a command line or in the environment: only --token-file
	// and its path may speak of a token.
	for _, c := range append(append([]any{}, inits...), containers...) {
		line := append(optStrs(t, c, "command"), optStrs(t, c, "args")...)
		for i, a := range line {
			if !strings.Contains(strings.ToLower(a), "token") || a == "--token-file" ||
				(i > 0 && line[i-1] == "--token-file") {
				continue
			}
			t.Errorf("container %s has %q on its command line", str(t, c, "name"), a)
		}
		if has(c, "env") {
			for _, e := range list(t, c, "env") {
				if n, _ := e.(map[string]any)["name"].(string); n == "RELAYD_TOKEN" {
					t.Errorf("container %s sets RELAYD_TOKEN; mount the Secret as a file instead", str(t, c, "name"))
				}
			}
		}
	}
}

// The trials' NetworkPolicy: it selects the trial's Pods; the controller's
// Pods, named by labels (never by a DNS name: no DNS rule), may reach them
// on 7700 (dial-in) and they may reach the controller's Pods on 7700
// (dial-out), nothing else either way.
func TestKubernetesNetworkPolicy(t *testing.T) {
	np := loadYAML(t, "networkpolicy.yaml")
	if str(t, np, "apiVersion") != "networking.k8s.io/v1" || str(t, np, "kind") != "NetworkPolicy" {
		t.Fatalf("want apiVersion networking.k8s.io/v1, kind NetworkPolicy")
	}
	pod := loadYAML(t, "restricted/pod.yaml")
	if has(field(t, np, "metadata"), "namespace") {
		t.Errorf("the policy names a namespace; kubectl apply -n gives it, once per namespace of trials")
	}
	spec := field(t, np, "spec")
	sel := field(t, spec, "podSelector", "matchLabels").(map[string]any)
	labels := field(t, pod, "metadata", "labels").(map[string]any)
	if len(sel) == 0 {
		t.Errorf("podSelector selects every Pod of the namespace; want the trial's labels")
	}
	for k, v := range sel {
		if labels[k] != v {
			t.Errorf("podSelector %s=%v does not select the bases' Pod (labels %v)", k, v, labels)
		}
	}
	types := strings.Join(strs(t, spec, "policyTypes"), ",")
	if types != "Ingress,Egress" && types != "Egress,Ingress" {
		t.Errorf("policyTypes %s; want Ingress and Egress", types)
	}
	// Each direction: one rule, the controller's Pods on TCP 7700.
	for _, dir := range []struct{ key, peers string }{{"ingress", "from"}, {"egress", "to"}} {
		rules := list(t, spec, dir.key)
		if len(rules) != 1 {
			t.Errorf("%d %s rules; want one, the controller's (no DNS: relayd is given an IP)", len(rules), dir.key)
		}
		for i, r := range rules {
			// A rule without peers or without ports allows every peer or port.
			if !has(r, dir.peers) || len(list(t, r, dir.peers)) == 0 || !has(r, "ports") || len(list(t, r, "ports")) == 0 {
				t.Errorf("%s rule %d lacks %s or ports: it would allow every peer or every port", dir.key, i, dir.peers)
				continue
			}
			for _, peer := range list(t, r, dir.peers) {
				if has(peer, "ipBlock") || !has(peer, "namespaceSelector") || !has(peer, "podSelector") ||
					optStr(t, peer, "namespaceSelector", "matchLabels", "kubernetes.io/metadata.name") != "relayd-controller" ||
					optStr(t, peer, "podSelector", "matchLabels", "app.kubernetes.io/name") != "relayd-controller" {
					t.Errorf("%s rule %d: peer %v; want the relayd-controller Pods of namespace relayd-controller", dir.key, i, peer)
				}
			}
			var ports []string
			for _, p := range list(t, r, "ports") {
				ports = append(ports, optStr(t, p, "protocol")+"/"+optStr(t, p, "port"))
			}
			if strings.Join(ports, ",") != "TCP/7700" {
				t.Errorf("%s rule %d: ports %q; want TCP/7700 alone", dir.key, i, ports)
			}
		}
	}
}

// agent-sandbox/: relayd's SandboxTemplate runs baseline/pod.yaml's Pod,
// field for field, with its label, and networkpolicy.yaml's rules; the
// warm pool uses the template. make k8s-test applies them on a cluster
// (e2e/k8s_sandbox_test.go).
func TestKubernetesAgentSandbox(t *testing.T) {
	tpl := loadYAML(t, "agent-sandbox/sandboxtemplate.yaml")
	if str(t, tpl, "apiVersion") != "extensions.agents.x-k8s.io/v1beta1" || str(t, tpl, "kind") != "SandboxTemplate" {
		t.Fatalf("want apiVersion extensions.agents.x-k8s.io/v1beta1, kind SandboxTemplate")
	}
	pod := loadYAML(t, "baseline/pod.yaml")
	spec := field(t, tpl, "spec")
	if got, want := field(t, spec, "podTemplate", "spec"), field(t, pod, "spec"); !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", " ")
		w, _ := json.MarshalIndent(want, "", " ")
		t.Errorf("the template's podTemplate.spec is not baseline/pod.yaml's spec:\n%s\nwant:\n%s", g, w)
	}
	if got, want := field(t, spec, "podTemplate", "metadata", "labels"), field(t, pod, "metadata", "labels"); !reflect.DeepEqual(got, want) {
		t.Errorf("the template's Pod labels %v; want baseline/pod.yaml's %v (networkpolicy.yaml selects them)", got, want)
	}
	np := field(t, loadYAML(t, "networkpolicy.yaml"), "spec")
	for _, dir := range []string{"ingress", "egress"} {
		if got, want := field(t, spec, "networkPolicy", dir), field(t, np, dir); !reflect.DeepEqual(got, want) {
			t.Errorf("the template's networkPolicy.%s %v; want networkpolicy.yaml's %v", dir, got, want)
		}
	}
	if str(t, spec, "networkPolicyManagement") != "Managed" {
		t.Errorf("networkPolicyManagement %q; want Managed (the rules above applied)", str(t, spec, "networkPolicyManagement"))
	}
	pool := loadYAML(t, "agent-sandbox/warmpool.yaml")
	if str(t, pool, "kind") != "SandboxWarmPool" || str(t, pool, "spec", "sandboxTemplateRef", "name") != str(t, tpl, "metadata", "name") {
		t.Errorf("warmpool.yaml: want a SandboxWarmPool of the template %q", str(t, tpl, "metadata", "name"))
	}
	for _, f := range []any{tpl, pool} {
		if has(field(t, f, "metadata"), "namespace") {
			t.Errorf("%s names a namespace; the overlay's namespace: (or kubectl apply -n) sets it", str(t, f, "kind"))
		}
	}
	if got := strs(t, loadYAML(t, "agent-sandbox/kustomization.yaml"), "resources"); strings.Join(got, " ") != "sandboxtemplate.yaml warmpool.yaml" {
		t.Errorf("kustomization.yaml resources %v", got)
	}
}

// agentEnvServiceKeys are the keys of a service in inspect's agent-env
// chart 0.14.0 (values.yaml); the chart ignores any other.
var agentEnvServiceKeys = map[string]bool{
	"runtimeClassName": true, "image": true, "command": true, "args": true, "workingDir": true,
	"dnsRecord": true, "additionalDnsRecords": true, "ports": true, "env": true, "initContainers": true,
	"volumes": true, "volumeMounts": true, "resources": true, "readinessProbe": true, "livenessProbe": true,
	"imagePullPolicy": true, "securityContext": true, "tolerations": true, "nodeSelector": true, "networks": true,
}

// inspect-values.yaml: relayd in the sample's main container of inspect's
// chart, as root with the capabilities of --subject-user, the Secret
// mounted into that container alone at 0400, the binary where
// Dockerfile.task puts it.
func TestKubernetesInspectValues(t *testing.T) {
	values := loadYAML(t, "inspect-values.yaml")
	if optStr(t, values, "automountServiceAccountToken") == "true" {
		t.Errorf("automountServiceAccountToken: true; the chart's default, false, must stay")
	}
	svc := field(t, values, "services", "default")
	for k := range svc.(map[string]any) {
		if !agentEnvServiceKeys[k] {
			t.Errorf("services.default.%s is not a key of agent-env 0.14.0", k)
		}
	}

	// The binary: Dockerfile.task copies relayd's image's file to where
	// the command runs it.
	_, scratchPath := dockerfileCopy(t, filepath.Join("..", "..", "Dockerfile"))
	src, dest := dockerfileCopy(t, filepath.Join(k8sDir, "Dockerfile.task"))
	if src != scratchPath {
		t.Errorf("Dockerfile.task copies %s; want relayd's image's %s", src, scratchPath)
	}
	if cmd := strs(t, svc, "command"); len(cmd) != 1 || cmd[0] != dest {
		t.Errorf("command %q; want [%s], where Dockerfile.task puts relayd", cmd, dest)
	}
	o := checkRelaydArgs(t, strs(t, svc, "args"), "")

	var tokenVol string
	for _, v := range list(t, svc, "volumes") {
		if has(v, "secret") {
			tokenVol = str(t, v, "name")
			checkSecretVolume(t, v, secretName, 0o400)
		}
	}
	tok, ok := mountsOf(t, svc)[tokenVol]
	if tokenVol == "" || !ok || path.Dir(path.Clean(o.tokenFile)) != tok.path || !tok.ro {
		t.Errorf("--token-file %q: want a file of the Secret's read-only mount (got %q at %+v)", o.tokenFile, tokenVol, tok)
	}
	b, err := os.ReadFile(filepath.Join(k8sDir, "inspect-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "kubectl create secret generic "+secretName+" ") {
		t.Errorf("the comments do not say how to create the Secret %s", secretName)
	}

	checkSecurity(t, map[string]any{}, map[string]any{"name": "default", "securityContext": field(t, svc, "securityContext")}, capsSubjectUser, false)
	if u := optStr(t, svc, "securityContext", "runAsUser"); u != "0" {
		t.Errorf("runAsUser %q; want 0 (relayd as root, for --subject-user)", u)
	}
	if o.subjectUser == "" || o.subjectUser == "0" || o.subjectUser == "root" {
		t.Errorf("--subject-user %q; want a non-root user", o.subjectUser)
	}
	checkProbe(t, svc, o.listen)
}

// placeholderWords are the upper-case values the manifests may hold:
// capabilities and protocols. Any other (NAMESPACE, TASK_IMAGE) is a
// placeholder someone must edit by hand before applying, which the bases
// leave to the overlay.
var placeholderWords = map[string]bool{"ALL": true, "SETUID": true, "SETGID": true, "KILL": true,
	"DAC_OVERRIDE": true, "CHOWN": true, "FOWNER": true, "TCP": true, "UDP": true}

var placeholder = regexp.MustCompile(`^[A-Z][A-Z0-9_]*(-|$)`)

func TestKubernetesNoPlaceholders(t *testing.T) {
	var walk func(file string, v any)
	walk = func(file string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for _, x := range v {
				walk(file, x)
			}
		case []any:
			for _, x := range v {
				walk(file, x)
			}
		case string:
			if placeholder.MatchString(v) && !placeholderWords[v] {
				t.Errorf("%s holds %q, a placeholder to edit by hand", file, v)
			}
		}
	}
	for _, f := range []string{"restricted/pod.yaml", "baseline/pod.yaml", "restricted/kustomization.yaml", "baseline/kustomization.yaml", "networkpolicy.yaml", "inspect-values.yaml", "dial-in/kustomization.yaml", "dial-in/service.yaml",
		"agent-sandbox/sandboxtemplate.yaml", "agent-sandbox/warmpool.yaml", "agent-sandbox/kustomization.yaml"} {
		walk(f, loadYAML(t, f))
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
	v, err := yamlSubset("a:\n  - b: \"x # y\" # c\n    c: {}\n    k8s.io/e: f\n  - d\n")
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(v); got != "map[a:[map[b:x # y c:map[] k8s.io/e:f] d]]" {
		t.Errorf("got %s", got)
	}
	// kustomize's style: a sequence at its key's indentation.
	v, err = yamlSubset("a:\n- b: x\n  c:\n  - y\n- z\nd: e\n")
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(v); got != "map[a:[map[b:x c:[y]] z] d:e]" {
		t.Errorf("got %s", got)
	}
}

// quantity reads a Kubernetes resource quantity of the forms the manifests
// use (1, 100m, 256Mi, 2Gi) as thousandths of the unit (millicores,
// thousandths of a byte), so that cpu and memory compare alike.
func quantity(t *testing.T, s string) int64 {
	t.Helper()
	mult := int64(1000)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"Ki", 1000 << 10}, {"Mi", 1000 << 20}, {"Gi", 1000 << 30}, {"m", 1}} {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = n, u.m
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		t.Fatalf("resource quantity %q is outside the forms read here", s)
	}
	return n * mult
}

// The most a trial's Pod may request, so that a node of 2 CPUs and 8 GiB
// schedules at least 20 trials at once (the scheduler counts requests,
// not use; idle trials wait on the model most of the time).
const (
	maxTrialCPU    = "100m"
	maxTrialMemory = "256Mi"
	maxTrialDisk   = "256Mi"
	// An init container's: the fleet of e2e/k8s_dialout_test.go gives
	// the task container 10m and 64Mi.
	maxInitCPU    = "10m"
	maxInitMemory = "32Mi"
)

// checkResources checks that every container requests cpu and memory no
// more than its limits, that the task container requests ephemeral
// storage too, and that the Pod's request (the largest init container's
// or the containers' sum, whichever is larger) stays within maxTrial*.
func checkResources(t *testing.T, inits, containers []any) {
	t.Helper()
	// An unset request is the limit (Kubernetes defaults it so).
	req := func(c any, r string) int64 {
		res := optField(c, "resources")
		if v := optStr(t, optField(res, "requests"), r); v != "" {
			return quantity(t, v)
		}
		if v := optStr(t, optField(res, "limits"), r); v != "" {
			return quantity(t, v)
		}
		return 0
	}
	for _, c := range append(append([]any{}, inits...), containers...) {
		res := optField(c, "resources")
		for _, r := range []string{"cpu", "memory", "ephemeral-storage"} {
			l := optStr(t, optField(res, "limits"), r)
			if l != "" && req(c, r) > quantity(t, l) {
				t.Errorf("container %s requests more %s than its limit %s", str(t, c, "name"), r, l)
			}
		}
	}
	for _, c := range containers {
		for _, r := range []string{"cpu", "memory", "ephemeral-storage"} {
			if optStr(t, optField(optField(c, "resources"), "requests"), r) == "" {
				t.Errorf("container %s requests no %s (a request defaults to the limit: one trial per node)", str(t, c, "name"), r)
			}
		}
	}
	// An init container's unset request is its limit, and the Pod's
	// request is at least its init containers' largest: the init
	// container must ask for little itself, or an overlay that lowers the
	// task container's requests (a fleet of idle trials) lowers nothing.
	for _, c := range inits {
		for r, most := range map[string]string{"cpu": maxInitCPU, "memory": maxInitMemory} {
			v := optStr(t, optField(optField(c, "resources"), "requests"), r)
			if v == "" {
				t.Errorf("init container %s requests no %s: it defaults to the limit, and the Pod requests at least that", str(t, c, "name"), r)
			} else if quantity(t, v) > quantity(t, most) {
				t.Errorf("init container %s requests %s of %s; want at most %s, below what an overlay may give the task container", str(t, c, "name"), v, r, most)
			}
		}
	}
	for r, most := range map[string]string{"cpu": maxTrialCPU, "memory": maxTrialMemory, "ephemeral-storage": maxTrialDisk} {
		var pod, sum int64
		for _, c := range inits {
			pod = max(pod, req(c, r))
		}
		for _, c := range containers {
			sum += req(c, r)
		}
		pod = max(pod, sum)
		if pod > quantity(t, most) {
			t.Errorf("the Pod requests %d/1000 of %s; want at most %s, so that many trials fit a node", pod, r, most)
		}
	}
}
