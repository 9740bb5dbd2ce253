package protocol

import (
	"encoding/json"
	"testing"
)

func TestDiagnosticJSON(t *testing.T) {
	tests := []struct {
		name string
		d    Diagnostic
		want string
	}{
		{"none", NoneDiagnostic(), `{"category":"none"}`},
		{"zero value is none", Diagnostic{}, `{"category":"none"}`},
		{"none never counted", Diagnostic{Category: DiagNone, Bytes: 3, SHA256: "x", Counted: true}, `{"category":"none"}`},
		{"empty", EmptyDiagnostic(DiagScopeUnavailable),
			`{"category":"execution-scope-unavailable","bytes":0,"sha256":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}`},
		{"empty missing", EmptyDiagnostic(DiagMissing),
			`{"category":"result-frame-missing","bytes":0,"sha256":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}`},
		{"counted", counted(DiagUnstructured, "abc"),
			`{"category":"unstructured-output","bytes":3,"sha256":"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"}`},
		{"not counted", Diagnostic{Category: DiagInvalid}, `{"category":"result-frame-invalid"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.d)
			if err != nil {
				t.Fatalf("Marshal: got error %v; want none", err)
			}
			if string(b) != tt.want {
				t.Errorf("Marshal: got %s; want %s", b, tt.want)
			}
			var back Diagnostic
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatalf("Unmarshal(%s): got error %v; want none", b, err)
			}
			again, _ := json.Marshal(back)
			if string(again) != tt.want {
				t.Errorf("round trip: got %s; want %s", again, tt.want)
			}
		})
	}
}

func TestDiagnosticUnmarshal(t *testing.T) {
	tests := []struct {
		in      string
		want    Diagnostic
		wantErr bool
	}{
		{in: `{"category":"none"}`, want: NoneDiagnostic()},
		{in: `{"category":"result-frame-missing","bytes":0,"sha256":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}`, want: EmptyDiagnostic(DiagMissing)},
		{in: `{"category":"none","extra":1}`, want: NoneDiagnostic()},
		{in: `{}`, wantErr: true},
		{in: `{"category":"x","bytes":1}`, wantErr: true},
		{in: `{"category":"x","sha256":"ab"}`, wantErr: true},
		{in: `{"category":5}`, wantErr: true},
		{in: `[]`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			var d Diagnostic
			err := json.Unmarshal([]byte(tt.in), &d)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Unmarshal: got error %v; want error: %v", err, tt.wantErr)
			}
			if err == nil && d != tt.want {
				t.Errorf("Unmarshal: got %+v; want %+v", d, tt.want)
			}
		})
	}
}

func TestReplyJSON(t *testing.T) {
	truncated := false
	tests := []struct {
		name  string
		reply any
		want  string
	}{
		{
			"ready",
			Ready{Token: "T", Kind: "ready", Instruction: "", Cwd: "/workspace", Protocol: Version, Version: "0.1.0", Scope: "cgroup"},
			`{"token":"T","kind":"ready","instruction":"","cwd":"/workspace","protocol":1,"version":"0.1.0","scope":"cgroup"}`,
		},
		{
			"ready before authentication, with id",
			Ready{Kind: "ready", ID: json.RawMessage(`"p1"`), Cwd: "/", Protocol: Version, Version: "0.1.0", Scope: "process-group"},
			`{"kind":"ready","id":"p1","instruction":"","cwd":"/","protocol":1,"version":"0.1.0","scope":"process-group"}`,
		},
		{
			"executed, carrier mode",
			Executed{Token: "T", Kind: "executed", ID: json.RawMessage(`7`), Termination: Exited, ExitCode: 0,
				Stdout: `{"kind":"settled","status":"completed"}`, Diagnostic: NoneDiagnostic(), Execution: "x-1",
				Settlement: SettleNone, Survivors: []Survivor{{PID: 4242, Argv: []string{"sleep", "600"}}},
				Scope: ScopeInfo{Mechanism: "cgroup"}, DurationMs: 1234},
			`{"token":"T","kind":"executed","id":7,"termination":"exited","exitCode":0,` +
				`"stdout":"{\"kind\":\"settled\",\"status\":\"completed\"}","diagnostic":{"category":"none"},` +
				`"execution":"x-1","settlement":"none","survivors":[{"pid":4242,"argv":["sleep","600"],"uid":0,"listens":[],"start":0,"session":0}],` +
				`"scope":{"mechanism":"cgroup"},"durationMs":1234}`,
		},
		{
			"executed, nil survivors and argv, raw mode, signal, detail",
			&Executed{Kind: "executed", Termination: Exited, ExitCode: 128 + 9, Diagnostic: NoneDiagnostic(),
				Execution: "x-2", Settlement: SettleNone, Survivors: nil, Scope: ScopeInfo{Mechanism: "process-group"},
				Signal: "SIGKILL", StdoutTruncated: &truncated, Detail: "why"},
			`{"kind":"executed","termination":"exited","exitCode":137,"stdout":"","diagnostic":{"category":"none"},` +
				`"execution":"x-2","settlement":"none","survivors":[],"scope":{"mechanism":"process-group"},` +
				`"signal":"SIGKILL","stdoutTruncated":false,"detail":"why","durationMs":0}`,
		},
		{
			"executed, framework timeout",
			Executed{Kind: "executed", Termination: FrameworkTimeout, ExitCode: ExitFramework, Diagnostic: EmptyDiagnostic(DiagMissing),
				Execution: "x-3", Settlement: SettleDestroyed, Survivors: []Survivor{{PID: 9}}, Scope: ScopeInfo{Mechanism: "cgroup"}},
			`{"kind":"executed","termination":"framework_timeout","exitCode":124,"stdout":"",` +
				`"diagnostic":{"category":"result-frame-missing","bytes":0,"sha256":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},` +
				`"execution":"x-3","settlement":"destroyed","survivors":[{"pid":9,"argv":[],"uid":0,"listens":[],"start":0,"session":0}],"scope":{"mechanism":"cgroup"},"durationMs":0}`,
		},
		{
			"verified, no survivors",
			Verified{Token: "T", Kind: "verified", Quiescent: true},
			`{"token":"T","kind":"verified","quiescent":true,"survivors":[]}`,
		},
		{
			"verified, survivors",
			&Verified{Kind: "verified", ID: json.RawMessage(`"v"`), Survivors: []Survivor{{PID: 1, Argv: []string{"a"}, UID: 1000, Start: 1700000000000, Session: 1}}},
			`{"kind":"verified","id":"v","quiescent":false,"survivors":[{"pid":1,"argv":["a"],"uid":1000,"listens":[],"start":1700000000000,"session":1}]}`,
		},
		{
			"survivor whose argv could not be read",
			Survivor{PID: 9, Argv: []string{"sh"}, ArgvUnavailable: true, UID: -1, Listens: []int{80, 8080}},
			`{"pid":9,"argv":["sh"],"argvUnavailable":true,"uid":-1,"listens":[80,8080],"start":0,"session":0}`,
		},
		{
			"error",
			ErrorReply{Kind: "error", ID: json.RawMessage(`7`), Error: &Error{Category: CatBadRequest,
				Message: `execute: "environment" and "credentials" both set OPENAI_API_KEY`}},
			`{"kind":"error","id":7,"error":{"category":"bad-request","message":"execute: \"environment\" and \"credentials\" both set OPENAI_API_KEY"}}`,
		},
		{
			"error without id",
			ErrorReply{Kind: "error", Error: &Error{Category: CatUnauthenticated, Message: "m"}},
			`{"kind":"error","error":{"category":"unauthenticated","message":"m"}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.reply)
			if err != nil {
				t.Fatalf("Marshal: got error %v; want none", err)
			}
			if string(b) != tt.want {
				t.Errorf("Marshal:\ngot  %s;\nwant %s", b, tt.want)
			}
		})
	}
}

func TestExecutedRoundTrip(t *testing.T) {
	in := Executed{Kind: "executed", Termination: Exited, Diagnostic: EmptyDiagnostic(DiagScopeUnavailable),
		ExitCode: ExitScopeUnavailable, Execution: "x-9", Settlement: SettleNone, Survivors: []Survivor{}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out Executed
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("Unmarshal(%s): got error %v; want none", b, err)
	}
	if out.Diagnostic != in.Diagnostic || out.ExitCode != in.ExitCode || len(out.Survivors) != 0 {
		t.Errorf("round trip: got %+v; want %+v", out, in)
	}
}
