package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// figure is one row of the table and one object of the JSON.
type figure struct {
	Section string  `json:"section"`
	Name    string  `json:"name"`
	Unit    string  `json:"unit"`
	N       int     `json:"n"`
	Median  float64 `json:"median"`
	// P99 is the tail: the 99th percentile where lower is better (times,
	// memory), the 1st where higher is better (rates), so that 99% of the
	// samples are at least as good.
	P99            float64   `json:"p99"`
	HigherIsBetter bool      `json:"higherIsBetter,omitempty"`
	Baseline       *baseline `json:"baseline,omitempty"`
	Ratio          float64   `json:"ratio,omitempty"` // Median / Baseline.Median
	Target         string    `json:"target,omitempty"`
	Met            *bool     `json:"met,omitempty"`
	Skipped        string    `json:"skipped,omitempty"` // why there is no figure
	Note           string    `json:"note,omitempty"`    // printed under the section
	Detail         string    `json:"detail,omitempty"`  // JSON only
}

type baseline struct {
	Name   string  `json:"name"`
	Median float64 `json:"median"`
}

// section is a titled group of figures.
type section struct {
	Name    string    `json:"name"`
	Title   string    `json:"title"`
	Notes   []string  `json:"notes,omitempty"` // how the section measures
	Figures []*figure `json:"figures"`
}

type machine struct {
	Date          string `json:"date"`
	NProc         int    `json:"nproc"`
	CPU           string `json:"cpu"`
	MemTotal      string `json:"memTotal"`
	Kernel        string `json:"kernel"`
	Go            string `json:"go"`
	RelaydVersion string `json:"relaydVersion"`
	Relayd        string `json:"relayd"`
	LoadAtStart   string `json:"loadAtStart"`
	LoadAtEnd     string `json:"loadAtEnd"`
}

type report struct {
	mu       sync.Mutex
	Machine  machine    `json:"machine"`
	Command  string     `json:"command"`
	Quick    bool       `json:"quick"`
	Seconds  float64    `json:"seconds"`
	Legend   []string   `json:"legend"`
	Notes    []string   `json:"notes,omitempty"` // what happened in this run that a reader should know
	Sections []*section `json:"sections"`
}

func newReport(cfg config, began time.Time) *report {
	m := machine{
		Date:          began.UTC().Format(time.RFC3339),
		NProc:         runtime.NumCPU(),
		CPU:           cpuModel(),
		MemTotal:      memTotal(),
		Kernel:        readTrim("/proc/sys/kernel/osrelease"),
		Go:            runtime.Version(),
		RelaydVersion: relaydVersion(cfg.relayd),
		Relayd:        cfg.relayd,
		LoadAtStart:   loadavg(),
	}
	return &report{Machine: m, Command: "relaybench " + strings.Join(os.Args[1:], " "), Quick: cfg.quick,
		Legend: []string{
			"median and p99 over n samples; for rates (higher is better) the p99 column is the 1st percentile, the rate 99% of samples reach",
			"ratio is the median over the baseline's median, both measured in this run",
			"targets are goals, not assertions; met is judged on the median",
		}}
}

func (r *report) finish(began time.Time) {
	r.Machine.LoadAtEnd = loadavg()
	r.Seconds = math.Round(time.Since(began).Seconds())
}

// section returns the section called name, adding it when new.
func (r *report) section(name, title string) *section {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.Sections {
		if s.Name == name {
			return s
		}
	}
	s := &section{Name: name, Title: title}
	r.Sections = append(r.Sections, s)
	return s
}

func (r *report) note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

func (s *section) note(format string, args ...any) {
	s.Notes = append(s.Notes, fmt.Sprintf(format, args...))
}

func (s *section) add(f *figure) *figure {
	f.Section = s.Name
	s.Figures = append(s.Figures, f)
	return f
}

// measured makes a figure from samples.
func measured(name, unit string, xs []float64, higherIsBetter bool) *figure {
	f := &figure{Name: name, Unit: unit, N: len(xs), HigherIsBetter: higherIsBetter}
	if len(xs) == 0 {
		f.Skipped = "no samples"
		return f
	}
	f.Median = quantile(xs, 0.5)
	if higherIsBetter {
		f.P99 = quantile(xs, 0.01)
	} else {
		f.P99 = quantile(xs, 0.99)
	}
	return f
}

func skipped(name, unit, why string) *figure {
	return &figure{Name: name, Unit: unit, Skipped: why}
}

// against sets the baseline and the ratio.
func (f *figure) against(b *figure) *figure {
	if f.Skipped != "" || b == nil || b.Skipped != "" || b.Median == 0 {
		return f
	}
	f.Baseline = &baseline{Name: b.Name, Median: b.Median}
	f.Ratio = f.Median / b.Median
	return f
}

// target sets a goal and whether it is met.
func (f *figure) target(text string, met func(f *figure) bool) *figure {
	f.Target = text
	if f.Skipped == "" {
		ok := met(f)
		f.Met = &ok
	}
	return f
}

func (f *figure) withNote(format string, args ...any) *figure {
	if f.Note != "" {
		f.Note += "; "
	}
	f.Note += fmt.Sprintf(format, args...)
	return f
}

// quantile is the nearest-rank quantile of xs (xs is not changed).
func quantile(xs []float64, q float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// value formats a number in a figure's unit.
func value(v float64, unit string) string {
	switch unit {
	case "ms":
		if v < 10 {
			return fmt.Sprintf("%.2f ms", v)
		}
		return fmt.Sprintf("%.1f ms", v)
	case "exec/s":
		return fmt.Sprintf("%.0f/s", v)
	case "GB/s":
		return fmt.Sprintf("%.2f GB/s", v)
	case "MiB":
		return fmt.Sprintf("%.1f MiB", v)
	case "count":
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.3g %s", v, unit)
}

// table renders the report as aligned text, one block per section.
func (r *report) table() string {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "relaybench: relayd %s, %s, %d cores (%s), kernel %s, %s; load %s at start, %s at end\n",
		m.RelaydVersion, m.Date, m.NProc, m.CPU, m.Kernel, m.Go, m.LoadAtStart, m.LoadAtEnd)
	if r.Quick {
		b.WriteString("QUICK RUN (--quick): few repetitions; not figures to quote\n")
	}
	for _, s := range r.Sections {
		fmt.Fprintf(&b, "\n== %s\n", s.Title)
		w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "figure\tn\tmedian\tp99\tbaseline\tratio\ttarget\tmet?\t")
		for _, f := range s.Figures {
			if f.Skipped != "" {
				fmt.Fprintf(w, "%s\t-\tskipped: %s\t\t\t\t%s\t\t\n", f.Name, f.Skipped, f.Target)
				continue
			}
			base, ratio := "", ""
			if f.Baseline != nil {
				base = value(f.Baseline.Median, f.Unit)
				ratio = fmt.Sprintf("%.3gx", f.Ratio) // three digits: 0.797x is not 0.80x
			}
			met := ""
			if f.Met != nil {
				met = map[bool]string{true: "met", false: "MISSED"}[*f.Met]
			}
			fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", f.Name, f.N, value(f.Median, f.Unit), value(f.P99, f.Unit),
				base, ratio, f.Target, met)
		}
		w.Flush()
		for _, n := range s.Notes {
			fmt.Fprintf(&b, "  %s\n", n)
		}
		for _, f := range s.Figures {
			if f.Note != "" {
				fmt.Fprintf(&b, "  %s: %s\n", f.Name, f.Note)
			}
		}
	}
	if len(r.Notes) > 0 {
		b.WriteString("\nnotes:\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "  - %s\n", n)
		}
	}
	lines := strings.Split(b.String(), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ") // tabwriter pads the last column
	}
	return strings.Join(lines, "\n")
}

// readReport reads a report that write wrote.
func readReport(path string) (*report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return &r, nil
}

func (r *report) write(path string) error {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("--out %s: %v", path, err)
		}
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("--out %s: %v", path, err)
	}
	return nil
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

func loadavg() string {
	f := strings.Fields(readTrim("/proc/loadavg"))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func cpuModel() string {
	for _, line := range strings.Split(readTrim("/proc/cpuinfo"), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func memTotal() string {
	for _, line := range strings.Split(readTrim("/proc/meminfo"), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			var kb float64
			if _, err := fmt.Sscan(strings.TrimSpace(v), &kb); err == nil {
				return fmt.Sprintf("%.1f GiB", kb/(1<<20))
			}
		}
	}
	return "unknown"
}

func relaydVersion(bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(out)) // "relayd 0.1.0+abc (protocol 1)"
	if len(f) >= 2 {
		return f[1]
	}
	return strings.TrimSpace(string(out))
}
