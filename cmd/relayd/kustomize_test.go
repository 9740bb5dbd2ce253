package main

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// kustomize renders the bases as kubectl apply -k would. go run fetches
// it through the module proxy the first time and builds it (a minute);
// after that it comes from the module and build caches, offline: the
// module cache is the first proxy asked (go run pkg@version looks up the
// module's deprecation even when it has the version).
const kustomize = "sigs.k8s.io/kustomize/kustomize/v5@v5.8.1"

var goProxy = sync.OnceValues(func() (string, error) {
	out, err := exec.Command("go", "env", "GOMODCACHE", "GOPROXY").Output()
	f := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err != nil || len(f) != 2 {
		return "", fmt.Errorf("go env GOMODCACHE GOPROXY: %v, %q", err, out)
	}
	return "file://" + filepath.Join(f[0], "cache", "download") + "," + f[1], nil
})

// trialOverlay runs deploy/kubernetes/trial.sh for one trial and returns
// the overlay's directory.
func trialOverlay(t *testing.T, dir string, env ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(k8sDir, "trial.sh"), dir)
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("trial.sh %s %v: %v: %s", dir, env, err, out)
	}
	return dir
}

// render is kustomize build dir, each document read by yamlSubset.
func render(t *testing.T, dir string) []any {
	t.Helper()
	cmd := exec.Command("go", "run", kustomize, "build", dir)
	cmd.Dir = t.TempDir() // outside this module: go run pkg@version
	proxy, err := goProxy()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(os.Environ(), "GOPROXY="+proxy)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go run %s build %s: %v: %s", kustomize, dir, err, stderr.String())
	}
	var docs []any
	for i, d := range strings.Split("\n"+string(out), "\n---\n") {
		v, err := yamlSubset(d)
		if err != nil {
			t.Fatalf("kustomize's document %d: %v\n%s", i, err, d)
		}
		docs = append(docs, v)
	}
	return docs
}

// Each trial is one kustomize overlay that trial.sh writes: the base's Pod
// rendered from it passes every check of the base itself, in the
// namespace named, every name prefixed with the trial's, the images
// named, the token a Secret of the trial's own holding the token file; two
// trials in one namespace share no object. MODE=dial-in adds a Service that
// selects the trial's Pod alone (by its instance label) on relayd's port;
// MODE=dial-out makes relayd dial CONNECT, with no probe and no port.
func TestKubernetesKustomize(t *testing.T) {
	work := t.TempDir()
	const (
		ns        = "evals"
		taskImage = "registry.example:5000/evals/task:1.2"
		initImage = "relayd-init:0.1.0"
	)
	objects := map[string]string{} // kind/namespace/name: the trial that made it
	const connect = "10.96.0.42:7700"
	for _, tc := range []struct {
		trial, podSecurity, mode string
		restricted               bool
	}{
		{"t1", "baseline", "", false},
		{"t2", "baseline", "exec", false},
		{"t3", "restricted", "", true},
		{"t4", "baseline", "dial-in", false},
		{"t5", "restricted", "dial-in", true},
		{"t6", "baseline", "dial-out", false},
		{"t7", "restricted", "dial-out", true},
	} {
		t.Run(tc.trial, func(t *testing.T) {
			b := make([]byte, 16)
			_, _ = rand.Read(b)
			token := hex.EncodeToString(b)
			tokenFile := filepath.Join(work, tc.trial+".token")
			if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
				t.Fatal(err)
			}
			env := []string{"TRIAL=" + tc.trial, "NAMESPACE=" + ns, "TASK_IMAGE=" + taskImage, "INIT_IMAGE=" + initImage,
				"TOKEN_FILE=" + tokenFile, "POD_SECURITY=" + tc.podSecurity, "MODE=" + tc.mode, "CONNECT="}
			wantConnect := ""
			if tc.mode == "dial-out" {
				wantConnect = connect
				env = append(env, "CONNECT="+connect)
			}
			dir := trialOverlay(t, filepath.Join(work, "trials", tc.trial), env...)
			docs := render(t, dir)
			var pod, secret, service any
			for _, d := range docs {
				kind, name := str(t, d, "kind"), str(t, d, "metadata", "name")
				if got := optStr(t, d, "metadata", "namespace"); got != ns {
					t.Errorf("%s %s in namespace %q; want %s", kind, name, got, ns)
				}
				if !strings.HasPrefix(name, tc.trial+"-") {
					t.Errorf("%s %s: the name lacks the trial's prefix %s-", kind, name, tc.trial)
				}
				key := kind + "/" + ns + "/" + name
				if other, ok := objects[key]; ok {
					t.Errorf("%s is both trial %s's and trial %s's", key, other, tc.trial)
				}
				objects[key] = tc.trial
				switch kind {
				case "Pod":
					pod = d
				case "Secret":
					secret = d
				case "Service":
					service = d
					if tc.mode != "dial-in" {
						t.Errorf("MODE=%s made a Service; only dial-in has one", tc.mode)
					}
				default:
					t.Errorf("kustomize made a %s; want a Pod and a Secret (and a Service for dial-in)", kind)
				}
			}
			if pod == nil || secret == nil || (tc.mode == "dial-in") != (service != nil) {
				t.Fatalf("want a Pod and a Secret, and a Service for dial-in alone; got %d objects", len(docs))
			}
			checkPod(t, pod, tc.restricted, str(t, secret, "metadata", "name"), wantConnect)
			if got := optStr(t, pod, "metadata", "labels", "app.kubernetes.io/instance"); got != tc.trial {
				t.Errorf("the Pod's app.kubernetes.io/instance label is %q; want the trial's name", got)
			}
			if service != nil {
				checkTrialService(t, service, pod, tc.trial)
			}
			got, err := base64.StdEncoding.DecodeString(str(t, secret, "data", "token"))
			if err != nil || string(got) != token {
				t.Errorf("the Secret's token is not the trial's token file (%v)", err)
			}
			spec := field(t, pod, "spec")
			if img := str(t, list(t, spec, "initContainers")[0], "image"); img != initImage {
				t.Errorf("the init container's image is %q; want %s", img, initImage)
			}
			if img := str(t, list(t, spec, "containers")[0], "image"); img != taskImage {
				t.Errorf("the task container's image is %q; want %s", img, taskImage)
			}
		})
	}
}

// trial.sh refuses what would make a broken or colliding overlay, saying
// which variable is wrong, and writes nothing then.
func TestKubernetesTrialScriptRefuses(t *testing.T) {
	work := t.TempDir()
	tokenFile := filepath.Join(work, "token")
	if err := os.WriteFile(tokenFile, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := map[string]string{"TRIAL": "t1", "NAMESPACE": "evals", "TASK_IMAGE": "task:1", "INIT_IMAGE": "relayd-init:0.1.0", "TOKEN_FILE": tokenFile}
	for i, tc := range []struct{ key, value, want string }{
		{"MODE", "listen", "want exec, dial-in or dial-out"},
		{"MODE", "dial-out", "CONNECT is not set"},
		{"CONNECT", "10.0.0.1:7700", "CONNECT is for MODE=dial-out"},
		{"TRIAL", "", "TRIAL is not set"},
		{"TRIAL", "Trial-1", "TRIAL=Trial-1: want lower-case"},
		{"TRIAL", strings.Repeat("a", 41), "at most 40"},
		{"NAMESPACE", "evals\nx: y", "NAMESPACE="},
		{"TASK_IMAGE", "task:1\nnamespace: other", "not an image reference"},
		{"INIT_IMAGE", "", "INIT_IMAGE is not set"},
		{"TOKEN_FILE", filepath.Join(work, "absent"), "no such file"},
		{"POD_SECURITY", "privileged", "want baseline or restricted"},
	} {
		dir := filepath.Join(work, fmt.Sprint(i))
		cmd := exec.Command(filepath.Join(k8sDir, "trial.sh"), dir)
		cmd.Env = os.Environ()
		for k, v := range good {
			if k != tc.key {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
		}
		cmd.Env = append(cmd.Env, tc.key+"="+tc.value)
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), tc.want) {
			t.Errorf("trial.sh with %s=%q: %v, %q; want exit 2 saying %q", tc.key, tc.value, err, out, tc.want)
		}
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("trial.sh with %s=%q made %s", tc.key, tc.value, dir)
		}
	}
	// MODE=dial-out wants HOST:PORT, nothing YAML could read otherwise;
	// MODE=dial-in names a Service after the trial, which must start with a letter.
	for i, tc := range []struct{ env, want string }{
		{"MODE=dial-out CONNECT=10.0.0.1", "want HOST:PORT"},
		{"MODE=dial-out CONNECT=10.0.0.1:77x", "want HOST:PORT"},
		{"MODE=dial-out CONNECT=:7700", "want HOST:PORT"},
		{"MODE=dial-out CONNECT=a\"b:1", "want HOST:PORT"},
		{"MODE=dial-out CONNECT=a\\nb:1", "want HOST:PORT"},
		{"MODE=dial-in TRIAL=4t", "starts with a letter"},
	} {
		dir := filepath.Join(work, fmt.Sprint("mode", i))
		cmd := exec.Command(filepath.Join(k8sDir, "trial.sh"), dir)
		cmd.Env = os.Environ()
		for k, v := range good {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		for _, kv := range strings.Fields(tc.env) {
			cmd.Env = append(cmd.Env, strings.ReplaceAll(kv, `\n`, "\n"))
		}
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), tc.want) {
			t.Errorf("trial.sh with %s: %v, %q; want exit 2 saying %q", tc.env, err, out, tc.want)
		}
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("trial.sh with %s made %s", tc.env, dir)
		}
	}
	// A directory that exists is another trial's.
	dir := filepath.Join(work, "taken")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(k8sDir, "trial.sh"), dir)
	cmd.Env = os.Environ()
	for k, v := range good {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "exists") {
		t.Errorf("trial.sh into an existing directory: %v, %q; want a refusal", err, out)
	}
}

// checkTrialService checks a dial-in Service: it selects pod, and only
// trial's Pods (the instance label), and sends port 7700 to relayd's.
func checkTrialService(t *testing.T, svc, pod any, trial string) {
	t.Helper()
	if v := optStr(t, svc, "spec", "type"); v != "" && v != "ClusterIP" {
		t.Errorf("the Service's type is %s; want ClusterIP (reached from inside the cluster)", v)
	}
	sel, _ := field(t, svc, "spec", "selector").(map[string]any)
	labels, _ := field(t, pod, "metadata", "labels").(map[string]any)
	if sel["app.kubernetes.io/instance"] != trial {
		t.Errorf("the Service's selector %v does not name the trial %s: it would select other trials' Pods", sel, trial)
	}
	for k, v := range sel {
		if labels[k] != v {
			t.Errorf("the Service's selector %s=%v does not select the Pod (labels %v)", k, v, labels)
		}
	}
	ports := list(t, svc, "spec", "ports")
	if len(ports) != 1 || str(t, ports[0], "port") != "7700" || optStr(t, ports[0], "protocol") != "TCP" {
		t.Fatalf("the Service's ports %v; want TCP 7700 alone", ports)
	}
	task := list(t, field(t, pod, "spec"), "containers")[0]
	target := str(t, ports[0], "targetPort")
	found := false
	for _, p := range list(t, task, "ports") {
		if optStr(t, p, "name") == target || str(t, p, "containerPort") == target {
			found = str(t, p, "containerPort") == "7700"
		}
	}
	if !found {
		t.Errorf("the Service's targetPort %q is not the task container's port 7700", target)
	}
}
