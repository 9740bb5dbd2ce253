package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/pflag"

	"github.com/relayd/relayd/internal/env"
)

// noEnv is an empty environment.
func noEnv(string) string { return "" }

// envOf is an environment of the given variables.
func envOf(vars map[string]string) func(string) string {
	return func(name string) string { return vars[name] }
}

// section9 is protocol.md section 9's table: every flag and its default, as
// the flag set shows it.
var section9 = map[string]string{
	"listen":               ":7700",
	"connect":              "",
	"connect-timeout":      "30s",
	"token-file":           "",
	"workspace":            "",
	"instruction-file":     "",
	"term-grace":           "2s",
	"teardown-timeout":     "10s",
	"write-timeout":        "10s",
	"auth-timeout":         "10s",
	"peer-timeout":         "30s",
	"max-connections":      "1024",
	"subject-user":         "",
	"max-line-bytes":       "1MiB",
	"max-stdout-bytes":     "1MiB",
	"max-stderr-bytes":     "1MiB",
	"max-stdin-buffer":     "4MiB",
	"artifacts-dir":        "",
	"max-sessions":         "64",
	"session-idle-timeout": "24h0m0s", // 24h, as Go prints it
	"session-buffer":       "4MiB",
	"state-dir":            "/run/relayd",
	"scope":                "auto",
	"log-level":            "info",
	"log-format":           "json",

	"max-artifact-bytes": "64MiB",
	"max-file-bytes":     "1GiB",
	"mark-bytes":         "2GiB",
	"artifacts-layout":   "relayd",
	"drop-capabilities":  "",
	"require-netns":      "",
	"socket":             "/run/relayd/relayd.sock",
	"subject-umask":      "022",
	"default-limits":     "",
}

func TestParseFlagsDefaults(t *testing.T) {
	o, fs, err := parseFlags(nil, noEnv)
	if err != nil {
		t.Fatalf("parseFlags() = %v; want the defaults to be valid", err)
	}
	want := options{
		listen:          ":7700",
		connectTimeout:  30 * time.Second,
		termGrace:       2 * time.Second,
		teardownTimeout: 10 * time.Second,
		writeTimeout:    10 * time.Second,
		authTimeout:     10 * time.Second, // not in protocol section 9: relayd's own
		peerTimeout:     30 * time.Second, // likewise
		maxConnections:  1024,             // likewise
		maxLineBytes:    1 << 20,
		maxStdoutBytes:  1 << 20,
		maxStderrBytes:  1 << 20,
		maxStdinBuffer:  4 << 20,
		maxSessions:     64,
		sessionIdle:     24 * time.Hour,
		sessionBuffer:   4 << 20,
		stateDir:        "/run/relayd",
		socket:          "/run/relayd/relayd.sock",
		artifactLimit:   64 << 20,
		maxFileBytes:    1 << 30,
		markBytes:       2 << 30,
		artifactsLayout: "relayd",
		scope:           "auto",
		subjectUmask:    0o022,
		logFormat:       "json",
		logLevel:        "info",
	}
	if !reflect.DeepEqual(o, want) {
		t.Fatalf("parseFlags() = %+v; want %+v", o, want)
	}
	if !reflect.DeepEqual(o, defaultOptions()) {
		t.Fatalf("parseFlags() = %+v; want defaultOptions() %+v", o, defaultOptions())
	}
	seen := map[string]bool{}
	fs.VisitAll(func(f *pflag.Flag) {
		seen[f.Name] = true
		if f.Usage == "" {
			t.Errorf("--%s has no usage text", f.Name)
		}
		def, ok := section9[f.Name]
		if !ok {
			return // an extension (--version, --destroy-command, ...): TestEnvironmentTwins covers it
		}
		if f.DefValue != def {
			t.Errorf("--%s default %q; want %q", f.Name, f.DefValue, def)
		}
	})
	for name := range section9 {
		if !seen[name] {
			t.Errorf("section 9's --%s is not a flag", name)
		}
	}
}

// twinCase is a valid value for a flag and how to see that it took effect.
type twinCase struct {
	value string
	check func(options) bool
	bad   string // a value the flag cannot parse; "" for string flags
}

// twinCases has one entry per flag; a flag added without one fails
// TestEnvironmentTwins, so that every flag's twin stays tested.
var twinCases = map[string]twinCase{
	"listen":               {"127.0.0.1:9999", func(o options) bool { return o.listen == "127.0.0.1:9999" }, ""},
	"connect":              {"10.0.0.1:7700", func(o options) bool { return o.connect == "10.0.0.1:7700" }, ""},
	"connect-timeout":      {"45s", func(o options) bool { return o.connectTimeout == 45*time.Second }, "soon"},
	"token-file":           {"/run/token", func(o options) bool { return o.tokenFile == "/run/token" }, ""},
	"workspace":            {"/ws", func(o options) bool { return o.workspace == "/ws" }, ""},
	"instruction-file":     {"/task.md", func(o options) bool { return o.instructionFile == "/task.md" }, ""},
	"term-grace":           {"750ms", func(o options) bool { return o.termGrace == 750*time.Millisecond }, "2"},
	"teardown-timeout":     {"1m", func(o options) bool { return o.teardownTimeout == time.Minute }, "ten seconds"},
	"write-timeout":        {"3s", func(o options) bool { return o.writeTimeout == 3*time.Second }, "-"},
	"auth-timeout":         {"4s", func(o options) bool { return o.authTimeout == 4*time.Second }, "never"},
	"peer-timeout":         {"0", func(o options) bool { return o.peerTimeout == 0 }, "30"},
	"max-connections":      {"64", func(o options) bool { return o.maxConnections == 64 }, "many"},
	"max-sessions":         {"3", func(o options) bool { return o.maxSessions == 3 }, "0"},
	"session-idle-timeout": {"90m", func(o options) bool { return o.sessionIdle == 90*time.Minute }, "0s"},
	"session-buffer":       {"1MiB", func(o options) bool { return o.sessionBuffer == 1<<20 }, "huge"},
	"subject-user":         {"agent", func(o options) bool { return o.subjectUser == "agent" }, ""},
	"max-line-bytes":       {"64KiB", func(o options) bool { return o.maxLineBytes == 64<<10 }, "lots"},
	"max-stdout-bytes":     {"2MiB", func(o options) bool { return o.maxStdoutBytes == 2<<20 }, "1TB"},
	"max-stderr-bytes":     {"3KiB", func(o options) bool { return o.maxStderrBytes == 3<<10 }, "1TB"},
	"max-stdin-buffer":     {"8MiB", func(o options) bool { return o.maxStdinBuffer == 8<<20 }, "plenty"},
	"artifacts-dir":        {"/artifacts", func(o options) bool { return o.artifactsDir == "/artifacts" }, ""},
	"state-dir":            {"/srv/state", func(o options) bool { return o.stateDir == "/srv/state" && o.stateDirGiven }, ""},
	"socket":               {"/srv/relayd.sock", func(o options) bool { return o.socket == "/srv/relayd.sock" && o.socketGiven }, ""},
	"scope":                {"process-group", func(o options) bool { return o.scope == "process-group" }, ""},
	"cgroup-root":          {"/sys/fs/cgroup/x", func(o options) bool { return o.cgroupRoot == "/sys/fs/cgroup/x" }, ""},
	"destroy-command":      {"reboot-vm", func(o options) bool { return o.destroyCommand == "reboot-vm" }, ""},
	"log-format":           {"console", func(o options) bool { return o.logFormat == "console" }, ""},
	"log-level":            {"debug", func(o options) bool { return o.logLevel == "debug" }, ""},

	"max-artifact-bytes": {"100kB", func(o options) bool { return o.artifactLimit == 100000 }, "64M"},
	"max-file-bytes":     {"2GiB", func(o options) bool { return o.maxFileBytes == 2<<30 }, "big"},
	"mark-bytes":         {"3GiB", func(o options) bool { return o.markBytes == 3<<30 }, "lots"},
	"artifacts-layout":   {"maka", func(o options) bool { return o.artifactsLayout == "maka" }, ""},
	"drop-capabilities":  {"net_raw,CAP_NET_ADMIN", func(o options) bool { return slices.Equal(o.dropCaps, capList{12, 13}) }, "NET_ROW"},
	"require-netns":      {"net:[4026531840]", func(o options) bool { return o.requireNetns == "net:[4026531840]" }, ""},
	"subject-umask":      {"077", func(o options) bool { return o.subjectUmask == 0o077 }, "0o77"},
	"allow-any-group":    {"true", func(o options) bool { return o.allowAnyGroup }, "maybe"},
	"default-limits": {"nofile=1024,processes=4096", func(o options) bool {
		return o.defaultLimits.limits["nofile"] == 1024 && o.defaultLimits.limits["processes"] == 4096
	}, "nofile=many"},
}

// noTwin are the flags that are actions, not configuration: an environment
// variable never triggers them (a RELAYD_VERSION=0.1.0 in an image must not
// stop relayd from serving).
var noTwin = map[string]bool{"version": true}

// allFlags lists the flags of relayd's flag set.
func allFlags(t *testing.T) []*pflag.Flag {
	t.Helper()
	_, fs, err := parseFlags(nil, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	var out []*pflag.Flag
	fs.VisitAll(func(f *pflag.Flag) { out = append(out, f) })
	if len(out) == 0 {
		t.Fatal("relayd has no flags")
	}
	return out
}

func TestEnvironmentTwins(t *testing.T) {
	for _, f := range allFlags(t) {
		if noTwin[f.Name] {
			continue // TestActionsHaveNoTwin
		}
		tc, ok := twinCases[f.Name]
		if !ok {
			t.Errorf("--%s has no case in twinCases: add one", f.Name)
			continue
		}
		twin := "RELAYD_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if envName(f.Name) != twin {
			t.Errorf("envName(%q) = %q; want %q", f.Name, envName(f.Name), twin)
		}
		t.Run(twin, func(t *testing.T) {
			if tc.check(defaultOptions()) {
				t.Fatalf("the test value %q of --%s is its default: it cannot show an effect", tc.value, f.Name)
			}
			o, _, err := parseFlags(nil, envOf(map[string]string{twin: tc.value}))
			if err != nil {
				t.Fatalf("%s=%s: %v", twin, tc.value, err)
			}
			if !tc.check(o) {
				t.Fatalf("%s=%s did not take effect: %+v", twin, tc.value, o)
			}
			// Nothing else moved.
			def := defaultOptions()
			for name, other := range twinCases {
				if name != f.Name && other.check(o) != other.check(def) {
					t.Fatalf("%s=%s also changed --%s", twin, tc.value, name)
				}
			}
			if tc.bad == "" {
				return
			}
			_, _, err = parseFlags(nil, envOf(map[string]string{twin: tc.bad}))
			if err == nil {
				t.Fatalf("%s=%q was accepted; want an error", twin, tc.bad)
			}
			if !strings.Contains(err.Error(), twin) {
				t.Fatalf("%s=%q: error %q does not name the variable", twin, tc.bad, err)
			}
		})
	}
}

// A value that parses but fails validation is refused too; the message
// should name where the value came from, since the person never typed --X.
func TestEnvironmentTwinValidationNamesVariable(t *testing.T) {
	cases := map[string]string{
		"RELAYD_SCOPE":            "jail",
		"RELAYD_LOG_LEVEL":        "loud",
		"RELAYD_LOG_FORMAT":       "xml",
		"RELAYD_TERM_GRACE":       "20s",
		"RELAYD_MAX_LINE_BYTES":   "10",
		"RELAYD_CONNECT_TIMEOUT":  "0s",
		"RELAYD_MAX_STDOUT_BYTES": "0",

		"RELAYD_MAX_ARTIFACT_BYTES": "0",
	}
	for twin, value := range cases {
		t.Run(twin, func(t *testing.T) {
			_, _, err := parseFlags(nil, envOf(map[string]string{twin: value}))
			if err == nil {
				t.Fatalf("%s=%s was accepted; want an error", twin, value)
			}
			if !strings.Contains(err.Error(), twin) {
				t.Fatalf("%s=%s is refused with %q; want the environment variable named", twin, value, err)
			}
		})
	}
}

func TestFlagWinsOverTwin(t *testing.T) {
	// A second valid value per flag, different from twinCases' one.
	flagValues := map[string]string{
		"listen": "127.0.0.1:1", "connect": "10.9.9.9:1", "connect-timeout": "5s",
		"token-file": "/flag/token", "workspace": "/flag/ws", "instruction-file": "/flag/task",
		"term-grace": "1s", "teardown-timeout": "30s", "write-timeout": "7s",
		"auth-timeout": "9s", "peer-timeout": "2m", "max-connections": "7", "subject-user": "nobody",
		"max-line-bytes": "4096", "max-stdout-bytes": "12345", "max-stderr-bytes": "54321", "max-stdin-buffer": "65536", "max-sessions": "9", "session-idle-timeout": "1h", "session-buffer": "64KiB", "artifacts-dir": "/flag/art", "state-dir": "/flag/state", "max-artifact-bytes": "1GiB", "max-file-bytes": "5MiB", "mark-bytes": "7MiB",
		"scope": "cgroup", "cgroup-root": "/flag/cg", "destroy-command": "true",
		"log-format": "json", "log-level": "warn",
		"artifacts-layout": "relayd", "drop-capabilities": "SYS_ADMIN", "require-netns": "/run/netns/egress",
		"socket": "/flag/relayd.sock", "subject-umask": "027", "allow-any-group": "false", "default-limits": "nofile=64",
	}
	for _, f := range allFlags(t) {
		if noTwin[f.Name] {
			continue
		}
		fv, ok := flagValues[f.Name]
		tc := twinCases[f.Name]
		if !ok || tc.check == nil {
			t.Errorf("--%s has no case: add one", f.Name)
			continue
		}
		twin := envName(f.Name)
		t.Run(f.Name, func(t *testing.T) {
			o, fs, err := parseFlags([]string{"--" + f.Name + "=" + fv}, envOf(map[string]string{twin: tc.value}))
			if err != nil {
				t.Fatalf("--%s=%s with %s=%s: %v", f.Name, fv, twin, tc.value, err)
			}
			if tc.check(o) {
				t.Fatalf("%s=%s won over --%s=%s", twin, tc.value, f.Name, fv)
			}
			if got := fs.Lookup(f.Name).Value.String(); got != canonical(t, f.Name, fv) {
				t.Fatalf("--%s = %q; want the flag's %q", f.Name, got, fv)
			}
			// An invalid twin of a flag that was given is not even read.
			if tc.bad != "" {
				if _, _, err := parseFlags([]string{"--" + f.Name + "=" + fv}, envOf(map[string]string{twin: tc.bad})); err != nil {
					t.Fatalf("--%s=%s with %s=%q: %v; want the twin ignored", f.Name, fv, twin, tc.bad, err)
				}
			}
		})
	}
}

// canonical is how the flag set prints value.
func canonical(t *testing.T, name, value string) string {
	t.Helper()
	_, fs, err := parseFlags([]string{"--" + name + "=" + value}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	return fs.Lookup(name).Value.String()
}

func TestTwinsReadOnlyForFlagsNotGiven(t *testing.T) {
	var asked []string
	getenv := func(name string) string {
		asked = append(asked, name)
		return ""
	}
	if _, _, err := parseFlags([]string{"--listen", "127.0.0.1:0", "--scope=process-group"}, getenv); err != nil {
		t.Fatal(err)
	}
	for _, name := range asked {
		if !strings.HasPrefix(name, "RELAYD_") {
			t.Errorf("parseFlags read %s; want only RELAYD_* twins", name)
		}
	}
	for _, given := range []string{"RELAYD_LISTEN", "RELAYD_SCOPE"} {
		if slices.Contains(asked, given) {
			t.Errorf("parseFlags read %s although its flag was given", given)
		}
	}
	for _, f := range allFlags(t) {
		read := slices.Contains(asked, envName(f.Name))
		if noTwin[f.Name] && read {
			t.Errorf("parseFlags read %s, the twin of an action", envName(f.Name))
		}
		if !noTwin[f.Name] && f.Name != "listen" && f.Name != "scope" && !read {
			t.Errorf("parseFlags never read %s", envName(f.Name))
		}
	}
}

func TestParseFlagsRefusesArguments(t *testing.T) {
	if _, _, err := parseFlags([]string{"serve"}, noEnv); err == nil || !strings.Contains(err.Error(), `"serve"`) {
		t.Fatalf("parseFlags(serve) = %v; want an error naming the argument", err)
	}
	if _, _, err := parseFlags([]string{"--no-such-flag"}, noEnv); err == nil {
		t.Fatal("parseFlags(--no-such-flag) = nil; want an error")
	}
	if _, _, err := parseFlags([]string{"--help"}, noEnv); !errors.Is(err, pflag.ErrHelp) {
		t.Fatalf("parseFlags(--help) = %v; want pflag.ErrHelp", err)
	}
}

func TestParseByteSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"65536", 65536, true},
		{"0", 0, true},
		{"7B", 7, true},
		{"7b", 7, true},
		// Binary units: powers of 1024.
		{"1KiB", 1 << 10, true},
		{"1MiB", 1 << 20, true},
		{"4GiB", 4 << 30, true},
		{"1kib", 1 << 10, true}, // units are case-insensitive
		{"1MIB", 1 << 20, true},
		{" 2 MiB ", 2 << 20, true},
		// Decimal (SI) units: powers of 1000, as they mean everywhere else.
		{"3kB", 3000, true},
		{"3KB", 3000, true},
		{"3kb", 3000, true},
		{"1MB", 1000000, true},
		{"1mb", 1000000, true},
		{"2GB", 2000000000, true},
		{"4611686018427387904", 1 << 62, true},
		{"4294967296GiB", 1 << 62, true},
		{"4611686018GB", 4611686018000000000, true},
		// A bare K, M or G could be either: refused, never guessed.
		{"1K", 0, false},
		{"1M", 0, false},
		{"2G", 0, false},
		{"2g", 0, false},
		{"", 0, false},
		{"   ", 0, false},
		{"MiB", 0, false},
		{"1TB", 0, false},
		{"5xb", 0, false},
		{"1.5MiB", 0, false},
		{"-1", 0, false},
		{"+1", 0, false},
		{"0x10", 0, false},
		{"4611686018427387905", 0, false}, // above the limit
		{"4294967297GiB", 0, false},       // overflows once multiplied
		{"4611686019GB", 0, false},        // likewise
		{"9223372036854775807KiB", 0, false},
		{"99999999999999999999", 0, false}, // not even an int64
	}
	for _, tt := range tests {
		got, err := parseByteSize(tt.in)
		if tt.ok {
			if err != nil || got != tt.want {
				t.Errorf("parseByteSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
			continue
		}
		if err == nil {
			t.Errorf("parseByteSize(%q) = %d; want an error", tt.in, got)
			continue
		}
		if got < 0 {
			t.Errorf("parseByteSize(%q) = %d; a size is never negative", tt.in, got)
		}
		if !strings.Contains(err.Error(), `"`+tt.in+`"`) {
			t.Errorf("parseByteSize(%q) error %q does not quote the value", tt.in, err)
		}
	}
}

// A size with a unit relayd does not take is refused with every unit it
// does take, so that the person can pick one.
// TestByteSizeString: --help and the flag set print sizes as a person
// writes them (1MiB, not 1048576), in a form Set reads back.
func TestByteSizeString(t *testing.T) {
	for _, tt := range []struct {
		n    int64
		want string
	}{
		{0, "0"}, {1, "1"}, {1023, "1023"}, {1024, "1KiB"}, {1 << 20, "1MiB"}, {64 << 20, "64MiB"},
		{3 << 30, "3GiB"}, {1536, "1536"}, {1000, "1kB"}, {100000, "100kB"}, {2000000, "2MB"},
		{5000000000, "5GB"}, {12345, "12345"}, {1 << 40, "1024GiB"},
	} {
		b := byteSize(tt.n)
		got := b.String()
		if got != tt.want {
			t.Errorf("byteSize(%d).String() = %q; want %q", tt.n, got, tt.want)
		}
		if back, err := parseByteSize(got); err != nil || back != tt.n {
			t.Errorf("parseByteSize(%q) = %d, %v; want %d back", got, back, err, tt.n)
		}
	}
	var stdout, stderr bytes.Buffer
	if err := run([]string{"--help"}, noEnv, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "(default 1MiB)") || strings.Contains(stdout.String(), "1048576") {
		t.Errorf("--help prints sizes raw; want (default 1MiB): %q", stdout.String())
	}
}

func TestParseByteSizeErrorListsUnits(t *testing.T) {
	units := []string{"B", "kB", "MB", "GB", "KiB", "MiB", "GiB"}
	for _, in := range []string{"1TB", "5xb", "2G", "1K", "1M", "3 KIBI"} {
		_, err := parseByteSize(in)
		if err == nil {
			t.Errorf("parseByteSize(%q) = nil error; want one", in)
			continue
		}
		for _, u := range units {
			if !strings.Contains(err.Error(), u) {
				t.Errorf("parseByteSize(%q) error %q; want it to list the unit %s", in, err, u)
			}
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*options)
		want   []string // substrings of the error; nil for valid
	}{
		{"defaults", func(*options) {}, nil},
		{"no grace", func(o *options) { o.termGrace = 0 }, nil},
		{"grace just below teardown", func(o *options) { o.termGrace = o.teardownTimeout - time.Millisecond }, nil},
		{"grace equal to teardown", func(o *options) { o.termGrace = o.teardownTimeout }, []string{"--term-grace", "--teardown-timeout"}},
		{"grace above teardown", func(o *options) { o.termGrace, o.teardownTimeout = 5*time.Second, 3*time.Second }, []string{"--term-grace", "5s", "3s"}},
		{"negative grace", func(o *options) { o.termGrace = -time.Second }, []string{"--term-grace"}},
		{"zero teardown", func(o *options) { o.termGrace, o.teardownTimeout = 0, 0 }, []string{"--teardown-timeout"}},
		{"zero connect timeout", func(o *options) { o.connectTimeout = 0 }, []string{"--connect-timeout"}},
		{"zero write timeout", func(o *options) { o.writeTimeout = 0 }, []string{"--write-timeout"}},
		{"peer timeout off", func(o *options) { o.peerTimeout = 0 }, nil},
		{"peer timeout 1s", func(o *options) { o.peerTimeout = time.Second }, nil},
		{"peer timeout 24h", func(o *options) { o.peerTimeout = 24 * time.Hour }, nil},
		{"negative peer timeout", func(o *options) { o.peerTimeout = -time.Second }, []string{"--peer-timeout", "negative", "0"}},
		{"sub-second peer timeout", func(o *options) { o.peerTimeout = 500 * time.Millisecond }, []string{"--peer-timeout", "500ms", "1s"}},
		{"peer timeout past a day", func(o *options) { o.peerTimeout = 25 * time.Hour }, []string{"--peer-timeout", "24h"}},
		{"tiny line limit", func(o *options) { o.maxLineBytes = 1023 }, []string{"--max-line-bytes"}},
		{"line limit 1KiB", func(o *options) { o.maxLineBytes = 1024 }, nil},
		{"no stdout", func(o *options) { o.maxStdoutBytes = 0 }, []string{"--max-stdout-bytes"}},
		{"no stderr", func(o *options) { o.maxStderrBytes = 0 }, []string{"--max-stderr-bytes"}},
		{"no stdin buffer", func(o *options) { o.maxStdinBuffer = 0 }, []string{"--max-stdin-buffer"}},
		{"stdin buffer past 1GiB", func(o *options) { o.maxStdinBuffer = 2 << 30 }, []string{"--max-stdin-buffer", "1GiB"}},
		{"no artifact", func(o *options) { o.artifactLimit = 0 }, []string{"--max-artifact-bytes"}},
		{"no file", func(o *options) { o.maxFileBytes = 0 }, []string{"--max-file-bytes"}},
		{"one-byte artifacts", func(o *options) { o.artifactLimit = 1 }, nil},
		{"scope process-group", func(o *options) { o.scope = "process-group" }, nil},
		{"scope cgroup", func(o *options) { o.scope = "cgroup" }, nil}, // refused later if the host has none: TestRunRefusesUnusableCgroup
		{"bad scope", func(o *options) { o.scope = "jail" }, []string{"--scope", `"jail"`, "auto", "cgroup", "process-group"}},
		{"scope is case-sensitive", func(o *options) { o.scope = "Auto" }, []string{"--scope"}},
		{"console logs", func(o *options) { o.logFormat = "console" }, nil},
		{"bad log format", func(o *options) { o.logFormat = "text" }, []string{"--log-format", `"text"`, "json", "console"}},
		{"bad log level", func(o *options) { o.logLevel = "trace" }, []string{"--log-level", `"trace"`, "debug", "info", "warn", "error"}},
	}
	for _, level := range []string{"debug", "info", "warn", "error"} {
		tests = append(tests, struct {
			name   string
			change func(*options)
			want   []string
		}{"log level " + level, func(o *options) { o.logLevel = level }, nil})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := defaultOptions()
			tt.change(&o)
			err := o.validate()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("validate() = %v; want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("validate() = nil; want an error with %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("validate() = %q; want it to contain %q", err, w)
				}
			}
		})
	}
}

// The flags of a Maka deployment (protocol section 9): --artifacts-layout
// relayd or maka, the latter with --artifacts-dir defaulting to Maka's
// relay's /logs/artifacts; --drop-capabilities parsed into capability
// numbers, names with or without CAP_ in any case, an unknown one refused
// by name; --require-netns an absolute path or net:[INODE]. Each through
// its twin too.
func TestMakaFlags(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		check func(options) bool
		err   []string // substrings of the error; nil for valid
	}{
		{"maka layout", []string{"--artifacts-layout", "maka"}, nil,
			func(o options) bool { return o.artifactsLayout == "maka" && o.artifactsDir == "/logs/artifacts" }, nil},
		{"maka layout, own dir", []string{"--artifacts-layout", "maka", "--artifacts-dir", "/a"}, nil,
			func(o options) bool { return o.artifactsDir == "/a" }, nil},
		{"maka layout by twin", nil, map[string]string{"RELAYD_ARTIFACTS_LAYOUT": "maka"},
			func(o options) bool { return o.artifactsLayout == "maka" && o.artifactsDir == "/logs/artifacts" }, nil},
		{"relayd layout has no default dir", []string{"--artifacts-layout", "relayd"}, nil,
			func(o options) bool { return o.artifactsDir == "" }, nil},
		{"bad layout", []string{"--artifacts-layout", "Maka"}, nil, nil, []string{"--artifacts-layout", `"Maka"`, "relayd or maka"}},
		{"bad layout by twin", nil, map[string]string{"RELAYD_ARTIFACTS_LAYOUT": "harbor"}, nil, []string{"RELAYD_ARTIFACTS_LAYOUT", `"harbor"`}},
		{"capabilities", []string{"--drop-capabilities", "NET_RAW, cap_net_admin,Net_Raw,SYS_ADMIN"}, nil,
			func(o options) bool { return slices.Equal(o.dropCaps, capList{12, 13, 21}) }, nil},
		{"no capabilities", []string{"--drop-capabilities", ""}, nil,
			func(o options) bool { return len(o.dropCaps) == 0 }, nil},
		{"unknown capability", []string{"--drop-capabilities", "NET_RAW,NET_ROW"}, nil, nil, []string{"--drop-capabilities", `"NET_ROW"`}},
		{"empty capability", []string{"--drop-capabilities", "NET_RAW,,NET_ADMIN"}, nil, nil, []string{"--drop-capabilities", "empty"}},
		{"unknown capability by twin", nil, map[string]string{"RELAYD_DROP_CAPABILITIES": "CAP_FLY"}, nil, []string{"RELAYD_DROP_CAPABILITIES", `"CAP_FLY"`}},
		{"netns path", []string{"--require-netns", "/run/netns/egress"}, nil,
			func(o options) bool { return o.requireNetns == "/run/netns/egress" }, nil},
		{"netns inode", []string{"--require-netns", "net:[4026532281]"}, nil,
			func(o options) bool { return o.requireNetns == "net:[4026532281]" }, nil},
		{"netns relative path", []string{"--require-netns", "ns/net"}, nil, nil, []string{"--require-netns", `"ns/net"`, "absolute"}},
		{"netns bad inode", []string{"--require-netns", "net:4026532281"}, nil, nil, []string{"--require-netns", "net:[INODE]"}},
		{"netns bad inode by twin", nil, map[string]string{"RELAYD_REQUIRE_NETNS": "net:[x]"}, nil, []string{"RELAYD_REQUIRE_NETNS", "net:[INODE]"}},
		{"umask 077", []string{"--subject-umask", "077"}, nil, func(o options) bool { return o.subjectUmask == 0o077 }, nil},
		{"umask 0", []string{"--subject-umask", "0"}, nil, func(o options) bool { return o.subjectUmask == 0 }, nil},
		{"umask 0027", []string{"--subject-umask", "0027"}, nil, func(o options) bool { return o.subjectUmask == 0o027 }, nil},
		{"umask by twin", nil, map[string]string{"RELAYD_SUBJECT_UMASK": "077"}, func(o options) bool { return o.subjectUmask == 0o077 }, nil},
		{"umask not octal", []string{"--subject-umask", "089"}, nil, nil, []string{"--subject-umask", `"089"`, "000 to 777"}},
		{"umask too large", []string{"--subject-umask", "1000"}, nil, nil, []string{"--subject-umask", `"1000"`, "000 to 777"}},
		{"umask negative", []string{"--subject-umask", "-1"}, nil, nil, []string{"--subject-umask", `"-1"`}},
		{"umask word", []string{"--subject-umask", "u=rwx"}, nil, nil, []string{"--subject-umask", `"u=rwx"`}},
		{"umask bad by twin", nil, map[string]string{"RELAYD_SUBJECT_UMASK": "999"}, nil, []string{"RELAYD_SUBJECT_UMASK", `"999"`}},
		{"limits", []string{"--default-limits", "nofile=1024, cpuSeconds=60"}, nil,
			func(o options) bool {
				return o.defaultLimits.limits["nofile"] == 1024 && o.defaultLimits.limits["cpuSeconds"] == 60
			}, nil},
		{"limit unknown", []string{"--default-limits", "nofile=64,memory=1"}, nil, nil, []string{"--default-limits", `"memory" is not a limit`}},
		{"limit not a number", []string{"--default-limits", "nofile=lots"}, nil, nil, []string{"--default-limits", `"lots"`}},
		{"limit zero", []string{"--default-limits", "fileBytes=0"}, nil, nil, []string{"--default-limits", "at least 1"}},
		{"limit nofile too low", []string{"--default-limits", "nofile=3"}, nil, nil, []string{"--default-limits", "at least 16"}},
		{"limits bad by twin", nil, map[string]string{"RELAYD_DEFAULT_LIMITS": "nofile"}, nil, []string{"RELAYD_DEFAULT_LIMITS", "name=value"}},
		{"any group", []string{"--allow-any-group"}, nil, func(o options) bool { return o.allowAnyGroup }, nil},
		{"any group by twin", nil, map[string]string{"RELAYD_ALLOW_ANY_GROUP": "1"}, func(o options) bool { return o.allowAnyGroup }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, _, err := parseFlags(tt.args, envOf(tt.env))
			if tt.err == nil {
				if err != nil {
					t.Fatalf("parseFlags(%q, %v) = %v; want nil", tt.args, tt.env, err)
				}
				if !tt.check(o) {
					t.Fatalf("parseFlags(%q, %v) = %+v; not what was asked", tt.args, tt.env, o)
				}
				return
			}
			if err == nil {
				t.Fatalf("parseFlags(%q, %v) = nil; want an error with %q", tt.args, tt.env, tt.err)
			}
			for _, w := range tt.err {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("parseFlags(%q, %v) = %q; want it to contain %q", tt.args, tt.env, err, w)
				}
			}
		})
	}
}

// A relayd whose subjects would escape the isolation asked of it refuses to
// start, with one line: --require-netns naming another namespace (both
// named), and MAKA_EVAL_EGRESS_REQUIRED=1 while relayd holds NET_RAW or
// NET_ADMIN (as root it does). Neither gets past the checks, so this test
// binary starts no reaper.
func TestRunRefusesEscapes(t *testing.T) {
	own, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Skip("no /proc/self/ns/net:", err)
	}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want []string
	}{
		{"another netns", []string{"--require-netns", "net:[1]"}, nil, []string{"--require-netns net:[1]", own, "not in the required net:[1]"}},
	}
	held, _, err := env.HeldCapabilities(env.EgressBypass)
	if err == nil && len(held) == 2 {
		tests = append(tests, struct {
			name string
			args []string
			env  map[string]string
			want []string
		}{"egress required", nil, map[string]string{"MAKA_EVAL_EGRESS_REQUIRED": "1"},
			[]string{"MAKA_EVAL_EGRESS_REQUIRED=1", "relayd holds NET_ADMIN, NET_RAW", "bypasses the Eval egress policy", "--drop-capabilities NET_ADMIN,NET_RAW"}})
	} else {
		t.Logf("the test does not hold NET_RAW and NET_ADMIN (%v, %v): MAKA_EVAL_EGRESS_REQUIRED not tried", held, err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vars := map[string]string{"RELAYD_TOKEN": "tok"}
			for k, v := range tt.env {
				vars[k] = v
			}
			var stdout, stderr bytes.Buffer
			err := run(append(tt.args, "--listen", "127.0.0.1:0", "--workspace", t.TempDir()), envOf(vars), &stdout, &stderr)
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != exitUsage {
				t.Fatalf("run(%q) = %v; want a usage error (exit %d)", tt.args, err, exitUsage)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("refusal %q; want one line", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("refusal %q; want it to name %q", err, w)
				}
			}
		})
	}
}

func TestLoadToken(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	withNewline := write("nl", "tok-123\n")
	crlf := write("crlf", "  tok-456 \r\n")
	empty := write("empty", "")
	blank := write("blank", " \n\t\n")
	big := write("big", strings.Repeat("x", 64<<10+1))

	tests := []struct {
		name    string
		file    string
		env     map[string]string
		want    string
		wantErr []string
	}{
		{"file with trailing newline", withNewline, nil, "tok-123", nil},
		{"file with surrounding space", crlf, nil, "tok-456", nil},
		{"file wins over RELAYD_TOKEN", withNewline, map[string]string{"RELAYD_TOKEN": "from-env"}, "tok-123", nil},
		{"empty file refused", empty, map[string]string{"RELAYD_TOKEN": "from-env"}, "", []string{"--token-file", empty, "empty"}},
		{"blank file refused", blank, nil, "", []string{"--token-file", "empty"}},
		{"missing file", filepath.Join(dir, "missing"), map[string]string{"RELAYD_TOKEN": "from-env"}, "", []string{"--token-file"}},
		{"file too large", big, nil, "", []string{"--token-file", "larger"}},
		{"RELAYD_TOKEN fallback", "", map[string]string{"RELAYD_TOKEN": "from-env"}, "from-env", nil},
		{"RELAYD_TOKEN trimmed", "", map[string]string{"RELAYD_TOKEN": " from-env\n"}, "from-env", nil},
		{"blank RELAYD_TOKEN", "", map[string]string{"RELAYD_TOKEN": "  "}, "", []string{"--token-file", "RELAYD_TOKEN"}},
		{"nothing", "", nil, "", []string{"no token", "--token-file", "RELAYD_TOKEN"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := loadToken(tt.file, envOf(tt.env))
			if tt.wantErr == nil {
				if err != nil || string(got) != tt.want {
					t.Fatalf("loadToken = %q, %v; want %q", got, err, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("loadToken = %q; want an error", got)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("loadToken error %q; want it to contain %q", err, w)
				}
			}
			if v := tt.env["RELAYD_TOKEN"]; strings.TrimSpace(v) != "" && strings.Contains(err.Error(), strings.TrimSpace(v)) {
				t.Fatalf("loadToken error %q shows the token", err)
			}
		})
	}
}

func TestRunVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"--version", "--listen", "127.0.0.1:0"}} {
		var stdout, stderr bytes.Buffer
		// No token anywhere: --version needs none, and must not listen.
		if err := run(args, noEnv, &stdout, &stderr); err != nil {
			t.Fatalf("run(%q) = %v; want nil", args, err)
		}
		if !strings.HasPrefix(stdout.String(), "relayd ") || !strings.Contains(stdout.String(), version) {
			t.Fatalf("run(%q) wrote %q to stdout; want \"relayd %s ...\"", args, stdout.String(), version)
		}
		if !strings.HasSuffix(stdout.String(), "\n") || strings.Count(stdout.String(), "\n") != 1 {
			t.Fatalf("run(%q) wrote %q; want one line", args, stdout.String())
		}
		if stderr.Len() != 0 {
			t.Fatalf("run(%q) wrote %q to stderr; want nothing", args, stderr.String())
		}
	}
}

func TestActionsHaveNoTwin(t *testing.T) {
	for name := range noTwin {
		twin := envName(name)
		for _, v := range []string{"true", "1", "0.1.0"} {
			o, _, err := parseFlags(nil, envOf(map[string]string{twin: v}))
			if err != nil {
				t.Errorf("%s=%s: %v; want it ignored", twin, v, err)
			}
			if !reflect.DeepEqual(o, defaultOptions()) {
				t.Errorf("%s=%s changed the options: %+v", twin, v, o)
			}
		}
	}
	// Not even through run: with RELAYD_VERSION set relayd goes on to start
	// (and here stops at the missing token) instead of printing its version.
	var stdout bytes.Buffer
	err := run(nil, envOf(map[string]string{"RELAYD_VERSION": "true"}), &stdout, &bytes.Buffer{})
	if err == nil || stdout.Len() != 0 {
		t.Fatalf("run with RELAYD_VERSION=true = %v, stdout %q; want it ignored (a token error)", err, stdout.String())
	}
}

func TestRunUsageErrors(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run([]string{"--scope", "jail"}, noEnv, &stdout, &stderr)
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != exitUsage {
		t.Fatalf("run(--scope jail) = %v; want an exitError with code %d", err, exitUsage)
	}
	if !strings.Contains(err.Error(), "--scope") || !strings.Contains(err.Error(), "--help") {
		t.Fatalf("run(--scope jail) = %q; want the flag named and --help pointed to", err)
	}
	if stdout.Len() != 0 {
		t.Fatalf("a usage error wrote %q to stdout", stdout.String())
	}

	err = run(nil, noEnv, &stdout, &stderr) // no token
	if !errors.As(err, &ee) || ee.code != exitUsage || !strings.Contains(err.Error(), "token") {
		t.Fatalf("run without a token = %v; want a usage error about the token", err)
	}

	stdout.Reset()
	if err := run([]string{"--help"}, noEnv, &stdout, &stderr); err != nil {
		t.Fatalf("run(--help) = %v; want nil", err)
	}
	for _, f := range allFlags(t) {
		if !strings.Contains(stdout.String(), "--"+f.Name) {
			t.Errorf("--help does not list --%s", f.Name)
		}
	}
	if !strings.Contains(stdout.String(), "RELAYD_TERM_GRACE") {
		t.Errorf("--help does not explain the environment twins: %q", stdout.String())
	}
}

// A cgroup that relayd was told to use and cannot use is refused at startup
// with the reason, not silently replaced by process-group: --scope cgroup on
// a host without a usable cgroup v2 hierarchy, and an explicit --cgroup-root
// that is no usable cgroup v2 directory, even with --scope auto (without
// --cgroup-root, auto falls back). The hierarchy is made unusable by
// pointing --cgroup-root at a plain directory. These are the only tests here
// that get past the token: run creates relayd's reaper in this test binary,
// which therefore starts no child of its own.
func TestRunRefusesUnusableCgroup(t *testing.T) {
	tests := []struct {
		scope string
		want  []string // beside the root's path
	}{
		{"cgroup", []string{"--scope cgroup"}},
		{"auto", []string{"--cgroup-root", "not a cgroup v2 directory", "process-group"}},
	}
	for _, tt := range tests {
		t.Run(tt.scope, func(t *testing.T) {
			root := t.TempDir()
			// Its own state directory and socket: the machine's /run/relayd
			// may hold records of another relayd, whose leftovers run would
			// settle (and log from several goroutines) before it refuses.
			state := t.TempDir()
			args := []string{"--scope", tt.scope, "--cgroup-root", root, "--listen", "127.0.0.1:0", "--workspace", t.TempDir(),
				"--state-dir", state, "--socket", filepath.Join(state, "relayd.sock")}
			done := make(chan error, 1)
			go func() {
				var stdout, stderr bytes.Buffer
				done <- run(args, envOf(map[string]string{"RELAYD_TOKEN": "tok"}), &stdout, &stderr)
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatalf("run(%q) is still running after 10s; want it to refuse to start", args)
			}
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != exitUsage {
				t.Fatalf("run(%q) = %v; want a usage error", args, err)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("refusal %q; want one line", err)
			}
			for _, w := range append(tt.want, root) {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("refusal %q; want it to name %q", err, w)
				}
			}
		})
	}
}

// A directory flag that names no usable directory is refused at startup
// with one line: the flag, the path, what is wrong, and what to do.
func TestRunRefusesBadDirectories(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "nope")
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"missing workspace", []string{"--workspace", missing},
			"--workspace " + missing + ": no such directory (create it, or point --workspace at an existing directory)"},
		{"workspace is a file", []string{"--workspace", file},
			"--workspace " + file + ": not a directory (point --workspace at a directory)"},
		{"missing artifacts dir", []string{"--workspace", dir, "--artifacts-dir", missing},
			"--artifacts-dir " + missing + ": no such directory (create it, or point --artifacts-dir at an existing directory)"},
		{"artifacts dir is a file", []string{"--workspace", dir, "--artifacts-dir", file},
			"--artifacts-dir " + file + ": not a directory (point --artifacts-dir at a directory)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(append(tt.args, "--listen", "127.0.0.1:0"), envOf(map[string]string{"RELAYD_TOKEN": "tok"}), &stdout, &stderr)
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != exitUsage {
				t.Fatalf("run(%q) = %v; want a usage error (exit %d)", tt.args, err, exitUsage)
			}
			if err.Error() != tt.want {
				t.Fatalf("run(%q) = %q; want %q", tt.args, err, tt.want)
			}
		})
	}
}

// Protocol section 9's token-file rule. With --subject-user, a file that
// user could read (or write) is refused, group bits and supplementary groups
// included: a 0640 root:nogroup file is readable by nobody, whose group is
// nogroup. Without it a file other users can read only earns a warning
// (Kubernetes and Docker secrets are 0644 or 0444); one every user can write
// is refused. The refusal names the file, the user and the fix, never the
// token.
func TestCheckTokenFile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files away and to run subjects as nobody")
	}
	nobody, err := env.SubjectUser("nobody", false)
	if err != nil {
		t.Skip("no user nobody here:", err)
	}
	open := t.TempDir() // searchable by everyone, up to /tmp
	for _, d := range []string{open, filepath.Dir(open)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	closed := filepath.Join(open, "closed")
	if err := os.Mkdir(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	mk := func(dir, name string, mode os.FileMode, gid int) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("secret-token\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, 0, gid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const nogroup = 65534
	tests := []struct {
		name     string
		file     string
		subject  *syscall.Credential
		wantErr  []string // nil: accepted
		wantWarn bool
	}{
		{"0600, no subject user", mk(open, "a", 0o600, 0), nil, nil, false},
		{"0644, no subject user: a warning", mk(open, "b", 0o644, 0), nil, nil, true},
		{"0444, no subject user: a warning", mk(open, "c", 0o444, 0), nil, nil, true},
		{"0640, no subject user: a warning", mk(open, "d", 0o640, nogroup), nil, nil, true},
		{"0666, no subject user: refused", mk(open, "e", 0o666, 0), nil, []string{"written by every user", "0666", "chmod 600"}, false},
		{"0640 root:nogroup, subject nobody", mk(open, "f", 0o640, nogroup), nobody,
			[]string{"--subject-user nobody could read it", "its group, gid 65534", "chmod 600"}, false},
		{"0644 root:root, subject nobody", mk(open, "g", 0o644, 0), nobody, []string{"--subject-user nobody could read it", "every user"}, false},
		{"0620 root:nogroup, subject nobody", mk(open, "h", 0o620, nogroup), nobody, []string{"--subject-user nobody could write it"}, false},
		{"0640 root:root, subject nobody", mk(open, "i", 0o640, 0), nobody, nil, false},
		{"0600 root:nogroup, subject nobody", mk(open, "j", 0o600, nogroup), nobody, nil, false},
		{"0644 in a 0700 directory, subject nobody", mk(closed, "k", 0o644, 0), nobody, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			name := ""
			if tt.subject != nil {
				name = "nobody"
			}
			err := checkTokenFile(tt.file, name, tt.subject, zerolog.New(&logs))
			if tt.wantErr == nil && err != nil {
				t.Fatalf("checkTokenFile = %v; want it accepted", err)
			}
			if tt.wantErr != nil {
				if err == nil {
					t.Fatal("checkTokenFile = nil; want a refusal")
				}
				for _, w := range append(tt.wantErr, tt.file) {
					if !strings.Contains(err.Error(), w) {
						t.Fatalf("checkTokenFile = %q; want it to contain %q", err, w)
					}
				}
			}
			if got := strings.Contains(logs.String(), `"level":"warn"`); got != tt.wantWarn {
				t.Fatalf("warning logged: %v (%q); want %v", got, logs.String(), tt.wantWarn)
			}
			if strings.Contains(logs.String(), "secret-token") || err != nil && strings.Contains(err.Error(), "secret-token") {
				t.Fatal("the token appears in a log or an error")
			}
		})
	}
}

// docs/deploy.md's flags table, what an operator reads, names every flag
// of the flag set with its default, and no flag relayd lacks.
func TestDeployDocListsEveryFlag(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]string{} // flag → its default cell
	for _, line := range strings.Split(string(b), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`--") {
			continue
		}
		name := strings.Trim(strings.TrimSpace(cells[1]), "`-")
		documented[name] = strings.Trim(strings.TrimSpace(cells[2]), "`")
	}
	_, fs, err := parseFlags(nil, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	fs.VisitAll(func(f *pflag.Flag) {
		def, ok := documented[f.Name]
		switch {
		case !ok:
			t.Errorf("docs/deploy.md's flags table lacks --%s", f.Name)
		case f.DefValue != "" && f.DefValue != "false" && def != f.DefValue:
			t.Errorf("docs/deploy.md: --%s defaults to %q; the flag set says %q", f.Name, def, f.DefValue)
		}
		delete(documented, f.Name)
	})
	for name := range documented {
		t.Errorf("docs/deploy.md's flags table names --%s, which relayd lacks", name)
	}
}
