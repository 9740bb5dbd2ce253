//go:build k8s

package e2e

// The tests on a real single-node Kubernetes cluster (make k8s-test):
// deploy/kubernetes/test/run.sh brings the cluster up (cluster.sh), makes
// and loads the images, runs these with the variables below and takes the
// cluster down. Each test makes namespaces of its own, labelled
// relayd-k8s-test=1, and deletes them when it ends.
//
//	KUBECONFIG              the cluster's admin kubeconfig
//	RELAYD_K8S_KUBECTL      kubectl (v1.34.2, built with the cluster)
//	RELAYD_K8S_CTR          ctr of the cluster's containerd
//	RELAYD_K8S_CONTAINERD   that containerd's socket
//	RELAYD_K8S_INIT_IMAGE   the init image (relayd at /relayd, make k8s-image's layout)
//	RELAYD_K8S_TASK_IMAGE   a task image: static busybox, user 1000, /app 1000's
//	RELAYD_K8S_BUSYBOX      that static busybox, for images a test makes
//	RELAYD_K8S_RELAYD       the relayd binary in the init image (not a race build)

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	relayd "github.com/relayd/relayd/client"
)

// k8sEnv is the cluster run.sh made, from its variables.
type k8sEnv struct {
	kubectl, kubeconfig, ctr, containerd string
	initImage, taskImage, busybox        string
	relayd                               string
}

// k8s returns the cluster, failing the test when run.sh did not describe
// one: under the k8s build tag there is no skipping.
func k8s(t testing.TB) *k8sEnv {
	t.Helper()
	k := &k8sEnv{
		kubectl: os.Getenv("RELAYD_K8S_KUBECTL"), kubeconfig: os.Getenv("KUBECONFIG"),
		ctr: os.Getenv("RELAYD_K8S_CTR"), containerd: os.Getenv("RELAYD_K8S_CONTAINERD"),
		initImage: os.Getenv("RELAYD_K8S_INIT_IMAGE"), taskImage: os.Getenv("RELAYD_K8S_TASK_IMAGE"),
		busybox: os.Getenv("RELAYD_K8S_BUSYBOX"), relayd: os.Getenv("RELAYD_K8S_RELAYD"),
	}
	for name, v := range map[string]string{
		"RELAYD_K8S_KUBECTL": k.kubectl, "KUBECONFIG": k.kubeconfig, "RELAYD_K8S_CTR": k.ctr,
		"RELAYD_K8S_CONTAINERD": k.containerd, "RELAYD_K8S_INIT_IMAGE": k.initImage,
		"RELAYD_K8S_TASK_IMAGE": k.taskImage, "RELAYD_K8S_BUSYBOX": k.busybox, "RELAYD_K8S_RELAYD": k.relayd,
	} {
		if v == "" {
			t.Fatalf("%s is not set: the k8s tests run under deploy/kubernetes/test/run.sh (make k8s-test)", name)
		}
	}
	return k
}

// run runs kubectl with args, bounded by timeout, and returns its stdout.
func (k *k8sEnv) run(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, k.kubectl, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+k.kubeconfig)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// must is run, failing the test on an error; one minute at most.
func (k *k8sEnv) must(t testing.TB, args ...string) string {
	t.Helper()
	out, err := k.run(time.Minute, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// argv is a kubectl command line with the cluster's kubeconfig, for
// DialCommand and the clients' own kubectl runs.
func (k *k8sEnv) argv(args ...string) []string {
	return append([]string{k.kubectl, "--kubeconfig", k.kubeconfig}, args...)
}

// randomName is a fresh DNS label: prefix, a dash and 8 hex digits.
func randomName(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// namespace makes a namespace of the test's own that enforces Pod Security
// level (baseline or restricted), waits for its default ServiceAccount
// (admission wants it before a Pod), and deletes it when the test ends.
func (k *k8sEnv) namespace(t testing.TB, level string) string {
	t.Helper()
	ns := randomName("rk8s")
	k.must(t, "create", "namespace", ns)
	t.Cleanup(func() {
		if _, err := k.run(2*time.Minute, "delete", "namespace", ns, "--wait=true", "--timeout=90s"); err != nil {
			t.Errorf("deleting namespace %s: %v", ns, err)
		}
	})
	k.must(t, "label", "namespace", ns, "relayd-k8s-test=1", "pod-security.kubernetes.io/enforce="+level,
		"pod-security.kubernetes.io/enforce-version=latest")
	k.waitFor(t, "the default ServiceAccount of "+ns, 30*time.Second, "get", "serviceaccount", "default", "-n", ns)
	return ns
}

// waitFor runs kubectl with args until it succeeds, or fails the test
// after timeout.
func (k *k8sEnv) waitFor(t testing.TB, what string, timeout time.Duration, args ...string) {
	t.Helper()
	end := time.Now().Add(timeout)
	for {
		_, err := k.run(10*time.Second, args...)
		if err == nil {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s: not after %v: %v", what, timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// k8sTrial is one trial.sh overlay applied: its Pod is Name+"-relayd-trial".
type k8sTrial struct {
	NS, Name, Level, Mode string
	Token, Dir            string
}

// Pod is the trial's Pod's name.
func (tr k8sTrial) Pod() string { return tr.Name + "-relayd-trial" }

// trial writes trial.sh's overlay for a new trial (level baseline or
// restricted, mode exec, dial-in or dial-out, connect its CONNECT), applies
// it unchanged and deletes it when the test ends. It does not wait for
// the Pod: see ready.
func (k *k8sEnv) trial(t testing.TB, ns, level, mode, connect string, extra ...string) k8sTrial {
	t.Helper()
	tr := k8sTrial{NS: ns, Name: randomName("t"), Level: level, Mode: mode}
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	tr.Token = hex.EncodeToString(b)
	work := t.TempDir()
	tokenFile := filepath.Join(work, "token")
	if err := os.WriteFile(tokenFile, []byte(tr.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	tr.Dir = filepath.Join(work, "overlay")
	script, err := filepath.Abs("../deploy/kubernetes/trial.sh")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(script, tr.Dir)
	cmd.Env = append(os.Environ(), "TRIAL="+tr.Name, "NAMESPACE="+ns, "TASK_IMAGE="+k.taskImage,
		"INIT_IMAGE="+k.initImage, "TOKEN_FILE="+tokenFile, "POD_SECURITY="+level, "MODE="+mode)
	if connect != "" {
		cmd.Env = append(cmd.Env, "CONNECT="+connect)
	}
	cmd.Env = append(cmd.Env, extra...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("trial.sh: %v: %s", err, out)
	}
	k.must(t, "apply", "-k", tr.Dir)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := k.run(30*time.Second, "describe", "pod", "-n", ns, tr.Pod())
			logs, _ := k.run(30*time.Second, "logs", "-n", ns, tr.Pod(), "-c", "task", "--tail=40")
			t.Logf("trial %s when the test failed:\n%s\nrelayd's log:\n%s", tr.Name, out, logs)
		}
		if _, err := k.run(2*time.Minute, "delete", "-k", tr.Dir, "--wait=true", "--timeout=90s", "--ignore-not-found"); err != nil {
			t.Errorf("deleting trial %s: %v", tr.Name, err)
		}
	})
	return tr
}

// ready waits until the trial's Pod is Ready (relayd listens), at most
// two minutes, and returns how long that took.
func (k *k8sEnv) ready(t testing.TB, tr k8sTrial) time.Duration {
	t.Helper()
	start := time.Now()
	if _, err := k.run(150*time.Second, "wait", "-n", tr.NS, "--for=condition=Ready", "pod/"+tr.Pod(), "--timeout=120s"); err != nil {
		t.Fatalf("trial %s: %v", tr.Name, err)
	}
	return time.Since(start)
}

// bridge reaches the trial's relayd the way the README shows:
// kubectl exec -i POD -c task -- /opt/relayd/relayd bridge.
func (k *k8sEnv) bridge(t testing.TB, tr k8sTrial) *relayd.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := relayd.DialCommand(ctx, k.argv("exec", "-i", "-n", tr.NS, tr.Pod(), "-c", "task", "--",
		"/opt/relayd/relayd", "bridge"), tr.Token)
	if err != nil {
		t.Fatalf("trial %s: kubectl exec ... relayd bridge: %v", tr.Name, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// ip is the address of a Service (its cluster IP) or of a Pod (which the
// node reaches through the CNI bridge); kind is "service" or "pod".
func (k *k8sEnv) ip(t testing.TB, kind, ns, name string) string {
	t.Helper()
	path := map[string]string{"service": "{.spec.clusterIP}", "pod": "{.status.podIP}"}[kind]
	if path == "" {
		t.Fatalf("k8sEnv.ip: kind %q: want service or pod", kind)
	}
	ip := strings.TrimSpace(k.must(t, "get", kind, "-n", ns, name, "-o", "jsonpath="+path))
	if ip == "" {
		t.Fatalf("%s %s/%s has no IP", kind, ns, name)
	}
	return ip
}

// importImage makes a one-layer image ref of rootfs's files (mkimage.sh,
// config the image config's JSON) and loads it into the cluster's
// containerd. Images stay until the cluster goes (cluster.sh down).
func (k *k8sEnv) importImage(t testing.TB, ref, rootfs, config string) {
	t.Helper()
	tarball := filepath.Join(t.TempDir(), "image.tar")
	mk, err := filepath.Abs("../deploy/kubernetes/test/mkimage.sh")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(mk, ref, rootfs, tarball, config).CombinedOutput(); err != nil {
		t.Fatalf("mkimage.sh %s: %v: %s", ref, err, out)
	}
	if out, err := exec.Command(k.ctr, "--address", k.containerd, "-n", "k8s.io", "images", "import", tarball).CombinedOutput(); err != nil {
		t.Fatalf("ctr images import %s: %v: %s", ref, err, out)
	}
}

// TestK8sCluster: the cluster run.sh describes answers, its node is Ready,
// and the images it loaded are there.
func TestK8sCluster(t *testing.T) {
	k := k8s(t)
	k.must(t, "wait", "--for=condition=Ready", "node", "--all", "--timeout=30s")
	out, err := exec.Command(k.ctr, "--address", k.containerd, "-n", "k8s.io", "images", "ls", "-q").CombinedOutput()
	if err != nil {
		t.Fatalf("ctr images ls: %v: %s", err, out)
	}
	for _, img := range []string{k.initImage, k.taskImage} {
		if !strings.Contains(string(out), img) {
			t.Errorf("image %s is not in the cluster's containerd:\n%s", img, out)
		}
	}
}
