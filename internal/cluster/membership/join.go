package membership

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// resolveTimeout bounds one DNS look-up of a join host.
const resolveTimeout = 5 * time.Second

var errNoSeeds = errors.New("the join list names no other node")

// joinLoop joins the Join list while this node knows no other member: at start
// (nobody may be up yet, this node may be the first), and again whenever every
// other member has gone (they may all have restarted elsewhere, or this node may
// have been cut off). Once another member is known, memberlist's gossip keeps the
// membership and the loop sleeps.
func (m *Membership) joinLoop() {
	defer m.wg.Done()
	ctx := m.joinCtx
	wait := m.cfg.RejoinInterval
	failures := 0
	for {
		m.mu.Lock()
		alone := !m.othersAlive()
		m.mu.Unlock()
		if !alone {
			wait, failures = m.cfg.RejoinInterval, 0
			select {
			case <-m.alone:
				m.log.Info("no other member left; joining again", "join", m.cfg.Join)
				continue
			case <-ctx.Done():
				return
			}
		}

		n, err := m.joinOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		m.mu.Lock()
		alone = !m.othersAlive()
		members := len(m.nodes)
		m.mu.Unlock()
		if !alone {
			m.log.Info("joined the cluster", "contacted", n, "members", members)
			continue
		}
		failures++
		// Nodes that answered with another gossip key (or none): waiting will not
		// help. One error may hold the answers of several nodes.
		for _, r := range keyRefusals {
			if strings.Contains(fmt.Sprint(err), r.match) && m.keyLog.allow(r.msg+"|join") {
				m.log.Warn(r.msg, "join", m.cfg.Join, "err", err)
			}
		}
		if failures == 1 {
			m.log.Info("no other member reachable yet; retrying in the background", "join", m.cfg.Join, "err", err)
		} else {
			m.log.Debug("join attempt failed", "attempt", failures, "next_in", wait, "err", err)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
		wait = min(2*wait, MaxRejoinInterval)
	}
}

// joinOnce resolves the join list and asks memberlist to join every address found
// that is not this node's own.
func (m *Membership) joinOnce(ctx context.Context) (int, error) {
	addrs, err := m.joinAddrs(ctx)
	if len(addrs) == 0 {
		if err == nil {
			err = errNoSeeds
		}
		return 0, fmt.Errorf("membership: join: %w", err)
	}
	n, jerr := m.list.Join(addrs)
	if jerr != nil {
		return n, fmt.Errorf("membership: join %v: %w", addrs, jerr)
	}
	return n, nil
}

// joinAddrs maps each Join entry to the gossip addresses to try: every address a
// name resolves to, at the entry's gossip port, minus this node's own. It returns
// what it could resolve and the last resolution error.
func (m *Membership) joinAddrs(ctx context.Context) ([]string, error) {
	var out []string
	var lastErr error
	seen := make(map[string]bool)
	for _, entry := range m.cfg.Join {
		host, port, err := joinTarget(entry, m.cfg.JoinGossip)
		if err != nil {
			lastErr = err // withDefaults checked the entries; kept for safety
			continue
		}
		var ips []string
		if net.ParseIP(host) != nil {
			ips = []string{host}
		} else {
			rctx, cancel := context.WithTimeout(ctx, resolveTimeout)
			ips, err = m.cfg.Resolve(rctx, host)
			cancel()
			if err != nil {
				lastErr = fmt.Errorf("membership: resolve join host %q: %w", host, err)
				continue
			}
		}
		for _, s := range ips {
			ip := net.ParseIP(s)
			if ip == nil || m.isSelf(ip, port) {
				// nil: an IPv6 address with a zone, which memberlist cannot join.
				continue
			}
			a := net.JoinHostPort(s, strconv.Itoa(port))
			if !seen[a] {
				seen[a] = true
				out = append(out, a)
			}
		}
	}
	return out, lastErr
}
