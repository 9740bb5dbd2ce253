package protocol

import (
	"reflect"
	"strings"
	"testing"
)

const testToken = "0123456789abcdef0123456789abcdef"

// decodeExecute decodes line and validates it as an execute request.
func decodeExecute(t *testing.T, line string) (*Execute, *Error) {
	t.Helper()
	m, e := Decode([]byte(line))
	if e != nil {
		t.Fatalf("Decode(%s): got error %v; want none", line, e)
	}
	return m.Execute()
}

func TestExecuteValid(t *testing.T) {
	tests := []struct {
		name string
		line string
		want Execute
	}{
		{
			name: "minimal",
			line: `{"kind":"execute","command":"/bin/true"}`,
			want: Execute{Command: "/bin/true", Args: []string{}, Environment: map[string]string{}, Credentials: map[string]string{}, CaptureStdout: true},
		},
		{
			name: "protocol example",
			line: `{"token":"T","kind":"execute","id":7,"command":"/usr/local/bin/agent","args":["--task","solve"],` +
				`"environment":{"LANG":"C.UTF-8"},"credentials":{"OPENAI_API_KEY":"sk-..."},` +
				`"resultToken":"0123456789abcdef0123456789abcdef","captureStdout":true,"cwd":"/workspace","timeoutMs":1800000}`,
			want: Execute{
				Command: "/usr/local/bin/agent", Args: []string{"--task", "solve"},
				Environment: map[string]string{"LANG": "C.UTF-8"}, Credentials: map[string]string{"OPENAI_API_KEY": "sk-..."},
				ResultToken: testToken, CaptureStdout: true, Cwd: "/workspace", TimeoutMs: 1800000,
			},
		},
		{
			name: "nulls are absent",
			line: `{"command":"x","args":null,"environment":null,"credentials":null,"resultToken":null,"captureStdout":null,"cwd":null,"timeoutMs":null}`,
			want: Execute{Command: "x", Args: []string{}, Environment: map[string]string{}, Credentials: map[string]string{}, CaptureStdout: true},
		},
		{
			name: "empty containers",
			line: `{"command":"x","args":[],"environment":{},"credentials":{}}`,
			want: Execute{Command: "x", Args: []string{}, Environment: map[string]string{}, Credentials: map[string]string{}, CaptureStdout: true},
		},
		{
			name: "captureStdout false, relative cwd, empty arg",
			line: `{"command":"x","args":[""],"captureStdout":false,"cwd":"sub/dir"}`,
			want: Execute{Command: "x", Args: []string{""}, Environment: map[string]string{}, Credentials: map[string]string{}, Cwd: "sub/dir"},
		},
		{
			name: "names of every allowed shape, empty values",
			line: `{"command":"x","environment":{"_":"","a_1":"v","Z9":"=x"},"credentials":{"_KEY":""}}`,
			want: Execute{Command: "x", Args: []string{}, Environment: map[string]string{"_": "", "a_1": "v", "Z9": "=x"},
				Credentials: map[string]string{"_KEY": ""}, CaptureStdout: true},
		},
		{
			name: "unknown fields ignored, and named",
			line: `{"command":"x","future":[1,{"a":null}],"Command":5}`,
			want: Execute{Command: "x", Args: []string{}, Environment: map[string]string{}, Credentials: map[string]string{}, CaptureStdout: true,
				Ignored: []string{"future", "Command"}},
		},
		{
			name: "extensions of section 4.5",
			line: `{"command":"x","captureStderr":true,"stream":true,"onExit":"settle-on-failure","detachMs":1e4}`,
			want: Execute{Command: "x", Args: []string{}, Environment: map[string]string{}, Credentials: map[string]string{}, CaptureStdout: true,
				CaptureStderr: true, Stream: true, OnExit: OnExitSettleOnFailure, DetachMs: 10000},
		},
		{
			name: "extensions null or false",
			line: `{"command":"x","captureStderr":false,"stream":null,"onExit":null,"detachMs":null}`,
			want: Execute{Command: "x", Args: []string{}, Environment: map[string]string{}, Credentials: map[string]string{}, CaptureStdout: true},
		},
		{
			name: "output limits",
			line: `{"command":"x","maxOutputBytes":4096,"outputKeep":"tail"}`,
			want: Execute{Command: "x", Args: []string{}, Environment: map[string]string{}, Credentials: map[string]string{}, CaptureStdout: true,
				MaxOutputBytes: 4096, OutputKeep: OutputKeepTail},
		},
		{
			name: "onExit settle",
			line: `{"command":"x","onExit":"settle"}`,
			want: Execute{Command: "x", Args: []string{}, Environment: map[string]string{}, Credentials: map[string]string{}, CaptureStdout: true, OnExit: OnExitSettle},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.want.OnExit == "" {
				tt.want.OnExit = OnExitLeave
			}
			got, e := decodeExecute(t, tt.line)
			if e != nil {
				t.Fatalf("Execute: got error %v; want none", e)
			}
			if !reflect.DeepEqual(*got, tt.want) {
				t.Errorf("Execute: got %+v; want %+v", *got, tt.want)
			}
		})
	}
}

func TestExecuteTimeoutMs(t *testing.T) {
	tests := []struct {
		lit     string
		want    int64
		wantErr string
	}{
		{lit: `1`, want: 1},
		{lit: `1000`, want: 1000},
		{lit: `1e3`, want: 1000},
		{lit: `1E+3`, want: 1000},
		{lit: `1000.0`, want: 1000},
		{lit: `10000e-1`, want: 1000},
		{lit: `0.5e1`, want: 5},
		{lit: `1.000e3`, want: 1000},
		{lit: `9223372036854`, want: 9223372036854},
		{lit: `9.223372036854e12`, want: 9223372036854},
		{lit: `0`, wantErr: `execute: "timeoutMs" must be an integer of at least 1`},
		{lit: `-0`, wantErr: `execute: "timeoutMs" must be an integer of at least 1`},
		{lit: `0.0e5`, wantErr: `execute: "timeoutMs" must be an integer of at least 1`},
		{lit: `-5`, wantErr: `execute: "timeoutMs" must be an integer of at least 1`},
		{lit: `-1e400`, wantErr: `execute: "timeoutMs" must be an integer of at least 1`},
		{lit: `1.5`, wantErr: `execute: "timeoutMs" must be an integer of at least 1`},
		{lit: `0.1`, wantErr: `execute: "timeoutMs" must be an integer of at least 1`},
		{lit: `1e-400`, wantErr: `execute: "timeoutMs" must be an integer of at least 1`},
		{lit: `10001e-1`, wantErr: `execute: "timeoutMs" must be an integer of at least 1`},
		{lit: `"1000"`, wantErr: `execute: "timeoutMs" must be an integer of at least 1`},
		{lit: `true`, wantErr: `execute: "timeoutMs" must be an integer of at least 1`},
		{lit: `[1000]`, wantErr: `execute: "timeoutMs" must be an integer of at least 1`},
		{lit: `9223372036855`, wantErr: `execute: "timeoutMs" must be at most 9223372036854 (the longest duration relayd can wait)`},
		{lit: `1e13`, wantErr: `execute: "timeoutMs" must be at most 9223372036854 (the longest duration relayd can wait)`},
		{lit: `1e400`, wantErr: `execute: "timeoutMs" must be at most 9223372036854 (the longest duration relayd can wait)`},
		{lit: `1e999999999999999999999`, wantErr: `execute: "timeoutMs" must be at most 9223372036854 (the longest duration relayd can wait)`},
		{lit: `99999999999999999999999999`, wantErr: `execute: "timeoutMs" must be at most 9223372036854 (the longest duration relayd can wait)`},
	}
	for _, tt := range tests {
		t.Run(tt.lit, func(t *testing.T) {
			got, e := decodeExecute(t, `{"command":"x","timeoutMs":`+tt.lit+`}`)
			if tt.wantErr != "" {
				if e == nil {
					t.Fatalf("Execute: got TimeoutMs %d; want error %q", got.TimeoutMs, tt.wantErr)
				}
				if e.Category != CatBadRequest || e.Message != tt.wantErr {
					t.Errorf("Execute: got %q, %q; want %q, %q", e.Category, e.Message, CatBadRequest, tt.wantErr)
				}
				return
			}
			if e != nil {
				t.Fatalf("Execute: got error %v; want TimeoutMs %d", e, tt.want)
			}
			if got.TimeoutMs != tt.want {
				t.Errorf("TimeoutMs: got %d; want %d", got.TimeoutMs, tt.want)
			}
		})
	}
}

func TestExecuteInvalid(t *testing.T) {
	tests := []struct {
		name string
		line string
		want string
	}{
		// the extensions of section 4.5, after every field of 4.2
		{"captureStderr string", `{"command":"x","captureStderr":"yes"}`, `execute: "captureStderr" must be true or false`},
		{"stream number", `{"command":"x","stream":1}`, `execute: "stream" must be true or false`},
		{"onExit unknown", `{"command":"x","onExit":"kill-everything"}`, `execute: "onExit" must be "leave", "settle" or "settle-on-failure"`},
		{"onExit case", `{"command":"x","onExit":"Settle"}`, `execute: "onExit" must be "leave", "settle" or "settle-on-failure"`},
		{"onExit number", `{"command":"x","onExit":2}`, `execute: "onExit" must be "leave", "settle" or "settle-on-failure"`},
		{"detachMs zero", `{"command":"x","detachMs":0}`, `execute: "detachMs" must be an integer of at least 1`},
		{"maxOutputBytes zero", `{"command":"x","maxOutputBytes":0}`, `execute: "maxOutputBytes" must be an integer of at least 1`},
		{"maxOutputBytes string", `{"command":"x","maxOutputBytes":"10"}`, `execute: "maxOutputBytes" must be an integer of at least 1`},
		{"maxOutputBytes fraction", `{"command":"x","maxOutputBytes":1.5}`, `execute: "maxOutputBytes" must be an integer of at least 1`},
		{"outputKeep other", `{"command":"x","outputKeep":"middle"}`, `execute: "outputKeep" must be "head" or "tail"`},
		{"detachMs negative", `{"command":"x","detachMs":-5}`, `execute: "detachMs" must be an integer of at least 1`},
		{"detachMs fraction", `{"command":"x","detachMs":1.5}`, `execute: "detachMs" must be an integer of at least 1`},
		{"detachMs string", `{"command":"x","detachMs":"5000"}`, `execute: "detachMs" must be an integer of at least 1`},
		{"detachMs huge", `{"command":"x","detachMs":1e20}`, `execute: "detachMs" must be at most 9223372036854 (the longest duration relayd can wait)`},
		{"timeoutMs before detachMs", `{"command":"x","detachMs":0,"timeoutMs":0}`, `execute: "timeoutMs" must be an integer of at least 1`},

		// command
		{"command absent", `{"kind":"execute"}`, `execute: "command" must be a non-empty string`},
		{"command null", `{"command":null}`, `execute: "command" must be a non-empty string`},
		{"command empty", `{"command":""}`, `execute: "command" must be a non-empty string`},
		{"command number", `{"command":7}`, `execute: "command" must be a non-empty string`},
		{"command array", `{"command":["/bin/sh"]}`, `execute: "command" must be a non-empty string`},
		{"command NUL", `{"command":"/bin/true\u0000"}`, `execute: "command" holds a NUL byte`},

		// args
		{"args string", `{"command":"x","args":"-v"}`, `execute: "args" must be an array of strings`},
		{"args object", `{"command":"x","args":{}}`, `execute: "args" must be an array of strings`},
		{"args number item", `{"command":"x","args":["a",1]}`, `execute: "args"[1] must be a string`},
		{"args null item", `{"command":"x","args":[null]}`, `execute: "args"[0] must be a string`},
		{"args NUL", `{"command":"x","args":["a","b","c\u0000d"]}`, `execute: "args"[2] holds a NUL byte`},

		// environment
		{"environment array", `{"command":"x","environment":["A=1"]}`, `execute: "environment" must be an object of strings`},
		{"environment string", `{"command":"x","environment":"A=1"}`, `execute: "environment" must be an object of strings`},
		{"environment bad name", `{"command":"x","environment":{"1BAD":"v"}}`,
			`execute: "environment" name "1BAD" is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)`},
		{"environment empty name", `{"command":"x","environment":{"":"v"}}`,
			`execute: "environment" name "" is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)`},
		{"environment name with =", `{"command":"x","environment":{"A=B":"v"}}`,
			`execute: "environment" name "A=B" is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)`},
		{"environment name with NUL", `{"command":"x","environment":{"A\u0000":"v"}}`,
			`execute: "environment" name "A\x00" is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)`},
		{"environment long name shortened", `{"command":"x","environment":{"-` + strings.Repeat("a", 100) + `":"v"}}`,
			`execute: "environment" name "-` + strings.Repeat("a", 63) + `"... is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)`},
		{"environment value number", `{"command":"x","environment":{"LANG":1}}`, `execute: "environment" value of LANG must be a string`},
		{"environment value null", `{"command":"x","environment":{"LANG":null}}`, `execute: "environment" value of LANG must be a string`},
		{"environment value NUL", `{"command":"x","environment":{"LANG":"C\u0000"}}`, `execute: "environment" value of LANG holds a NUL byte`},
		{"environment reserved", `{"command":"x","environment":{"MAKA_EVAL_RESULT_TOKEN":"t"}}`,
			`execute: "environment" must not set MAKA_EVAL_RESULT_TOKEN: relayd sets it from "resultToken"`},
		{"environment first name in sorted order", `{"command":"x","environment":{"b-":"v","a-":"v"}}`,
			`execute: "environment" name "a-" is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)`},

		// credentials
		{"credentials array", `{"command":"x","credentials":[]}`, `execute: "credentials" must be an object of strings`},
		{"credentials bad name", `{"command":"x","credentials":{"OPENAI-KEY":"sk"}}`,
			`execute: "credentials" name "OPENAI-KEY" is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)`},
		{"credentials value number", `{"command":"x","credentials":{"KEY":5}}`, `execute: "credentials" value of KEY must be a string`},
		{"credentials value NUL", `{"command":"x","credentials":{"KEY":"sk-\u0000"}}`, `execute: "credentials" value of KEY holds a NUL byte`},
		{"credentials reserved", `{"command":"x","credentials":{"MAKA_EVAL_RESULT_TOKEN":"t"}}`,
			`execute: "credentials" must not set MAKA_EVAL_RESULT_TOKEN: relayd sets it from "resultToken"`},
		{"environment RELAYD_", `{"command":"x","environment":{"RELAYD_TOKEN":"t"}}`,
			`execute: "environment" must not set RELAYD_TOKEN: names starting with RELAYD_ are relayd's own configuration`},
		{"credentials RELAYD_", `{"command":"x","credentials":{"RELAYD_TERM_GRACE":"1h"}}`,
			`execute: "credentials" must not set RELAYD_TERM_GRACE: names starting with RELAYD_ are relayd's own configuration`},
		{"bare RELAYD_", `{"command":"x","environment":{"RELAYD_":"t"}}`,
			`execute: "environment" must not set RELAYD_: names starting with RELAYD_ are relayd's own configuration`},
		{"shared name", `{"command":"x","environment":{"OPENAI_API_KEY":"a"},"credentials":{"OPENAI_API_KEY":"sk-secret"}}`,
			`execute: "environment" and "credentials" both set OPENAI_API_KEY`},

		// resultToken
		{"resultToken upper case", `{"command":"x","resultToken":"0123456789ABCDEF0123456789ABCDEF"}`, `execute: "resultToken" must be exactly 32 lower-case hex digits`},
		{"resultToken short", `{"command":"x","resultToken":"0123456789abcdef0123456789abcde"}`, `execute: "resultToken" must be exactly 32 lower-case hex digits`},
		{"resultToken long", `{"command":"x","resultToken":"0123456789abcdef0123456789abcdef0"}`, `execute: "resultToken" must be exactly 32 lower-case hex digits`},
		{"resultToken not hex", `{"command":"x","resultToken":"0123456789abcdef0123456789abcdeg"}`, `execute: "resultToken" must be exactly 32 lower-case hex digits`},
		{"resultToken empty", `{"command":"x","resultToken":""}`, `execute: "resultToken" must be exactly 32 lower-case hex digits`},
		{"resultToken number", `{"command":"x","resultToken":12345678901234567890123456789012}`, `execute: "resultToken" must be exactly 32 lower-case hex digits`},

		// captureStdout
		{"captureStdout string", `{"command":"x","captureStdout":"false"}`, `execute: "captureStdout" must be true or false`},
		{"captureStdout number", `{"command":"x","captureStdout":0}`, `execute: "captureStdout" must be true or false`},

		// cwd
		{"cwd number", `{"command":"x","cwd":1}`, `execute: "cwd" must be a string`},
		{"cwd NUL", `{"command":"x","cwd":"/tmp\u0000"}`, `execute: "cwd" holds a NUL byte`},

		// timeoutMs: see TestExecuteTimeoutMs
		{"timeoutMs fraction", `{"command":"x","timeoutMs":1.5}`, `execute: "timeoutMs" must be an integer of at least 1`},

		// order: the first field of the table wins
		{"command before args", `{"args":5,"command":""}`, `execute: "command" must be a non-empty string`},
		{"args before environment", `{"command":"x","environment":5,"args":5}`, `execute: "args" must be an array of strings`},
		{"environment before credentials", `{"command":"x","credentials":5,"environment":5}`, `execute: "environment" must be an object of strings`},
		{"credentials before resultToken", `{"command":"x","resultToken":5,"credentials":5}`, `execute: "credentials" must be an object of strings`},
		{"resultToken before captureStdout", `{"command":"x","captureStdout":5,"resultToken":5}`, `execute: "resultToken" must be exactly 32 lower-case hex digits`},
		{"captureStdout before cwd", `{"command":"x","cwd":5,"captureStdout":5}`, `execute: "captureStdout" must be true or false`},
		{"cwd before timeoutMs", `{"command":"x","timeoutMs":0,"cwd":5}`, `execute: "cwd" must be a string`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, e := decodeExecute(t, tt.line)
			if e == nil {
				t.Fatalf("Execute: got %+v; want error %q", got, tt.want)
			}
			if got != nil {
				t.Errorf("Execute on error: got %+v; want nil", got)
			}
			if e.Category != CatBadRequest {
				t.Errorf("category: got %q; want %q", e.Category, CatBadRequest)
			}
			if e.Message != tt.want {
				t.Errorf("message: got %q; want %q", e.Message, tt.want)
			}
		})
	}
}

// TestExecuteNeverEchoesValues checks that no error message quotes a value.
func TestExecuteNeverEchoesValues(t *testing.T) {
	const secret = "sk-SECRETVALUE"
	lines := []string{
		`{"command":"x","credentials":{"KEY":"` + secret + `\u0000"}}`,
		`{"command":"x","environment":{"KEY":"` + secret + `\u0000"}}`,
		`{"command":"x","environment":{"KEY":"a"},"credentials":{"KEY":"` + secret + `"}}`,
		`{"command":"x","credentials":{"MAKA_EVAL_RESULT_TOKEN":"` + secret + `"}}`,
		`{"command":"x","resultToken":"` + secret + `"}`,
		`{"command":"x","cwd":"` + secret + `\u0000"}`,
		`{"command":"x","args":["` + secret + `\u0000"]}`,
		`{"command":"` + secret + `\u0000"}`,
		`{"command":"x","timeoutMs":"` + secret + `"}`,
		`{"command":"x","captureStdout":"` + secret + `"}`,
	}
	for _, line := range lines {
		_, e := decodeExecute(t, line)
		if e == nil {
			t.Errorf("Execute(%s): got no error; want one", line)
			continue
		}
		if strings.Contains(e.Message, "SECRET") {
			t.Errorf("Execute(%s): got message %q; want one without the value", line, e.Message)
		}
	}
}

func TestExecuteIgnoresBadIDAndKind(t *testing.T) {
	m, e := Decode([]byte(`{"kind":"other","id":{},"command":"x"}`))
	if e == nil || e.Category != CatBadRequest {
		t.Fatalf("Decode: got %v; want a bad-request error", e)
	}
	if _, e := m.Execute(); e != nil {
		t.Errorf("Execute: got %v; want none (Execute looks at execute's fields only)", e)
	}
}

func TestAttach(t *testing.T) {
	tests := []struct {
		line, want, wantErr string
	}{
		{line: `{"kind":"attach","execution":"x-1"}`, want: "x-1"},
		{line: `{"kind":"attach"}`, wantErr: `attach: "execution" must be`},
		{line: `{"kind":"attach","execution":""}`, wantErr: `attach: "execution" must be`},
		{line: `{"kind":"attach","execution":7}`, wantErr: `attach: "execution" must be`},
		{line: `{"kind":"attach","execution":"` + strings.Repeat("x", MaxExecutionName+1) + `"}`, wantErr: `attach: "execution" must be`},
	}
	for _, tt := range tests {
		m, e := Decode([]byte(tt.line))
		if e != nil {
			t.Fatalf("Decode(%s): %v", tt.line, e)
		}
		got, e := m.Attach()
		switch {
		case tt.wantErr == "" && (e != nil || got != tt.want):
			t.Errorf("Attach(%s): got %q, %v; want %q", tt.line, got, e, tt.want)
		case tt.wantErr != "" && (e == nil || e.Category != CatBadRequest || !strings.HasPrefix(e.Message, tt.wantErr)):
			t.Errorf("Attach(%s): got %q, %v; want a bad-request starting %q", tt.line, got, e, tt.wantErr)
		}
	}
}

// A session's command takes stream, stdin and input as any execute does
// (section 4.7: "input and stdin feed the command"), NUL bytes included:
// what a pty session cannot take is refused where the session is known.
func TestSessionCommandStreamStdin(t *testing.T) {
	x, e := decodeExecute(t, `{"kind":"execute","session":"s-1","script":"cat","stream":true,"stdin":true,"input":"AAE=","inputEncoding":"base64"}`)
	if e != nil {
		t.Fatalf("got %v; want a session's execute with stream, stdin and input", e)
	}
	if !x.Stream || !x.Stdin || !x.HasInput || string(x.Input) != "\x00\x01" || x.Session != "s-1" {
		t.Fatalf("got %+v", x)
	}
}
