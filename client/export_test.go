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
