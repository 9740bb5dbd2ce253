//go:build k8s

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The Python client and the inspect and mini-swe-agent adapters, each
// running one trial against relayd in its own baseline Pod (trial.sh's
// overlay, MODE=exec, applied unchanged), reached through kubectl exec -i
// POD -c task -- /opt/relayd/relayd bridge: the clients over that command,
// the adapters through their pod settings as README.md's "On Kubernetes"
// gives them (clients/python/tests/test_k8s.py, whose classes are skipped
// unless these tests name a trial).

func TestK8sPythonClient(t *testing.T)       { k8sPythonTrial(t, "K8sClient") }
func TestK8sPythonAsyncClient(t *testing.T)  { k8sPythonTrial(t, "K8sAsyncClient") }
func TestK8sPythonInspect(t *testing.T)      { k8sPythonTrial(t, "K8sInspect") }
func TestK8sPythonMiniSweAgent(t *testing.T) { k8sPythonTrial(t, "K8sMiniSweAgent") }

// k8sPythonTrial applies a baseline trial in a namespace of its own,
// waits for its Pod and runs test_k8s.CLASS against it with the system's
// Python (make pytest's), the source tree's relayd_client, and a kubectl
// found by name on PATH, as the adapters run it.
func k8sPythonTrial(t *testing.T, class string) {
	k := k8s(t)
	python := systemPython(t)
	ns := k.namespace(t, "baseline")
	tr := k.trial(t, ns, "baseline", "exec", "")
	t.Logf("k8s-report: %s: trial Pod Ready in %v", class, k.ready(t, tr).Round(time.Millisecond))

	work := t.TempDir()
	tokenFile := filepath.Join(work, "token")
	if err := os.WriteFile(tokenFile, []byte(tr.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(work, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(k.kubectl, filepath.Join(bin, "kubectl")); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, python, "-X", "dev", "-W", "error", "-m", "unittest", "-v", "test_k8s."+class)
	cmd.Dir = filepath.Join("..", "clients", "python")
	cmd.Env = append(cleanEnv(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"KUBECONFIG="+k.kubeconfig, "PYTHONPATH=src:tests", "RELAYD_K8S_POD="+tr.Pod(),
		"RELAYD_K8S_NAMESPACE="+ns, "RELAYD_TOKEN_FILE="+tokenFile)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("test_k8s.%s against %s/%s: %v\n%s", class, ns, tr.Pod(), err, tail(string(out), 8000))
	}
	if strings.Contains(string(out), "skipped") || !strings.Contains(string(out), "\nOK") {
		t.Fatalf("test_k8s.%s did not run every test:\n%s", class, tail(string(out), 8000))
	}
	t.Logf("k8s-report: %s: its Python tests took %v", class, time.Since(start).Round(time.Millisecond))
	t.Logf("%s", tail(string(out), 600))
}
