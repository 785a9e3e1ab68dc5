package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/tern-mq/tern/internal/auth"
	"github.com/tern-mq/tern/internal/broker"
)

// Account limits across a cluster. Each node publishes, on
// "$TERN.SYS.ACCOUNTS.USAGE.<node>", the connections and subscriptions its
// clients hold of every account that limits them: when they change (at most
// once a second) and every few seconds besides. Each node adds up the other
// nodes' last reports, forgets a node it has not heard from for a while, and
// counts the sum against the limits (auth.Authenticator.SetRemoteUsage). A limit
// holds once the reports have spread: clients connecting at the same moment to
// two nodes may both get in (NATS, which also learns remote counts from events,
// behaves alike).
const (
	usageSubject   = auth.SysPrefix + "ACCOUNTS.USAGE."
	usageEvery     = time.Second
	usageHeartbeat = 5 * time.Second
	usageStale     = 15 * time.Second
	// maxUsageReport bounds a report a peer sends; a larger one is dropped.
	maxUsageReport = 1 << 20
)

// usageReport is one node's usage of the accounts, as published.
type usageReport struct {
	Node     string                       `json:"node"`
	Accounts map[string]auth.AccountUsage `json:"accounts"`
}

var errBadUsageReport = errors.New("bad account usage report")

// parseUsageReport decodes a peer's report, checking what it can.
func parseUsageReport(b []byte) (usageReport, error) {
	var r usageReport
	if len(b) > maxUsageReport {
		return r, fmt.Errorf("%w: %d bytes, limit %d", errBadUsageReport, len(b), maxUsageReport)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("%w: %w", errBadUsageReport, err)
	}
	if r.Node == "" {
		return r, fmt.Errorf("%w: no node", errBadUsageReport)
	}
	for name, u := range r.Accounts {
		if u.Conns < 0 || u.Subs < 0 {
			return r, fmt.Errorf("%w: account %q: negative counts", errBadUsageReport, name)
		}
	}
	return r, nil
}

// usageExchange shares this node's account usage and gathers the others'.
type usageExchange struct {
	self  string
	b     *broker.Broker
	authn *auth.Authenticator
	sub   *broker.Subscription
	stop  chan struct{}
	done  chan struct{}

	mu     sync.Mutex
	remote map[string]nodeUsage // by node name
}

type nodeUsage struct {
	at       time.Time
	accounts map[string]auth.AccountUsage
}

// startUsageExchange starts sharing account usage with the cluster.
func startUsageExchange(self string, b *broker.Broker, authn *auth.Authenticator) (*usageExchange, error) {
	x := &usageExchange{self: self, b: b, authn: authn, stop: make(chan struct{}), done: make(chan struct{}),
		remote: map[string]nodeUsage{}}
	x.sub = &broker.Subscription{Sink: x, Subject: usageSubject + "*"}
	if err := b.Subscribe(x.sub); err != nil {
		return nil, fmt.Errorf("account usage: %w", err)
	}
	go x.run()
	return x, nil
}

// Stop stops publishing and forgets the other nodes' usage.
func (x *usageExchange) Stop() {
	close(x.stop)
	<-x.done
	_ = x.b.Unsubscribe(x.sub)
	x.authn.SetRemoteUsage(nil)
}

func (x *usageExchange) run() {
	defer close(x.done)
	t := time.NewTicker(usageEvery)
	defer t.Stop()
	var last map[string]auth.AccountUsage
	var sent time.Time
	var batch broker.Batch
	for {
		select {
		case <-x.stop:
			return
		case now := <-t.C:
			local := x.authn.LocalUsage()
			if !maps.Equal(local, last) || now.Sub(sent) >= usageHeartbeat {
				body, _ := json.Marshal(usageReport{Node: x.self, Accounts: local})
				x.b.Publish(&batch, &broker.Message{Subject: []byte(usageSubject + x.self), Payload: body})
				batch.Flush()
				last, sent = local, now
			}
			x.expire(now)
		}
	}
}

// expire forgets the nodes not heard from lately.
func (x *usageExchange) expire(now time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	changed := false
	for node, u := range x.remote {
		if now.Sub(u.at) > usageStale {
			delete(x.remote, node)
			changed = true
		}
	}
	if changed {
		x.applyLocked()
	}
}

// applyLocked hands the sum of the other nodes' usage to the limits.
func (x *usageExchange) applyLocked() {
	sum := map[string]auth.AccountUsage{}
	for _, u := range x.remote {
		for name, a := range u.accounts {
			s := sum[name]
			s.Conns += a.Conns
			s.Subs += a.Subs
			sum[name] = s
		}
	}
	x.authn.SetRemoteUsage(sum)
}

// Deliver implements broker.Sink: another node's report.
func (x *usageExchange) Deliver(_ *broker.Subscription, m *broker.Message) bool {
	r, err := parseUsageReport(m.Payload)
	if err != nil || r.Node == x.self {
		return true
	}
	x.mu.Lock()
	x.remote[r.Node] = nodeUsage{at: time.Now(), accounts: r.Accounts}
	x.applyLocked()
	x.mu.Unlock()
	return true
}

// Flush completes broker.Sink.
func (x *usageExchange) Flush() {}
