package client

import (
	"context"
	"time"
)

// SetSettleSlack shortens the wait past the teardown budget for a test and
// returns the function that restores it.
func SetSettleSlack(d time.Duration) (restore func()) {
	old := settleSlack
	settleSlack = d
	return func() { settleSlack = old }
}

var QuickHead = quickHead
var DecodeExecutedFast = decodeExecutedFast

// SetListenerTimeouts sets the hello and hold timeouts of the Listeners made
// after it and returns the function that restores them.
func SetListenerTimeouts(hello, hold time.Duration) (restore func()) {
	oldHello, oldHold := helloTimeout, holdTimeout
	helloTimeout, holdTimeout = hello, hold
	return func() { helloTimeout, holdTimeout = oldHello, oldHold }
}

const (
	MaxHello      = maxHello
	MaxHandshakes = maxHandshakes
	MaxHeld       = maxHeld
	MaxLongHellos = maxLongHellos
)

// Held is how many relayds l holds for their Accept.
func Held(l *Listener) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.nheld
}

// LongHellos is how many peers hold one of l's long-hello slots.
func LongHellos(l *Listener) int { return len(l.long) }

// Send sends msg (token and id added) as a request of its kind and decodes
// the reply into into (*Ready, *Executed, *Verified), as the methods do:
// for a test's request with fields this client never sends.
func Send(ctx context.Context, c *Conn, msg map[string]any, into any) error {
	want := map[string]string{kindReady: kindReady, kindExecute: kindExecuted, kindVerify: kindVerified}[msg["kind"].(string)]
	return c.roundTrip(ctx, msg, &call{want: want, into: into}, time.Minute)
}
