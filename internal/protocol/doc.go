// Package protocol is relayd's wire format, version 1 (docs: protocol.md,
// sections 2 to 5): it reads message lines with a size limit, decodes and
// validates controller messages, defines the replies, and applies the
// result-carrier rules to a subject's stdout.
//
// It does no networking, runs nothing and keeps no connection's state: it does not
// check tokens (a Message only reports what token it carries), decide which
// reply a message deserves, or write anything to a connection. Those belong to
// internal/session. Nothing here logs, and no error message it builds ever
// holds a value from a request (environment and credential values are secrets;
// only field and variable names are quoted).
package protocol

// Version is the protocol version reported in a ready reply.
const Version = 1

// CarrierLimit is the longest carrier, in bytes, that carrier mode accepts;
// a longer one is reported as result-frame-oversize.
const CarrierLimit = 65536

// MaxPayload is the longest decoded result payload, in bytes, that a frame
// line may carry.
const MaxPayload = 2048

// FramePrefix opens a result frame line: "MAKA-EVAL-RESULT-V1 <resultToken> ...".
const FramePrefix = "MAKA-EVAL-RESULT-V1"

// Error categories (protocol section 4.4).
const (
	CatBadJSON         = "bad-json"
	CatLineTooLong     = "line-too-long"
	CatUnauthenticated = "unauthenticated"
	CatBadRequest      = "bad-request"
	CatUnknownKind     = "unknown-kind"
	CatBusy            = "busy"
	CatShuttingDown    = "shutting-down"
	CatNotFound        = "not-found" // attach: no such detached execution (section 4.5)
	CatFailed          = "failed"    // a get's body: the file changed while it was sent (section 4.6, "Bulk bodies"); a session command whose status cannot be trusted (section 4.7)
)

// Diagnostic categories (sections 4.2 and 5).
const (
	DiagNone             = "none"
	DiagOversize         = "result-frame-oversize"
	DiagMissing          = "result-frame-missing"
	DiagAmbiguous        = "result-frame-ambiguous"
	DiagInvalid          = "result-frame-invalid"
	DiagUnstructured     = "unstructured-output"
	DiagScopeUnavailable = "execution-scope-unavailable"
)
