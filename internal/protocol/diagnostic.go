package protocol

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strconv"
)

// emptySHA256 is the lower-case hex SHA-256 digest of nothing.
var emptySHA256 = hex.EncodeToString(sha256.New().Sum(nil))

// Diagnostic is the "diagnostic" of an executed reply. It marshals to
// exactly {"category":"none"} or exactly {"category":C,"bytes":N,"sha256":H}.
type Diagnostic struct {
	Category string // one of the Diag constants
	Bytes    int64  // bytes counted; in JSON only when Counted
	SHA256   string // lower-case hex digest of those bytes; in JSON only when Counted
	Counted  bool   // true: bytes and sha256 are present in JSON
}

// NoneDiagnostic returns the diagnostic {"category":"none"}.
func NoneDiagnostic() Diagnostic {
	return Diagnostic{Category: DiagNone}
}

// EmptyDiagnostic returns category with bytes 0 and the digest of nothing,
// as reported for execution-scope-unavailable and for a destroyed execution
// in carrier mode (result-frame-missing).
func EmptyDiagnostic(category string) Diagnostic {
	return Diagnostic{Category: category, Bytes: 0, SHA256: emptySHA256, Counted: true}
}

// countedDiagnostic returns category with the length and digest of b.
func countedDiagnostic(category string, b []byte) Diagnostic {
	sum := sha256.Sum256(b)
	return Diagnostic{Category: category, Bytes: int64(len(b)), SHA256: hex.EncodeToString(sum[:]), Counted: true}
}

// MarshalJSON writes {"category":C} when d is not Counted and
// {"category":C,"bytes":N,"sha256":H} when it is. Category "none" never has
// counts, and the zero Diagnostic marshals as {"category":"none"}, so that a
// reply can never carry a category the protocol does not know as "".
func (d Diagnostic) MarshalJSON() ([]byte, error) {
	return d.appendJSON(make([]byte, 0, 96)), nil
}

// appendJSON appends what MarshalJSON returns.
func (d Diagnostic) appendJSON(b []byte) []byte {
	if d.Category == "" || d.Category == DiagNone || !d.Counted {
		category := d.Category
		if category == "" {
			category = DiagNone
		}
		b = append(b, `{"category":`...)
		b = appendString(b, category)
		return append(b, '}')
	}
	b = append(b, `{"category":`...)
	b = appendString(b, d.Category)
	b = append(b, `,"bytes":`...)
	b = strconv.AppendInt(b, d.Bytes, 10)
	b = append(b, `,"sha256":`...)
	b = appendString(b, d.SHA256)
	return append(b, '}')
}

// UnmarshalJSON reads either form. "category" is required; "bytes" and
// "sha256" come together or not at all; unknown fields are ignored.
func (d *Diagnostic) UnmarshalJSON(b []byte) error {
	var v struct {
		Category *string `json:"category"`
		Bytes    *int64  `json:"bytes"`
		SHA256   *string `json:"sha256"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	if v.Category == nil {
		return errors.New("protocol: diagnostic has no category")
	}
	if (v.Bytes == nil) != (v.SHA256 == nil) {
		return errors.New("protocol: diagnostic has only one of bytes and sha256")
	}
	*d = Diagnostic{Category: *v.Category}
	if v.Bytes != nil {
		d.Bytes, d.SHA256, d.Counted = *v.Bytes, *v.SHA256, true
	}
	return nil
}
