package streambench

import "time"

// SetStuckGrace shortens the wait for a blocked PublishAsync; it returns the undo.
func SetStuckGrace(d time.Duration) (restore func()) {
	old := stuckGrace
	stuckGrace = d
	return func() { stuckGrace = old }
}
