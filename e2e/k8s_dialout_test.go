//go:build k8s

package e2e

// Dial-out on the cluster: relayd's trial.sh overlays with MODE=dial-out,
// applied unchanged, dial a controller that runs as a Pod behind a Service
// (deploy/kubernetes/test/controller, the Go client's Listener) in the
// namespace networkpolicy.yaml names, relayd-controller.

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// ctlNamespace is the controller's namespace: networkpolicy.yaml's
// namespaceSelectors name it.
const ctlNamespace = "relayd-controller"

// ctlTrial is one line of the controller's trials file.
type ctlTrial struct{ Name, Token, Scenario string }

func newCtlTrial(scenario string) ctlTrial {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return ctlTrial{Name: randomName("t"), Token: hex.EncodeToString(b), Scenario: scenario}
}

// ctlLine is a line of the controller's output (controller/main.go).
type ctlLine struct {
	Kind, Trial, Scenario, Error string
	OK                           bool
	AcceptedMs, FirstExecutedMs  float64
	DoneMs, AtMs                 float64
	UID, Version                 string
	Rounds                       int
	P50Ms, P99Ms                 float64
	Termination, Settlement      string
	ExitCode                     *int
	StartUnixMs                  int64
	Trials, Passed, Failed       int
	Execution                    string
}

var ctlImage struct {
	sync.Mutex
	ref string
}

// controllerImage builds the controller (static) and loads it as an image
// of just the binary, once per test binary.
func (k *k8sEnv) controllerImage(t *testing.T) string {
	t.Helper()
	ctlImage.Lock()
	defer ctlImage.Unlock()
	if ctlImage.ref != "" {
		return ctlImage.ref
	}
	rootfs := t.TempDir()
	bin := filepath.Join(rootfs, "controller")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nice", "go", "build", "-trimpath", "-o", bin, "./deploy/kubernetes/test/controller")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the controller: %v: %s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	ref := "relayd.local/relayd-controller:k8sdialout-" + hex.EncodeToString(sum[:6])
	k.importImage(t, ref, rootfs, `{"Entrypoint":["/controller"]}`)
	ctlImage.ref = ref
	return ref
}

// ctl is a controller Pod running, behind its Service.
type ctl struct {
	k       *k8sEnv
	Connect string // the Service's cluster IP:7700, trial.sh's CONNECT
}

// controller runs the controller with trials in relayd-controller (made
// for the test, after any earlier one is gone), behind a ClusterIP
// Service on 7700, and waits until it is Ready.
func (k *k8sEnv) controller(t *testing.T, trials []ctlTrial) *ctl {
	t.Helper()
	image := k.controllerImage(t)
	end := time.Now().Add(3 * time.Minute)
	for {
		_, err := k.run(10*time.Second, "get", "namespace", ctlNamespace)
		if err != nil && strings.Contains(err.Error(), "NotFound") {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("namespace %s is still there after 3 minutes (%v): another test's?", ctlNamespace, err)
		}
		time.Sleep(time.Second)
	}
	k.must(t, "create", "namespace", ctlNamespace)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := k.run(30*time.Second, "logs", "-n", ctlNamespace, "relayd-controller")
			t.Logf("the controller's log:\n%s", out)
		}
		if _, err := k.run(3*time.Minute, "delete", "namespace", ctlNamespace, "--wait=true", "--timeout=150s"); err != nil {
			t.Errorf("deleting namespace %s: %v", ctlNamespace, err)
		}
	})
	k.must(t, "label", "namespace", ctlNamespace, "relayd-k8s-test=1", "pod-security.kubernetes.io/enforce=restricted",
		"pod-security.kubernetes.io/enforce-version=latest")
	k.waitFor(t, "the default ServiceAccount of "+ctlNamespace, 30*time.Second, "get", "serviceaccount", "default", "-n", ctlNamespace)

	var list strings.Builder
	for _, tr := range trials {
		fmt.Fprintf(&list, "%s %s %s\n", tr.Name, tr.Token, tr.Scenario)
	}
	file := filepath.Join(t.TempDir(), "trials")
	if err := os.WriteFile(file, []byte(list.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	k.must(t, "create", "secret", "generic", "-n", ctlNamespace, "relayd-controller-trials", "--from-file=trials="+file)
	manifest := filepath.Join(t.TempDir(), "controller.yaml")
	if err := os.WriteFile(manifest, []byte(strings.ReplaceAll(controllerYAML, "IMAGE", image)), 0o600); err != nil {
		t.Fatal(err)
	}
	k.must(t, "apply", "-n", ctlNamespace, "-f", manifest)
	if _, err := k.run(150*time.Second, "wait", "-n", ctlNamespace, "--for=condition=Ready", "pod/relayd-controller", "--timeout=120s"); err != nil {
		out, _ := k.run(30*time.Second, "describe", "pod", "-n", ctlNamespace, "relayd-controller")
		t.Fatalf("the controller: %v\n%s", err, out)
	}
	return &ctl{k: k, Connect: k.ip(t, "service", ctlNamespace, "relayd-controller") + ":7700"}
}

// controllerYAML is the controller's Pod and Service; it meets Pod
// Security "restricted".
const controllerYAML = `apiVersion: v1
kind: Pod
metadata:
  name: relayd-controller
  labels:
    app.kubernetes.io/name: relayd-controller
spec:
  restartPolicy: Never
  automountServiceAccountToken: false
  enableServiceLinks: false
  terminationGracePeriodSeconds: 5
  securityContext:
    runAsNonRoot: true
    runAsUser: 65534
    runAsGroup: 65534
    fsGroup: 65534
    seccompProfile:
      type: RuntimeDefault
  containers:
    - name: controller
      image: IMAGE
      imagePullPolicy: IfNotPresent
      args: ["--listen", ":7700", "--trials", "/etc/relayd-controller/trials"]
      ports:
        - containerPort: 7700
      readinessProbe:
        tcpSocket:
          port: 7700
        periodSeconds: 1
      securityContext:
        allowPrivilegeEscalation: false
        readOnlyRootFilesystem: true
        capabilities:
          drop: ["ALL"]
      resources:
        requests:
          cpu: 50m
          memory: 64Mi
        limits:
          cpu: "1"
          memory: 512Mi
      volumeMounts:
        - name: trials
          mountPath: /etc/relayd-controller
          readOnly: true
  volumes:
    - name: trials
      secret:
        secretName: relayd-controller-trials
        defaultMode: 0440
---
apiVersion: v1
kind: Service
metadata:
  name: relayd-controller
spec:
  type: ClusterIP
  selector:
    app.kubernetes.io/name: relayd-controller
  ports:
    - port: 7700
      targetPort: 7700
`

// lines is the controller's output so far, parsed.
func (c *ctl) lines(t *testing.T) []ctlLine {
	t.Helper()
	out, err := c.k.run(time.Minute, "logs", "-n", ctlNamespace, "relayd-controller")
	if err != nil {
		t.Logf("kubectl logs: %v", err)
		return nil
	}
	var lines []ctlLine
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l ctlLine
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Kind != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// waitLines polls the controller's output until want holds of it, at
// most timeout, and returns it.
func (c *ctl) waitLines(t *testing.T, what string, timeout time.Duration, want func([]ctlLine) bool) []ctlLine {
	t.Helper()
	end := time.Now().Add(timeout)
	for {
		ls := c.lines(t)
		if want(ls) {
			return ls
		}
		if time.Now().After(end) {
			t.Fatalf("the controller: no %s after %v; its lines: %+v", what, timeout, ls)
		}
		time.Sleep(time.Second)
	}
}

// outcomes waits for the outcome of every trial named, and returns them
// by trial, with the controller's start (Unix ms).
func (c *ctl) outcomes(t *testing.T, timeout time.Duration, names ...string) (map[string]ctlLine, int64) {
	t.Helper()
	var start int64
	got := map[string]ctlLine{}
	c.waitLines(t, "outcome of every trial", timeout, func(ls []ctlLine) bool {
		for _, l := range ls {
			switch l.Kind {
			case "start":
				start = l.StartUnixMs
			case "outcome":
				got[l.Trial] = l
			}
		}
		for _, n := range names {
			if _, ok := got[n]; !ok {
				return false
			}
		}
		return true
	})
	return got, start
}

// dialOutOverlay writes trial.sh's dial-out overlay of tr in dir/tr.Name
// (level baseline or restricted), not applied.
func dialOutOverlay(t *testing.T, k *k8sEnv, dir, ns, level, connect string, tr ctlTrial) string {
	t.Helper()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(tr.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, tr.Name)
	script, err := filepath.Abs("../deploy/kubernetes/trial.sh")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(script, out)
	cmd.Env = append(os.Environ(), "TRIAL="+tr.Name, "NAMESPACE="+ns, "TASK_IMAGE="+k.taskImage,
		"INIT_IMAGE="+k.initImage, "TOKEN_FILE="+tokenFile, "POD_SECURITY="+level, "MODE=dial-out", "CONNECT="+connect)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("trial.sh: %v: %s", err, b)
	}
	return out
}

// applyOverlays applies the overlays together, as one kustomization that
// lists them (with extra, more of its YAML), and deletes them when the
// test ends; it returns when kubectl apply began.
func applyOverlays(t *testing.T, k *k8sEnv, dir string, extra string, overlays ...string) time.Time {
	t.Helper()
	var y strings.Builder
	y.WriteString("resources:\n")
	for _, o := range overlays {
		rel, err := filepath.Rel(dir, o)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&y, "  - %s\n", rel)
	}
	y.WriteString(extra)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(y.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := k.run(6*time.Minute, "delete", "-k", dir, "--wait=true", "--timeout=5m", "--ignore-not-found"); err != nil {
			t.Errorf("deleting the trials: %v", err)
		}
	})
	began := time.Now()
	if _, err := k.run(5*time.Minute, "apply", "-k", dir); err != nil {
		t.Fatal(err)
	}
	return began
}

// applyPolicy applies networkpolicy.yaml, unchanged, to the trials'
// namespace: the cluster accepts it (its bridge plugin does not enforce it).
func applyPolicy(t *testing.T, k *k8sEnv, ns string) {
	t.Helper()
	k.must(t, "apply", "-n", ns, "-f", "../deploy/kubernetes/networkpolicy.yaml")
	k.must(t, "get", "networkpolicy", "-n", ns, "relayd-trial")
}

// waitPhase waits until the Pod's phase is phase, and returns its task
// container's exit code.
func waitPhase(t *testing.T, k *k8sEnv, ns, pod, phase string, timeout time.Duration) int {
	t.Helper()
	if _, err := k.run(timeout+30*time.Second, "wait", "-n", ns, "--for=jsonpath={.status.phase}="+phase, "pod/"+pod,
		fmt.Sprintf("--timeout=%ds", int(timeout.Seconds()))); err != nil {
		out, _ := k.run(30*time.Second, "describe", "pod", "-n", ns, pod)
		logs, _ := k.run(30*time.Second, "logs", "-n", ns, pod, "-c", "task", "--tail=30")
		t.Fatalf("pod %s: not %s: %v\n%s\nrelayd's log:\n%s", pod, phase, err, out, logs)
	}
	var code int
	out := k.must(t, "get", "pod", "-n", ns, pod, "-o", "jsonpath={.status.containerStatuses[0].state.terminated.exitCode}")
	if _, err := fmt.Sscan(out, &code); err != nil {
		t.Fatalf("pod %s: exit code %q: %v", pod, out, err)
	}
	return code
}

// The dial-out trial, each base in a namespace that enforces its level:
// relayd dials the controller's Service, the controller runs a whole
// trial (the baseline one then times 50 executes of true), and relayd
// exits 0 after verify: the Pod ends Succeeded.
func TestK8sDialOut(t *testing.T) {
	k := k8s(t)
	levels := []string{"baseline", "restricted"}
	trials := []ctlTrial{newCtlTrial("speed"), newCtlTrial("trial")}
	c := k.controller(t, trials)
	var names []string
	var began time.Time
	for i, level := range levels {
		ns := k.namespace(t, level)
		applyPolicy(t, k, ns)
		dir := t.TempDir()
		began = applyOverlays(t, k, dir, "", dialOutOverlay(t, k, dir, ns, level, c.Connect, trials[i]))
		names = append(names, trials[i].Name)
		defer func(ns, pod string) {
			if code := waitPhase(t, k, ns, pod, "Succeeded", 2*time.Minute); code != 0 {
				t.Errorf("%s: relayd exited %d after verify; want 0", pod, code)
			}
		}(ns, trials[i].Name+"-relayd-trial")
	}
	got, start := c.outcomes(t, 5*time.Minute, names...)
	for i, tr := range trials {
		o := got[tr.Name]
		if !o.OK {
			t.Errorf("%s (%s): %s", tr.Name, levels[i], o.Error)
			continue
		}
		if o.UID != "1000" {
			t.Errorf("%s (%s): id -u said %s; want 1000 (the bases' subjects' uid)", tr.Name, levels[i], o.UID)
		}
		t.Logf("k8s-report: dial-out %s trial: controller accepted at %.0f ms, first executed at %.0f ms, done at %.0f ms (from its start)",
			levels[i], o.AcceptedMs, o.FirstExecutedMs, o.DoneMs)
		if tr.Scenario == "speed" {
			t.Logf("k8s-report: round trip through dial-out (execute true, %d rounds): p50 %.2f ms, p99 %.2f ms", o.Rounds, o.P50Ms, o.P99Ms)
		}
	}
	if o := got[trials[1].Name]; o.OK {
		t.Logf("k8s-report: dial-out restricted: apply to first executed %.0f ms", float64(start)+o.FirstExecutedMs-float64(began.UnixMilli()))
	}
}

// relayd killed in a dial-out Pod: the Pod ends Failed (restartPolicy
// Never) and the controller's execute reports the connection's loss.
// The same with the Pod deleted instead: relayd settles the execute on
// SIGTERM and answers 124, then exits 3 (the connection ended before
// verify, every settlement confirmed).
func TestK8sDialOutKilled(t *testing.T) {
	k := k8s(t)
	killed, deleted := newCtlTrial("hold"), newCtlTrial("hold")
	c := k.controller(t, []ctlTrial{killed, deleted})
	ns := k.namespace(t, "baseline")
	dir := t.TempDir()
	applyOverlays(t, k, dir, "", dialOutOverlay(t, k, dir, ns, "baseline", c.Connect, killed),
		dialOutOverlay(t, k, dir, ns, "baseline", c.Connect, deleted))
	c.waitLines(t, "running sleep of both trials", 3*time.Minute, func(ls []ctlLine) bool {
		n := 0
		for _, l := range ls {
			if l.Kind == "running" && (l.Trial == killed.Name || l.Trial == deleted.Name) {
				n++
			}
		}
		return n == 2
	})

	// SIGKILL from outside the container's PID namespace (kill -KILL 1
	// inside it is ignored: relayd is that namespace's init): the
	// container's task, through the cluster's containerd.
	pod := killed.Name + "-relayd-trial"
	// The kubelet reports the container's id a moment after it runs.
	var id string
	for end := time.Now().Add(time.Minute); id == ""; time.Sleep(200 * time.Millisecond) {
		id = k.must(t, "get", "pod", "-n", ns, pod, "-o", "jsonpath={.status.containerStatuses[0].containerID}")
		id = strings.TrimPrefix(strings.TrimSpace(id), "containerd://")
		if id == "" && time.Now().After(end) {
			t.Fatalf("pod %s has no container id after a minute", pod)
		}
	}
	if out, err := exec.Command(k.ctr, "--address", k.containerd, "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", id).CombinedOutput(); err != nil {
		t.Fatalf("ctr tasks kill: %v: %s", err, out)
	}
	if code := waitPhase(t, k, ns, pod, "Failed", 2*time.Minute); code != 137 {
		t.Errorf("relayd killed: exit %d; want 137 (SIGKILL)", code)
	}

	// SIGTERM: the Pod deleted; its exit code seen by a watch, before the
	// Pod goes.
	pod = deleted.Name + "-relayd-trial"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	watch := exec.CommandContext(ctx, k.kubectl, "get", "pod", "-n", ns, pod, "-w", "-o",
		`jsonpath={.status.containerStatuses[0].state.terminated.exitCode}{"\n"}`)
	watch.Env = append(os.Environ(), "KUBECONFIG="+k.kubeconfig)
	stdout, err := watch.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = watch.Wait() }()
	codes := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if s := strings.TrimSpace(sc.Text()); s != "" {
				codes <- s
				return
			}
		}
		close(codes)
	}()
	time.Sleep(time.Second) // the watch's first event
	k.must(t, "delete", "pod", "-n", ns, pod, "--wait=false")
	select {
	case s, ok := <-codes:
		if !ok {
			t.Errorf("the watch of %s ended without an exit code", pod)
		} else if s != "3" {
			t.Errorf("relayd in dial-out on SIGTERM (the Pod deleted) before verify: exit %s; want 3", s)
		} else {
			t.Logf("k8s-report: dial-out relayd on SIGTERM before verify: exit %s", s)
		}
	case <-ctx.Done():
		t.Errorf("no exit code of %s within 2 minutes of its deletion", pod)
	}

	got, _ := c.outcomes(t, 2*time.Minute, killed.Name, deleted.Name)
	if o := got[killed.Name]; o.OK || !strings.Contains(o.Error, "connection to relayd lost") {
		t.Errorf("relayd killed: the controller's execute ended %+v; want the connection's loss", o)
	} else {
		t.Logf("relayd killed: the controller was told: %s", o.Error)
	}
	if o := got[deleted.Name]; !o.OK || o.ExitCode == nil || *o.ExitCode != 124 || o.Termination != "framework_timeout" || o.Settlement != "settled" {
		t.Errorf("the Pod deleted: the controller's execute ended %+v; want 124, framework_timeout, settled", o)
	}
}

// The fleet: 100 dial-out trial Pods (baseline) at once on the node, one
// controller running a whole trial with each; every outcome ok, every Pod
// Succeeded, all deleted afterwards. The overlay of the 100 lowers the
// task container's requests: the bases' (100m of CPU, 256 MiB) fit 20
// trials on a 2-CPU node, not 100.
func TestK8sDialOutFleet(t *testing.T) {
	const n = 100
	k := k8s(t)
	trials := make([]ctlTrial, n)
	names := make([]string, n)
	for i := range trials {
		trials[i] = newCtlTrial("trial")
		names[i] = trials[i].Name
	}
	c := k.controller(t, trials)
	ns := k.namespace(t, "baseline")
	applyPolicy(t, k, ns)
	dir := t.TempDir()
	overlays := make([]string, n)
	for i, tr := range trials {
		overlays[i] = dialOutOverlay(t, k, dir, ns, "baseline", c.Connect, tr)
	}
	// The cluster may be shared (other tests' Pods): wait until the node
	// has room for the whole fleet, so that "at once" is the fleet's own.
	waitRoom(t, k, n*fleetPodCPU+100, 5*time.Minute)
	began := applyOverlays(t, k, dir, fleetRequests, overlays...)
	t.Logf("k8s-report: fleet: kubectl apply of %d trials took %.1f s", n, time.Since(began).Seconds())

	got, start := c.outcomes(t, 10*time.Minute, names...)
	outcomesDone := time.Since(began)
	var firsts []float64
	failed := 0
	for _, tr := range trials {
		o := got[tr.Name]
		if !o.OK {
			failed++
			if failed <= 10 {
				t.Errorf("%s: %s", tr.Name, o.Error)
			}
			continue
		}
		firsts = append(firsts, float64(start)+o.FirstExecutedMs-float64(began.UnixMilli()))
	}
	if failed > 0 {
		t.Errorf("%d of %d trials failed", failed, n)
	}
	// Every Pod Succeeded.
	end := time.Now().Add(5 * time.Minute)
	for {
		out := k.must(t, "get", "pods", "-n", ns, "-o", `jsonpath={range .items[*]}{.status.phase}{"\n"}{end}`)
		phases := map[string]int{}
		for _, p := range strings.Fields(out) {
			phases[p]++
		}
		if phases["Succeeded"] == n {
			break
		}
		if time.Now().After(end) || phases["Failed"] > 0 {
			t.Fatalf("pods of the fleet: %v; want %d Succeeded", phases, n)
		}
		time.Sleep(2 * time.Second)
	}
	allDone := time.Since(began)
	// At once: the scheduler placed each Pod as it came, none waited for room.
	if out := strings.TrimSpace(k.must(t, "get", "events", "-n", ns, "--field-selector", "reason=FailedScheduling",
		"-o", `jsonpath={range .items[*]}{.involvedObject.name}: {.message}{"\n"}{end}`)); out != "" {
		lines := strings.Split(out, "\n")
		t.Errorf("Pods of the fleet waited for room on the node: %d FailedScheduling events, e.g. %s", len(lines), lines[0])
	}
	slices.Sort(firsts)
	if len(firsts) > 0 {
		q := func(p float64) float64 {
			return firsts[max(0, min(len(firsts)-1, int(p*float64(len(firsts))+0.999999)-1))]
		}
		t.Logf("k8s-report: fleet of %d dial-out trials: apply to first executed p50 %.1f s, p99 %.1f s", n, q(0.5)/1000, q(0.99)/1000)
	}
	t.Logf("k8s-report: fleet of %d dial-out trials: apply to every outcome %.1f s, to every Pod Succeeded %.1f s", n, outcomesDone.Seconds(), allDone.Seconds())

	if _, err := k.run(5*time.Minute, "delete", "-k", dir, "--wait=true", "--timeout=4m"); err != nil {
		t.Fatal(err)
	}
	if out := strings.TrimSpace(k.must(t, "get", "pods,secrets", "-n", ns, "-o", "name")); out != "" {
		t.Errorf("left after delete -k: %s", out)
	}
}

// fleetPodCPU is what a fleet's Pod requests, in millicores: its task
// container's 10m (fleetRequests), and its init container's (the bases').
const fleetPodCPU = 10

// waitRoom waits until the node's unrequested CPU is at least millis, at
// most timeout.
func waitRoom(t *testing.T, k *k8sEnv, millis int, timeout time.Duration) {
	t.Helper()
	re := regexp.MustCompile(`(?m)^\s+cpu\s+(\d+)(m?)\s+\(`)
	alloc := strings.TrimSpace(k.must(t, "get", "nodes", "-o", "jsonpath={.items[0].status.allocatable.cpu}"))
	var cores int
	if _, err := fmt.Sscan(alloc, &cores); err != nil {
		t.Fatalf("the node's allocatable cpu %q: %v", alloc, err)
	}
	end := time.Now().Add(timeout)
	for {
		out := k.must(t, "describe", "nodes")
		m := re.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no cpu requests in kubectl describe nodes:\n%s", out)
		}
		var used int
		fmt.Sscan(m[1], &used)
		if m[2] == "" {
			used *= 1000
		}
		if cores*1000-used >= millis {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("the node's CPU requests (%dm of %d cores) leave no room for %dm after %v: other tests' Pods?", used, cores, millis, timeout)
		}
		time.Sleep(2 * time.Second)
	}
}

// fleetRequests is the fleet's overlay's patch: the task container
// requests 10m of CPU and 64 MiB of memory and of ephemeral storage.
const fleetRequests = `patches:
  - target:
      kind: Pod
    patch: |-
      - op: replace
        path: /spec/containers/0/resources/requests
        value:
          cpu: 10m
          memory: 64Mi
          ephemeral-storage: 64Mi
`
