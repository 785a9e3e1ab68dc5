package mqtt

// PollerTracked is how many connections the idle poller holds, for tests.
func PollerTracked(s *Server) int { return s.poll.tracked() }
