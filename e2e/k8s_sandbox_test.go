//go:build k8s

package e2e

// agent-sandbox (kubernetes-sigs/agent-sandbox v1.0.1) driving relayd on
// the cluster: its controller and CRDs as deploy/kubernetes/test/
// agent-sandbox.sh builds them from the Go module proxy
// (RELAYD_K8S_AGENT_SANDBOX, the directory it prints), the controller run
// on the node as a process with the admin kubeconfig, and
// deploy/kubernetes/agent-sandbox (relayd's SandboxTemplate and a
// SandboxWarmPool of 10) applied with an overlay. A controller written
// here claims, reaches relayd by dial-in to the Pod's IP (the node reaches
// Pod IPs through the CNI bridge; the cluster has no DNS for the
// Sandbox's headless Service), runs a trial, recycles the container
// (protocol 4.9) and releases the claim.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	relayd "github.com/relayd/relayd/client"
)

const (
	sandboxGroup = "extensions.agents.x-k8s.io/v1beta1"
	sandboxPool  = "relayd" // deploy/kubernetes/agent-sandbox's names
)

// kubeAPI is a minimal Kubernetes API client over HTTPS with the
// kubeconfig's certificates: claims are timed without kubectl's start-up.
type kubeAPI struct {
	server string
	hc     *http.Client
}

func (k *k8sEnv) api(t testing.TB) *kubeAPI {
	t.Helper()
	var cfg struct {
		Clusters []struct {
			Cluster struct {
				Server   string `json:"server"`
				CA       string `json:"certificate-authority"`
				CAData   string `json:"certificate-authority-data"`
				Insecure bool   `json:"insecure-skip-tls-verify"`
			} `json:"cluster"`
		} `json:"clusters"`
		Users []struct {
			User struct {
				Cert     string `json:"client-certificate"`
				CertData string `json:"client-certificate-data"`
				Key      string `json:"client-key"`
				KeyData  string `json:"client-key-data"`
			} `json:"user"`
		} `json:"users"`
	}
	if err := json.Unmarshal([]byte(k.must(t, "config", "view", "--raw", "--minify", "-o", "json")), &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Clusters) != 1 || len(cfg.Users) != 1 {
		t.Fatalf("kubeconfig: want one cluster and one user, got %d and %d", len(cfg.Clusters), len(cfg.Users))
	}
	read := func(file, data string) []byte {
		if data != "" {
			b, err := base64.StdEncoding.DecodeString(data)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	c, u := cfg.Clusters[0].Cluster, cfg.Users[0].User
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(read(c.CA, c.CAData)) {
		t.Fatal("kubeconfig: no CA certificate")
	}
	cert, err := tls.X509KeyPair(read(u.Cert, u.CertData), read(u.Key, u.KeyData))
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}},
		MaxIdleConnsPerHost: 16, ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &kubeAPI{server: c.Server, hc: &http.Client{Transport: tr}}
}

// do sends a request with a JSON body (nil: none) and decodes the JSON
// reply into out (nil: drops it); a status of 300 or more is an error.
func (a *kubeAPI) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.server+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := a.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// claimObj is the part of a SandboxClaim read here.
type claimObj struct {
	Metadata struct {
		Name            string `json:"name"`
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Status struct {
		Conditions []struct {
			Type, Status, Reason, Message string
		} `json:"conditions"`
		Sandbox struct {
			Name        string   `json:"name"`
			PodIPs      []string `json:"podIPs"`
			ServiceFQDN string   `json:"serviceFQDN"`
		} `json:"sandbox"`
	} `json:"status"`
}

// bound: the claim names a Sandbox that is Ready, with a Pod IP.
func (c claimObj) bound() bool {
	if c.Status.Sandbox.Name == "" || len(c.Status.Sandbox.PodIPs) == 0 {
		return false
	}
	for _, cd := range c.Status.Conditions {
		if cd.Type == "Ready" {
			return cd.Status == "True"
		}
	}
	return false
}

func (c claimObj) String() string {
	b, _ := json.Marshal(c.Status)
	return c.Metadata.Name + " " + string(b)
}

func claimsPath(ns string) string {
	return "/apis/" + sandboxGroup + "/namespaces/" + ns + "/sandboxclaims"
}

// claim makes a SandboxClaim of the pool and waits, watching it from the
// version the create returned, until it is bound.
func (a *kubeAPI) claim(ctx context.Context, ns, name, pool string) (claimObj, error) {
	var c claimObj
	body := map[string]any{"apiVersion": sandboxGroup, "kind": "SandboxClaim",
		"metadata": map[string]any{"name": name}, "spec": map[string]any{"warmPoolRef": map[string]any{"name": pool}}}
	if err := a.do(ctx, "POST", claimsPath(ns), body, &c); err != nil {
		return c, err
	}
	for !c.bound() {
		q := url.Values{"watch": {"1"}, "fieldSelector": {"metadata.name=" + name},
			"resourceVersion": {c.Metadata.ResourceVersion}, "allowWatchBookmarks": {"false"}}
		req, err := http.NewRequestWithContext(ctx, "GET", a.server+claimsPath(ns)+"?"+q.Encode(), nil)
		if err != nil {
			return c, err
		}
		resp, err := a.hc.Do(req)
		if err != nil {
			return c, fmt.Errorf("watching claim %s: %w (last seen %s)", name, err, c)
		}
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return c, fmt.Errorf("watching claim %s: %s: %s", name, resp.Status, b)
		}
		dec := json.NewDecoder(bufio.NewReader(resp.Body))
		for !c.bound() {
			var ev struct {
				Type   string   `json:"type"`
				Object claimObj `json:"object"`
			}
			if err := dec.Decode(&ev); err != nil {
				break // the watch ended (timeout, ctx): watch again from c's version
			}
			if ev.Type == "ADDED" || ev.Type == "MODIFIED" {
				c = ev.Object
			} else if ev.Type == "DELETED" {
				resp.Body.Close()
				return c, fmt.Errorf("claim %s deleted while waiting", name)
			}
		}
		resp.Body.Close()
		if err := ctx.Err(); err != nil {
			return c, fmt.Errorf("claim %s not bound: %w (last seen %s)", name, err, c)
		}
	}
	return c, nil
}

func (a *kubeAPI) release(ctx context.Context, ns, name string) error {
	return a.do(ctx, "DELETE", claimsPath(ns)+"/"+name, map[string]any{"propagationPolicy": "Background"}, nil)
}

// agentSandbox installs agent-sandbox's CRDs (kept until the cluster goes:
// they are cluster-wide and apply is idempotent) and starts its
// controller with the extensions on the node, as a process of the test's
// own, stopped (by its pid) when the test ends. Its executable is under
// the cache's bin/ and its command line names the state directory, so
// cluster.sh down stops one a killed test left.
func (k *k8sEnv) agentSandbox(t testing.TB) {
	t.Helper()
	dir := os.Getenv("RELAYD_K8S_AGENT_SANDBOX")
	if dir == "" {
		t.Fatal("RELAYD_K8S_AGENT_SANDBOX is not set: deploy/kubernetes/test/agent-sandbox.sh prints it (run.sh's images() sets it)")
	}
	k.must(t, "apply", "--server-side", "--force-conflicts", "-f", filepath.Join(dir, "crds"))
	k.must(t, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/sandboxes.agents.x-k8s.io", "crd/sandboxtemplates.extensions.agents.x-k8s.io",
		"crd/sandboxwarmpools.extensions.agents.x-k8s.io", "crd/sandboxclaims.extensions.agents.x-k8s.io")
	logf, err := os.Create(filepath.Join(t.TempDir(), "agent-sandbox-controller.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(dir, "agent-sandbox-controller"), "--kubeconfig", k.kubeconfig,
		"--extensions", "--leader-elect=false", "--metrics-bind-address=0", "--health-probe-bind-address=0")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			t.Logf("agent-sandbox-controller's log, last lines:\n%s", strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
	})
}

// sandboxPoolNS makes a namespace (Pod Security baseline) with
// deploy/kubernetes/agent-sandbox applied unchanged under an overlay that
// sets the images, the token's Secret and the pool's replicas.
func (k *k8sEnv) sandboxPoolNS(t testing.TB, replicas int) (ns, token string) {
	t.Helper()
	ns = k.namespace(t, "baseline")
	token = randomName("tok")[4:] + randomName("tok")[4:] + randomName("tok")[4:] + randomName("tok")[4:]
	dir := t.TempDir()
	base, err := filepath.Abs("../deploy/kubernetes/agent-sandbox")
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(dir, base)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	split := func(ref string) (string, string) {
		i := strings.LastIndex(ref, ":")
		return ref[:i], ref[i+1:]
	}
	tn, tt := split(k.taskImage)
	in, it := split(k.initImage)
	kust := fmt.Sprintf(`namespace: %s
resources:
  - %s
images:
  - name: task-image
    newName: %q
    newTag: %q
  - name: relayd-init
    newName: %q
    newTag: %q
secretGenerator:
  - name: relayd-token
    files: [token]
    options: {disableNameSuffixHash: true}
patches:
  - target: {kind: SandboxWarmPool, name: relayd}
    patch: |-
      - op: replace
        path: /spec/replicas
        value: %d
`, ns, rel, tn, tt, in, it, replicas)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kust), 0o600); err != nil {
		t.Fatal(err)
	}
	k.must(t, "apply", "-k", dir)
	return ns, token
}

type poolStatus struct {
	Spec struct {
		Replicas int `json:"replicas"`
	} `json:"spec"`
	Status struct {
		Replicas      int `json:"replicas"`
		ReadyReplicas int `json:"readyReplicas"`
	} `json:"status"`
}

// poolFull waits until the pool's sandboxes are all there and Ready.
func (k *k8sEnv) poolFull(t testing.TB, a *kubeAPI, ns string, timeout time.Duration) {
	t.Helper()
	end := time.Now().Add(timeout)
	var p poolStatus
	for {
		err := a.do(context.Background(), "GET", "/apis/"+sandboxGroup+"/namespaces/"+ns+"/sandboxwarmpools/"+sandboxPool, nil, &p)
		if err == nil && p.Status.ReadyReplicas == p.Spec.Replicas && p.Status.Replicas == p.Spec.Replicas {
			return
		}
		if time.Now().After(end) {
			out, _ := k.run(30*time.Second, "get", "pods,sandboxes", "-n", ns, "-o", "wide")
			t.Fatalf("warm pool %s/%s not full after %v: %+v, %v\n%s", ns, sandboxPool, timeout, p, err, out)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// launchType is the Sandbox's agents.x-k8s.io/launch-type: warm or cold.
func (a *kubeAPI) launchType(ctx context.Context, ns, sandbox string) (string, error) {
	var s struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	err := a.do(ctx, "GET", "/apis/agents.x-k8s.io/v1beta1/namespaces/"+ns+"/sandboxes/"+sandbox, nil, &s)
	return s.Metadata.Labels["agents.x-k8s.io/launch-type"], err
}

// TestK8sSandbox: agent-sandbox's controller and CRDs, relayd's
// SandboxTemplate and a warm pool of 10; a claim bound to a warm sandbox
// whose relayd runs a trial, recycles the container and runs another, by
// dial-in to the Pod's IP and through kubectl exec; the Python client's
// agent_sandbox helper; and the figures: claim to the first executed
// reply, warm (50 claims one at a time, 50 five at a time) and cold (50
// claims of an empty pool, five at a time).
func TestK8sSandbox(t *testing.T) {
	k := k8s(t)
	k.agentSandbox(t)
	a := k.api(t)
	ns, token := k.sandboxPoolNS(t, 10)
	start := time.Now()
	k.poolFull(t, a, ns, 5*time.Minute)
	t.Logf("k8s-report: agent-sandbox warm pool of 10 relayd sandboxes full in %.1f s", time.Since(start).Seconds())

	t.Run("trial", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		name := randomName("claim")
		c, err := a.claim(ctx, ns, name, sandboxPool)
		if err != nil {
			t.Fatal(err)
		}
		defer a.release(context.Background(), ns, name)
		sb := c.Status.Sandbox
		if lt, err := a.launchType(ctx, ns, sb.Name); err != nil || lt != "warm" {
			t.Errorf("claim %s: sandbox %s launched %q, %v; want warm (from the pool)", name, sb.Name, lt, err)
		}
		// The Sandbox's headless Service (the template's service: true).
		if want := sb.Name + "." + ns + ".svc.cluster.local"; sb.ServiceFQDN != want {
			t.Errorf("claim %s: serviceFQDN %q; want %q", name, sb.ServiceFQDN, want)
		}
		if ip := k.must(t, "get", "service", "-n", ns, sb.Name, "-o", "jsonpath={.spec.clusterIP}"); ip != "None" {
			t.Errorf("service %s: cluster IP %q; want None (headless)", sb.Name, ip)
		}
		conn, err := relayd.Dial(ctx, net.JoinHostPort(sb.PodIPs[0], "7700"), token)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.Mark(ctx, "clean", relayd.MarkOptions{Paths: []string{"/app"}, Keep: []string{"/app"}}); err != nil {
			t.Fatalf("Mark: %v", err)
		}
		// Trial 1: a file written, and a process left behind.
		ex, err := conn.Execute(ctx, relayd.Request{Command: "/bin/sh", Args: []string{"-c",
			"echo answer > /app/out.txt; (sleep 1000 &); id -u"}, Timeout: 30 * time.Second})
		if err != nil || ex.ExitCode != 0 || strings.TrimSpace(ex.Stdout) != "1000" {
			t.Fatalf("trial 1: %+v, %v; want exit 0 and uid 1000", ex, err)
		}
		if len(ex.Survivors) != 1 || !strings.Contains(strings.Join(ex.Survivors[0].Argv, " "), "sleep 1000") {
			t.Errorf("trial 1: survivors %+v; want the sleep", ex.Survivors)
		}
		ver, err := conn.Execute(ctx, relayd.Request{Command: "cat", Args: []string{"/app/out.txt"}})
		if err != nil || ver.Stdout != "answer\n" {
			t.Fatalf("verifier: %+v, %v", ver, err)
		}
		// Recycle (protocol 4.9): the survivor settled, /app back as marked.
		r, err := conn.Recycle(ctx, "clean", relayd.VerifyOptions{})
		if err != nil {
			t.Fatalf("Recycle: %+v, %v", r, err)
		}
		if !r.Verified.Quiescent || len(r.Verified.Settled) != 1 || len(r.Verified.Survivors) != 0 {
			t.Errorf("Recycle: quiescent %v, settled %v, survivors %+v; want the sleep settled",
				r.Verified.Quiescent, r.Verified.Settled, r.Verified.Survivors)
		}
		ch, err := conn.Changes(ctx, "clean")
		if err != nil || !ch.Empty() || r.Restored.Removed != 1 {
			t.Errorf("Recycle: restored %+v; Changes after it: %+v, %v; want out.txt removed, no change left", r.Restored, ch, err)
		}
		// Trial 2 on the recycled container, through kubectl exec this time.
		br, err := relayd.DialCommand(ctx, k.argv("exec", "-i", "-n", ns, sb.Name, "-c", "task", "--",
			"/opt/relayd/relayd", "bridge"), token)
		if err != nil {
			t.Fatalf("kubectl exec ... relayd bridge: %v", err)
		}
		defer br.Close()
		ex, err = br.Execute(ctx, relayd.Request{Command: "/bin/sh", Args: []string{"-c", "ls -A /app; busybox ps -o args | busybox grep -c '^sleep 1000'"}})
		want := "0\n" // /app empty as marked, the survivor gone
		if err != nil || ex.Stdout != want {
			t.Errorf("trial 2: %+v, %v; want %q (/app's files, then the sleeps left)", ex, err, want)
		}
		br.Close()
		conn.Close()
		if err := a.release(ctx, ns, name); err != nil {
			t.Fatal(err)
		}
		k.waitGone(t, ns, "pod/"+sb.Name)
	})

	t.Run("python", func(t *testing.T) {
		k.pythonSandbox(t, ns, token)
	})

	t.Run("speed", func(t *testing.T) {
		k.reportClaims(t, "warm pool of 10", 1, k.claimTimes(t, a, ns, token, 50, 1, true))
		k.reportClaims(t, "warm pool of 10", 5, k.claimTimes(t, a, ns, token, 50, 5, true))
		// The same claims of a pool of 0 (the warm one and its Pods
		// deleted first): each Sandbox's Pod is started cold.
		k.must(t, "delete", "sandboxwarmpool", "-n", ns, sandboxPool, "--wait=true", "--timeout=50s")
		k.waitNoPods(t, ns)
		cold := filepath.Join(t.TempDir(), "cold.yaml")
		if err := os.WriteFile(cold, []byte("apiVersion: "+sandboxGroup+"\nkind: SandboxWarmPool\nmetadata:\n  name: "+
			sandboxPool+"\nspec:\n  replicas: 0\n  sandboxTemplateRef:\n    name: relayd\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		k.must(t, "apply", "-n", ns, "-f", cold)
		k.reportClaims(t, "cold (pool of 0)", 5, k.claimTimes(t, a, ns, token, 50, 5, false))
	})
}

// waitGone waits until kubectl get of obj finds nothing.
func (k *k8sEnv) waitGone(t testing.TB, ns, obj string) {
	t.Helper()
	if _, err := k.run(2*time.Minute, "wait", "-n", ns, "--for=delete", obj, "--timeout=90s"); err != nil {
		t.Errorf("%s not gone: %v", obj, err)
	}
}

// waitNoPods waits until the namespace has no Pod left.
func (k *k8sEnv) waitNoPods(t testing.TB, ns string) {
	t.Helper()
	end := time.Now().Add(3 * time.Minute)
	for {
		out, err := k.run(30*time.Second, "get", "pods", "-n", ns, "-o", "name")
		if err == nil && strings.TrimSpace(out) == "" {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("pods of %s not gone after 3m: %s %v", ns, out, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

type claimTime struct {
	total, bound time.Duration
	launch       string
}

// claimTimes makes n claims, par at a time, each timed from its create to
// relayd's first executed reply (dial-in to the Pod's IP, /bin/true), then
// released. warm: before every 10 claims the pool is full again.
func (k *k8sEnv) claimTimes(t *testing.T, a *kubeAPI, ns, token string, n, par int, warm bool) []claimTime {
	t.Helper()
	var out []claimTime
	var mu sync.Mutex
	for done := 0; done < n; done += par {
		if warm && done%10 == 0 {
			k.poolFull(t, a, ns, 5*time.Minute)
		}
		var wg sync.WaitGroup
		for i := 0; i < min(par, n-done); i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
				defer cancel()
				name := randomName("claim")
				t0 := time.Now()
				c, err := a.claim(ctx, ns, name, sandboxPool)
				bound := time.Since(t0)
				if err == nil {
					var conn *relayd.Conn
					conn, err = relayd.Dial(ctx, net.JoinHostPort(c.Status.Sandbox.PodIPs[0], "7700"), token)
					if err == nil {
						var ex relayd.Executed
						ex, err = conn.Execute(ctx, relayd.Request{Command: "/bin/true"})
						total := time.Since(t0)
						conn.Close()
						if err == nil && ex.ExitCode != 0 {
							err = fmt.Errorf("exit %d", ex.ExitCode)
						}
						var lt string
						if err == nil {
							lt, err = a.launchType(ctx, ns, c.Status.Sandbox.Name)
						}
						if err == nil {
							mu.Lock()
							out = append(out, claimTime{total, bound, lt})
							mu.Unlock()
						}
					}
				}
				if err != nil {
					t.Errorf("claim %s: %v", name, err)
				}
				if err := a.release(context.Background(), ns, name); err != nil {
					t.Errorf("releasing %s: %v", name, err)
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
	}
	return out
}

func (k *k8sEnv) reportClaims(t *testing.T, what string, par int, ts []claimTime) {
	t.Helper()
	if len(ts) == 0 {
		return
	}
	pct := func(d []time.Duration, p float64) float64 {
		i := int(p*float64(len(d))+0.999999) - 1
		return float64(d[max(0, min(i, len(d)-1))].Microseconds()) / 1000
	}
	var total, bound []time.Duration
	launch := map[string]int{}
	for _, c := range ts {
		total = append(total, c.total)
		bound = append(bound, c.bound)
		launch[c.launch]++
	}
	sort.Slice(total, func(i, j int) bool { return total[i] < total[j] })
	sort.Slice(bound, func(i, j int) bool { return bound[i] < bound[j] })
	t.Logf("k8s-report: agent-sandbox claim to first executed, %s, %d claims %d at a time: p50 %.0f ms, p99 %.0f ms, max %.0f ms (claim bound: p50 %.0f ms, p99 %.0f ms; sandboxes launched %v)",
		what, len(ts), par, pct(total, 0.5), pct(total, 0.99), pct(total, 1), pct(bound, 0.5), pct(bound, 0.99), launch)
}

// pythonSandbox runs the Python client's agent_sandbox helper once
// against the pool: claim, connect (dial-in and kubectl exec), execute,
// release; with the system's Python, as make pytest does.
func (k *k8sEnv) pythonSandbox(t *testing.T, ns, token string) {
	src, err := filepath.Abs("../clients/python/src")
	if err != nil {
		t.Fatal(err)
	}
	script := `
import os, sys, time
from relayd_client import agent_sandbox
ns, token, kubectl = sys.argv[1], sys.argv[2], sys.argv[3]
t0 = time.monotonic()
with agent_sandbox.claim("relayd", namespace=ns, timeout=180) as sb:
    with sb.connect(token) as c:
        r = c.execute("/bin/sh", ["-c", "echo $((6*7))"])
        assert r.exit_code == 0 and r.stdout == "42\n", r
    print("first executed %.0f ms" % ((time.monotonic() - t0) * 1000))
    with sb.connect(token, via="exec", kubectl=[kubectl, "--kubeconfig", os.environ["KUBECONFIG"]]) as c:
        r = c.execute("/bin/sh", ["-c", "id -u"])
        assert r.exit_code == 0 and r.stdout == "1000\n", r
    print("sandbox", sb.name, sb.pod_ips, sb.service_fqdn)
    name = sb.claim
print("released", name)
`
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/usr/bin/python3", "-c", script, ns, token, k.kubectl)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+src, "KUBECONFIG="+k.kubeconfig)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python agent_sandbox: %v\n%s", err, out)
	}
	t.Logf("python agent_sandbox:\n%s", out)
	var claim string
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "released" {
			claim = f[1]
		}
	}
	if claim == "" {
		t.Fatalf("python agent_sandbox: no claim named in its output")
	}
	if out, err := k.run(time.Minute, "get", "sandboxclaim", "-n", ns, claim, "--ignore-not-found", "-o", "name"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("claim %s after release: %q, %v; want it gone", claim, out, err)
	}
}
