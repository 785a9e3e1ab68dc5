//go:build !linux

package mqtt

// Without epoll every connection keeps its reader goroutine.
type poller struct{}

func newPoller() (*poller, error)         { return nil, nil }
func (p *poller) park(c *conn) bool       { return false }
func (p *poller) forget(c *conn)          {}
func (p *poller) close()                  {}
func (p *poller) parkedCount() int        { return 0 }
func (p *poller) tracked() int            { return 0 }
func (p *poller) dehydrate(c *conn)       {}
func (p *poller) rehydrate(c *conn) error { return nil }
func (p *poller) dormantCount() int       { return 0 }
func (p *poller) peerName(c *conn) string { return "" }
