package mqtt

// PollerTracked is how many connections the idle poller holds, for tests.
func PollerTracked(s *Server) int { return s.poll.tracked() }

// PollerDormant is how many parked connections hold no Go socket, for tests.
func PollerDormant(s *Server) int { return s.poll.dormantCount() }

// FreshIdleAfter is how long a freshly connected client may be silent before its
// connection parks.
const FreshIdleAfter = freshIdleAfter
