package client

import (
	"errors"

	"github.com/relayd/relayd/internal/protocol"
)

// Sentinels, one per error category of protocol section 4.4. An error reply
// from relayd is returned as an *Error that matches its category's sentinel
// with errors.Is:
//
//	if errors.Is(err, client.ErrBusy) { ... }
var (
	ErrBadJSON         = &Error{Category: protocol.CatBadJSON}
	ErrLineTooLong     = &Error{Category: protocol.CatLineTooLong}
	ErrUnauthenticated = &Error{Category: protocol.CatUnauthenticated}
	ErrBadRequest      = &Error{Category: protocol.CatBadRequest}
	ErrUnknownKind     = &Error{Category: protocol.CatUnknownKind}
	ErrBusy            = &Error{Category: protocol.CatBusy}
	ErrShuttingDown    = &Error{Category: protocol.CatShuttingDown}
	ErrNotFound        = &Error{Category: protocol.CatNotFound} // Attach: no such detached execution (extension, section 4.5)
	ErrFailed          = &Error{Category: protocol.CatFailed}   // GetFile: the file changed while relayd sent it (extension, section 4.6)
)

// Errors of the connection itself.
var (
	// ErrConnLost: the connection ended, or failed, before the reply came.
	ErrConnLost = errors.New("client: connection to relayd lost before the reply")
	// ErrReplyOverdue: no reply within the wait the request allows (its
	// Timeout plus the teardown budget); the connection was closed.
	ErrReplyOverdue = errors.New("client: relayd's reply is overdue")
	// ErrClosed: the Conn was closed by its owner.
	ErrClosed = errors.New("client: use of a closed connection")
	// ErrBadReply: relayd sent something this client cannot read; the
	// connection was closed.
	ErrBadReply = errors.New("client: unreadable reply from relayd")
)

// Error is an error reply from relayd: a category of protocol section 4.4
// and a message for people.
type Error struct {
	Category string `json:"category"` // e.g. "bad-request"
	Message  string `json:"message"`
}

func (e *Error) Error() string {
	if e.Message == "" {
		return "relayd: " + e.Category
	}
	return "relayd: " + e.Category + ": " + e.Message
}

// Is matches an *Error of the same category, so that errors.Is(err,
// ErrBusy) holds for every busy reply.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Category == e.Category
}
