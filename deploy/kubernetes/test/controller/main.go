// Command controller is the dial-out controller of make k8s-test
// (e2e/k8s_dialout_test.go): it runs as a Pod behind a Service, listens
// on :7700 with the Go client's Listener, and runs each trial of its
// trials file with the relayd that dials in with that trial's token.
//
// The trials file (a Secret the test mounts) has one trial a line: its
// name, its token and a scenario word; blank lines and lines starting
// with # are skipped.
//
//	trial  execute (echo and id -u), put and get a file in /app, an execute
//	       past its deadline (124, settled), verify
//	speed  trial, then -rounds executes of true: their round trips
//	hold   an execute of sleep 300, waited on: how it ended (relayd
//	       killed: the connection's loss; the Pod deleted: 124, settled)
//
// It accepts every trial at once, as it starts (the Listener's "accept as
// you launch"), and prints JSON lines to stdout: a start line (its start,
// Unix ms), for a hold the moment its sleep runs, one outcome line per
// trial (times in ms from its start), and a summary once every trial has
// an outcome. Then it waits to be deleted, so that its log stays readable;
// SIGTERM ends it at once.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	relayd "github.com/relayd/relayd/client"
)

type trial struct{ name, token, scenario string }

// outcome is one trial's line.
type outcome struct {
	Kind     string `json:"kind"` // "outcome"
	Trial    string `json:"trial"`
	Scenario string `json:"scenario"`
	OK       bool   `json:"ok"`
	Error    string `json:"error,omitempty"`
	// Times from the controller's start, ms; 0 when not reached.
	AcceptedMs      float64 `json:"acceptedMs,omitempty"`
	FirstExecutedMs float64 `json:"firstExecutedMs,omitempty"`
	DoneMs          float64 `json:"doneMs"`
	// What the trial saw.
	UID     string `json:"uid,omitempty"`
	Version string `json:"version,omitempty"`
	// speed: round trips of execute true, ms.
	Rounds int     `json:"rounds,omitempty"`
	P50Ms  float64 `json:"p50Ms,omitempty"`
	P99Ms  float64 `json:"p99Ms,omitempty"`
	// hold: how the sleep's execute ended when relayd replied.
	Termination string `json:"termination,omitempty"`
	ExitCode    *int   `json:"exitCode,omitempty"`
	Settlement  string `json:"settlement,omitempty"`
}

var (
	start = time.Now()
	outMu sync.Mutex
)

func since() float64 { return float64(time.Since(start).Microseconds()) / 1000 }

// emit prints v as one JSON line.
func emit(v any) {
	b, _ := json.Marshal(v)
	outMu.Lock()
	defer outMu.Unlock()
	os.Stdout.Write(append(b, '\n'))
}

func main() {
	listen := flag.String("listen", ":7700", "address to listen on for dial-out relayds")
	file := flag.String("trials", "/etc/relayd-controller/trials", "the trials file: NAME TOKEN SCENARIO a line")
	rounds := flag.Int("rounds", 50, "speed: how many executes of true")
	wait := flag.Duration("accept-timeout", 15*time.Minute, "how long to wait for each trial's relayd")
	flag.Parse()

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-sigs; os.Exit(0) }()

	trials, err := readTrials(*file)
	if err != nil {
		fmt.Fprintln(os.Stderr, "controller:", err)
		os.Exit(2)
	}
	d := &relayd.Dialer{}
	ln, err := d.Listen(*listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "controller:", err)
		os.Exit(2)
	}
	emit(map[string]any{"kind": "start", "startUnixMs": start.UnixMilli(), "trials": len(trials), "addr": ln.Addr().String()})

	var wg sync.WaitGroup
	results := make(chan outcome, len(trials))
	for _, tr := range trials {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := run(ln, tr, *wait, *rounds)
			emit(o)
			results <- o
		}()
	}
	wg.Wait()
	close(results)
	ok := 0
	for o := range results {
		if o.OK {
			ok++
		}
	}
	emit(map[string]any{"kind": "summary", "trials": len(trials), "passed": ok, "failed": len(trials) - ok, "doneMs": since()})
	select {} // until deleted
}

func readTrials(file string) ([]trial, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var trials []trial
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 || !slices.Contains([]string{"trial", "speed", "hold"}, f[2]) {
			return nil, fmt.Errorf("%s:%d: want NAME TOKEN trial|speed|hold", file, i+1)
		}
		trials = append(trials, trial{f[0], f[1], f[2]})
	}
	return trials, nil
}

// run accepts tr's relayd and runs its scenario.
func run(ln *relayd.Listener, tr trial, wait time.Duration, rounds int) (o outcome) {
	o = outcome{Kind: "outcome", Trial: tr.name, Scenario: tr.scenario}
	defer func() { o.DoneMs = since() }()
	fail := func(what string, err error) outcome {
		o.Error = what + ": " + err.Error()
		return o
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	c, err := ln.Accept(ctx, tr.token)
	if err != nil {
		return fail("accept", err)
	}
	defer c.Close()
	o.AcceptedMs = since()
	o.Version = c.Handshake().Version
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	if tr.scenario == "hold" {
		e, err := c.Execute(ctx, relayd.Request{Command: "sleep", Args: []string{"300"},
			Output: func(relayd.Output) {},
			Started: func(id string) {
				emit(map[string]any{"kind": "running", "trial": tr.name, "execution": id, "atMs": since()})
			}})
		if err != nil {
			return fail("execute sleep 300", err)
		}
		o.Termination, o.ExitCode, o.Settlement = string(e.Termination), &e.ExitCode, string(e.Settlement)
		o.OK = true // relayd answered; the test judges how
		return o
	}

	e, err := c.Execute(ctx, relayd.Request{Command: "sh", Args: []string{"-c", "echo hello from $0; id -u", tr.name}})
	if err != nil {
		return fail("execute echo", err)
	}
	o.FirstExecutedMs = since()
	lines := strings.Split(strings.TrimSpace(e.Stdout), "\n")
	if e.ExitCode != 0 || len(lines) != 2 || lines[0] != "hello from "+tr.name {
		return fail("execute echo", fmt.Errorf("exit %d, stdout %q", e.ExitCode, e.Stdout))
	}
	o.UID = lines[1]

	body := make([]byte, 100<<10)
	_, _ = rand.Read(body)
	path := "/app/k8s-dialout/" + tr.name + ".bin"
	if _, err := c.PutFile(ctx, path, bytes.NewReader(body), relayd.PutOptions{Mode: 0o640, Parents: true}); err != nil {
		return fail("put "+path, err)
	}
	var got bytes.Buffer
	if _, err := c.GetFile(ctx, path, "", &got); err != nil {
		return fail("get "+path, err)
	}
	if !bytes.Equal(got.Bytes(), body) {
		return fail("get "+path, fmt.Errorf("%d bytes back, not the %d put", got.Len(), len(body)))
	}

	e, err = c.Execute(ctx, relayd.Request{Command: "sleep", Args: []string{"60"}, Timeout: time.Second})
	if err != nil {
		return fail("execute past its deadline", err)
	}
	if e.ExitCode != relayd.ExitFramework || e.Termination != relayd.FrameworkTimeout || e.Settlement != relayd.Settled {
		return fail("execute past its deadline", fmt.Errorf("exit %d, %s, %s; want 124, framework-timeout, settled", e.ExitCode, e.Termination, e.Settlement))
	}

	if tr.scenario == "speed" {
		rt := make([]time.Duration, 0, rounds)
		for range rounds {
			t0 := time.Now()
			e, err := c.Execute(ctx, relayd.Request{Command: "true"})
			if err != nil {
				return fail("execute true", err)
			}
			if e.ExitCode != 0 {
				return fail("execute true", fmt.Errorf("exit %d", e.ExitCode))
			}
			rt = append(rt, time.Since(t0))
		}
		slices.Sort(rt)
		o.Rounds = len(rt)
		o.P50Ms, o.P99Ms = ms(quantile(rt, 0.50)), ms(quantile(rt, 0.99))
	}

	v, err := c.Verify(ctx)
	if err != nil {
		return fail("verify", err)
	}
	if !v.Quiescent {
		return fail("verify", errors.New("not quiescent"))
	}
	// relayd closes after verify and exits 0: the test sees its Pod Succeeded.
	o.OK = true
	return o
}

// quantile of sorted durations, nearest rank.
func quantile(s []time.Duration, q float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	i := int(q*float64(len(s))+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
