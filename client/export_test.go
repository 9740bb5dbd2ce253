package client

import "time"

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
