//go:build k8s

package e2e

// Whole trials on the cluster (issue 44): each base's trial.sh overlay,
// applied unchanged in a namespace that enforces its level, reached
// through kubectl exec ... relayd bridge and through its dial-in Service
// with the Go client; a Pod deleted while an execute runs; readiness; and
// the speed rows (k8s-report:).

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	relayd "github.com/relayd/relayd/client"
)

// k8sLevels are the bases, each applied in a namespace enforcing its level.
var k8sLevels = []string{"baseline", "restricted"}

// k8sSubjectUID is whom the commands run as in either Pod: baseline's
// relayd is root with --subject-user 1000, restricted's relayd and its
// commands are uid 1000 (runAsUser).
const k8sSubjectUID = 1000

// trialThrough runs one whole trial on c, step by step in order (later
// steps use what earlier ones left: the survivor, the put's file): ready,
// an execute that prints and shows its uid, an exit 3 leaving a survivor,
// a deadline, a put with a mode and a get, a mark and its changes, the
// trial boundary that settles the survivor, and a verify.
func trialThrough(t *testing.T, c *relayd.Conn, wantUID int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	work := c.Handshake().Cwd // relayd's workspace
	dir := filepath.Join(work, randomName("k8s-trial"))
	var survivor relayd.Survivor
	putPath, putData := dir+"/put.bin", make([]byte, 100<<10)
	_, _ = rand.Read(putData)
	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"ready", func(t *testing.T) {
			r, err := c.Ready(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if r.Protocol != 1 || r.Cwd != work {
				t.Errorf("ready %+v: want protocol 1, cwd %s", r, work)
			}
			for _, ext := range []string{"trial", "files", "marks", "status"} {
				if !slices.Contains(r.Extensions, ext) {
					t.Errorf("ready lists extensions %v: want %q among them", r.Extensions, ext)
				}
			}
		}},
		{"print and id", func(t *testing.T) {
			e, err := c.Execute(ctx, relayd.Request{Command: "/bin/sh", Args: []string{"-c", "echo hello from the pod; id -u"}})
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("hello from the pod\n%d\n", wantUID); e.Termination != relayd.Exited || e.ExitCode != 0 || e.Stdout != want {
				t.Errorf("executed %+v: want exited 0, stdout %q", e, want)
			}
		}},
		{"exit 3 with a survivor", func(t *testing.T) {
			e, err := c.Execute(ctx, relayd.Request{Command: "/bin/sh", Args: []string{"-c", "sleep 300 & exit 3"}})
			if err != nil {
				t.Fatal(err)
			}
			if e.Termination != relayd.Exited || e.ExitCode != 3 || len(e.Survivors) != 1 {
				t.Fatalf("executed %+v: want exited 3 and one survivor", e)
			}
			survivor = e.Survivors[0]
			if !slices.Equal(survivor.Argv, []string{"sleep", "300"}) || survivor.UID != wantUID || survivor.Execution != e.Execution {
				t.Errorf("survivor %+v: want sleep 300, uid %d, of execution %s", survivor, wantUID, e.Execution)
			}
		}},
		{"deadline", func(t *testing.T) {
			e, err := c.Execute(ctx, relayd.Request{Command: "/bin/sleep", Args: []string{"300"}, Timeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if e.Termination != relayd.FrameworkTimeout || e.ExitCode != relayd.ExitFramework || e.Settlement != relayd.Settled {
				t.Errorf("executed %+v: want framework_timeout, 124, settled", e)
			}
		}},
		{"put with a mode and get", func(t *testing.T) {
			data, path := putData, putPath
			sum := sha256.Sum256(data)
			tr, err := c.PutFile(ctx, path, bytes.NewReader(data), relayd.PutOptions{Mode: 0o640, Parents: true})
			if err != nil {
				t.Fatalf("put %s, mode 0640: %v", path, err)
			}
			if tr.Path != path || tr.Bytes != int64(len(data)) || tr.Sha256 != hex.EncodeToString(sum[:]) {
				t.Errorf("stored %+v: want %s, %d bytes, sha256 %x", tr, path, len(data), sum)
			}
			var got bytes.Buffer
			if _, err := c.GetFile(ctx, path, "", &got); err != nil {
				t.Fatalf("get %s: %v", path, err)
			}
			if !bytes.Equal(got.Bytes(), data) {
				t.Errorf("get %s: %d bytes, not the %d put", path, got.Len(), len(data))
			}
			e, err := c.Execute(ctx, relayd.Request{Command: "/bin/ls", Args: []string{"-ln", path}})
			if f := strings.Fields(e.Stdout); err != nil || e.ExitCode != 0 || len(f) < 3 || f[0] != "-rw-r-----" || f[2] != fmt.Sprint(wantUID) {
				t.Errorf("ls -ln of the put file: %+v, %v; want mode -rw-r-----, uid %d", e, err, wantUID)
			}
		}},
		{"mark, changes and restore", func(t *testing.T) {
			// The put's file is 0640, the subject's: relayd reads it to
			// mark it and writes it back, its owner and mode, to restore.
			name := "k8s-" + filepath.Base(dir)
			m, err := c.Mark(ctx, name, relayd.MarkOptions{Paths: []string{work}, Keep: []string{dir}})
			if err != nil {
				t.Fatal(err)
			}
			if m.Entries < 3 || m.KeptBytes != int64(len(putData)) { // the workspace, the trial's directory, put.bin
				t.Errorf("marked %+v: want at least 3 entries, %d bytes kept", m, len(putData))
			}
			changed := dir + "/changed.txt"
			if e, err := c.Execute(ctx, relayd.Request{Command: "/bin/sh", Args: []string{"-c",
				"echo changed > " + changed + "; echo more >> " + putPath + "; chmod 0600 " + putPath}}); err != nil || e.ExitCode != 0 {
				t.Fatalf("changing %s: %+v, %v", dir, e, err)
			}
			ch, err := c.Changes(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			var added, modified []string
			for _, a := range ch.Added {
				added = append(added, a.Path())
			}
			for _, m := range ch.Modified {
				modified = append(modified, m.Path())
			}
			if !slices.Equal(added, []string{changed}) || !slices.Contains(modified, putPath) || len(ch.Deleted) != 0 {
				t.Errorf("changes %+v: want %s added, %s modified, nothing deleted", ch, changed, putPath)
			}
			r, err := c.Restore(ctx, name)
			if err != nil || r.Removed != 1 || len(r.NotRestored) != 0 {
				t.Errorf("restore: %+v, %v; want %s removed", r, err, changed)
			}
			if ch, err := c.Changes(ctx, name); err != nil || !ch.Empty() {
				t.Errorf("changes after the restore: %+v, %v; want none", ch, err)
			}
			var got bytes.Buffer
			if _, err := c.GetFile(ctx, putPath, "", &got); err != nil || !bytes.Equal(got.Bytes(), putData) {
				t.Errorf("get %s after the restore: %d bytes, %v; want the %d put", putPath, got.Len(), err, len(putData))
			}
			if err := c.Unmark(ctx, name); err != nil {
				t.Error(err)
			}
		}},
		{"status and boundary", func(t *testing.T) {
			st, err := c.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(st.Survivors, func(s relayd.Survivor) bool { return s.PID == survivor.PID }) {
				t.Errorf("status lists survivors %+v: want pid %d", st.Survivors, survivor.PID)
			}
			v, err := c.Boundary(ctx, relayd.VerifyOptions{SettleSurvivors: true})
			if err != nil {
				t.Fatal(err)
			}
			if !v.Quiescent || v.Boundary < 1 || !slices.Contains(v.Settled, survivor.PID) {
				t.Errorf("boundary %+v: want quiescent, numbered, pid %d settled", v, survivor.PID)
			}
			if st, err := c.Status(ctx); err != nil || len(st.Survivors) != 0 || len(st.Executions) != 0 {
				t.Errorf("status after the boundary: %+v, %v; want nothing running or left", st, err)
			}
		}},
		{"verify", func(t *testing.T) {
			v, err := c.Verify(ctx)
			if err != nil || !v.Quiescent || len(v.Survivors) != 0 {
				t.Errorf("verify: %+v, %v; want quiescent, no survivors", v, err)
			}
		}},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.run) && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Fatal("the trial ran out of time")
		}
	}
}

// TestK8sTrialExec: a whole trial through kubectl exec -i ... relayd
// bridge in each base's Pod.
func TestK8sTrialExec(t *testing.T) {
	t.Parallel()
	k := k8s(t)
	for _, level := range k8sLevels {
		t.Run(level, func(t *testing.T) {
			t.Parallel()
			ns := k.namespace(t, level)
			tr := k.trial(t, ns, level, "exec", "")
			k.ready(t, tr)
			trialThrough(t, k.bridge(t, tr), k8sSubjectUID)
		})
	}
}

// dialService dials a dial-in trial's Service from the node. A Ready Pod
// is in the Service's endpoints only once the endpoints controller and
// kube-proxy caught up, until when the cluster IP refuses: that is
// retried for a minute, and how long it took is logged.
func (k *k8sEnv) dialService(t testing.TB, tr k8sTrial) *relayd.Conn {
	t.Helper()
	addr := net.JoinHostPort(k.ip(t, "service", tr.NS, tr.Name+"-relayd"), "7700")
	start := time.Now()
	var first error
	for tries := 1; ; tries++ {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		c, err := relayd.Dial(ctx, addr, tr.Token)
		cancel()
		if first == nil {
			first = err
		}
		if err == nil {
			t.Logf("trial %s: dialled its Service %s at try %d, %v after the first (%v)", tr.Name, addr, tries, time.Since(start).Round(time.Millisecond), first)
			t.Cleanup(func() { c.Close() })
			return c
		}
		if time.Since(start) > time.Minute {
			t.Fatalf("trial %s: dialling its Service %s: %v (%d tries in a minute)", tr.Name, addr, err, tries)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestK8sTrialDialIn: MODE=dial-in in each base. Right after the Pod is
// Ready, relayd serves: the first connection to the Pod's IP gets its
// ready at once, no retry. Then a whole trial through the Service's
// cluster IP from the node.
func TestK8sTrialDialIn(t *testing.T) {
	t.Parallel()
	k := k8s(t)
	for _, level := range k8sLevels {
		t.Run(level, func(t *testing.T) {
			t.Parallel()
			ns := k.namespace(t, level)
			tr := k.trial(t, ns, level, "dial-in", "")
			k.ready(t, tr)
			addr := net.JoinHostPort(k.ip(t, "pod", ns, tr.Pod()), "7700")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			first, err := relayd.Dial(ctx, addr, tr.Token)
			cancel()
			if err != nil {
				t.Fatalf("the first connection to %s right after Ready: %v", addr, err)
			}
			if h := first.Handshake(); h.Protocol != 1 {
				t.Errorf("the first connection's ready: %+v", h)
			}
			first.Close()
			trialThrough(t, k.dialService(t, tr), k8sSubjectUID)
		})
	}
}

// TestK8sPodDeletedMidExecution: an execute of sleep 300 without a
// deadline runs when its Pod is deleted (kubectl delete pod --wait=false:
// SIGTERM to relayd, SIGKILL after the 20 s grace). relayd settles it and
// answers framework_timeout, 124, settled (protocol 6.8), then answers
// the controller's verify, quiescent, and exits 0 (the Pod's container
// ends with 0). Both ways in: through the Service, whose established
// connection outlives the Pod's endpoint, and through kubectl exec's
// bridge, which relayd keeps open for that verify.
func TestK8sPodDeletedMidExecution(t *testing.T) {
	t.Parallel()
	k := k8s(t)
	for _, way := range []string{"dial-in", "exec"} {
		t.Run(way, func(t *testing.T) {
			t.Parallel()
			ns := k.namespace(t, "baseline")
			tr := k.trial(t, ns, "baseline", way, "")
			k.ready(t, tr)
			var c *relayd.Conn
			if way == "dial-in" {
				c = k.dialService(t, tr)
			} else {
				c = k.bridge(t, tr)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			type result struct {
				e   relayd.Executed
				err error
				at  time.Time
			}
			done := make(chan result, 1)
			go func() {
				e, err := c.Execute(ctx, relayd.Request{Command: "/bin/sleep", Args: []string{"300"}})
				done <- result{e, err, time.Now()}
			}()
			for {
				st, err := c.Status(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if len(st.Executions) == 1 {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			deleted := time.Now()
			k.must(t, "delete", "pod", "-n", ns, tr.Pod(), "--wait=false")
			// Its exit code, read while the Pod is still there (it goes
			// once the kubelet saw the container end).
			exitCode := make(chan string, 1)
			go func() {
				for time.Since(deleted) < time.Minute {
					out, err := k.run(10*time.Second, "get", "pod", "-n", ns, tr.Pod(), "-o",
						"jsonpath={.status.containerStatuses[0].state.terminated.exitCode}")
					if err != nil || strings.TrimSpace(out) != "" {
						exitCode <- strings.TrimSpace(out)
						return
					}
					time.Sleep(100 * time.Millisecond)
				}
				exitCode <- ""
			}()
			r := <-done
			if r.err != nil {
				t.Fatalf("the execute when the Pod was deleted: %v", r.err)
			}
			e := r.e
			t.Logf("executed %v after the delete: %s, %d, %s", r.at.Sub(deleted).Round(time.Millisecond), e.Termination, e.ExitCode, e.Settlement)
			if e.Termination != relayd.FrameworkTimeout || e.ExitCode != relayd.ExitFramework || e.Settlement != relayd.Settled {
				t.Errorf("executed %+v: want framework_timeout, 124, settled", e)
			}
			v, err := c.Verify(ctx)
			if err != nil || !v.Quiescent {
				t.Errorf("verify after the shutdown's executed: %+v, %v; want quiescent", v, err)
			}
			switch code := <-exitCode; code {
			case "0":
				t.Logf("relayd exited 0")
			case "":
				t.Logf("the Pod went before its container's exit code was seen")
			default:
				t.Errorf("relayd exited %s; want 0", code)
			}
		})
	}
}

// TestK8sRefusedTokenNeverReady: a token Secret relayd refuses (blank:
// relayd runs with no empty token) leaves the Pod Failed, never Ready,
// relayd's log saying why.
func TestK8sRefusedTokenNeverReady(t *testing.T) {
	t.Parallel()
	k := k8s(t)
	ns := k.namespace(t, "baseline")
	blank := filepath.Join(t.TempDir(), "blank")
	if err := os.WriteFile(blank, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tr := k.trial(t, ns, "baseline", "exec", "", "TOKEN_FILE="+blank)
	end := time.Now().Add(2 * time.Minute)
	for {
		out, err := k.run(10*time.Second, "get", "pod", "-n", ns, tr.Pod(), "-o",
			`jsonpath={.status.phase} {.status.conditions[?(@.type=="Ready")].status}`)
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(out)
		if len(f) > 1 && f[1] == "True" {
			t.Fatalf("the Pod with a blank token is Ready (%s)", out)
		}
		if len(f) > 0 && f[0] == "Failed" {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the Pod with a blank token: %q, not Failed after 2 minutes", out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	code := strings.TrimSpace(k.must(t, "get", "pod", "-n", ns, tr.Pod(), "-o",
		"jsonpath={.status.containerStatuses[0].state.terminated.exitCode}"))
	logs := k.must(t, "logs", "-n", ns, tr.Pod(), "-c", "task")
	if code == "0" || !strings.Contains(logs, "refuses to run without a token") {
		t.Errorf("relayd exited %s, logging:\n%s\nwant a failure saying it refuses to run without a token", code, logs)
	}
}

// percentiles are the p50 and p99 of ds, which it sorts.
func percentiles(ds []time.Duration) (p50, p99 time.Duration) {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	i99 := (len(ds)*99+99)/100 - 1
	return ds[len(ds)/2], ds[i99]
}

// TestK8sSpeed: the rows of issue 44's report, not asserted: a dial-in
// baseline Pod's apply to Ready, and the round trip of an execute of
// true through the kubectl exec bridge (one connection) and through the
// Service, against a new kubectl exec -- true each time. Not parallel:
// the node runs nothing else meanwhile.
func TestK8sSpeed(t *testing.T) {
	k := k8s(t)
	const n = 50
	ns := k.namespace(t, "baseline")
	start := time.Now()
	tr := k.trial(t, ns, "baseline", "dial-in", "")
	k.ready(t, tr)
	t.Logf("k8s-report: baseline Pod, trial.sh + kubectl apply -k to Ready: %v", time.Since(start).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	row := func(what string, once func() error) {
		ds := make([]time.Duration, 0, n)
		for range n {
			t0 := time.Now()
			if err := once(); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			ds = append(ds, time.Since(t0))
		}
		p50, p99 := percentiles(ds)
		t.Logf("k8s-report: %-44s p50 %7.1f ms  p99 %7.1f ms  (%d)", what, float64(p50.Microseconds())/1000, float64(p99.Microseconds())/1000, n)
	}
	execTrue := func(c *relayd.Conn) func() error {
		return func() error {
			e, err := c.Execute(ctx, relayd.Request{Command: "/bin/true"})
			if err == nil && e.ExitCode != 0 {
				err = fmt.Errorf("executed %+v", e)
			}
			return err
		}
	}
	row("execute true, kubectl exec bridge", execTrue(k.bridge(t, tr)))
	row("execute true, Service (dial-in)", execTrue(k.dialService(t, tr)))
	row("kubectl exec POD -c task -- true", func() error {
		_, err := k.run(time.Minute, "exec", "-n", ns, tr.Pod(), "-c", "task", "--", "true")
		return err
	})
}
