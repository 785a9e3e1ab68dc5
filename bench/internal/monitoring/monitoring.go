// Package monitoring reads the servers' HTTP monitoring pages (Tern's /cluster,
// nats-server's /jsz) and waits on them until a freshly started cluster is ready to
// measure: the readiness checks the shell drivers run between starting a cluster's
// nodes and the first measurement.
package monitoring

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// client bounds every request: a node that stopped answering must not stall a wait.
var client = &http.Client{Timeout: 2 * time.Second}

// GetJSON decodes the JSON page at url into v; a status other than 200 is an error.
func GetJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(v)
}

// pollEvery is how often a wait looks again.
const pollEvery = 200 * time.Millisecond

// waitUntil calls check until it reports ready, for at most timeout; the error then
// says what check last found missing.
func waitUntil(ctx context.Context, timeout time.Duration, check func(context.Context) (bool, string)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		ok, why := check(ctx)
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready after %s: %s", timeout, why)
		case <-time.After(pollEvery):
		}
	}
}

// JetStreamPage is the part of nats-server's /jsz page the wait reads.
type JetStreamPage struct {
	Meta *struct {
		Name        string `json:"name"`
		Leader      string `json:"leader"`
		ClusterSize int    `json:"cluster_size"`
		Replicas    []struct {
			Name    string `json:"name"`
			Current bool   `json:"current"`
			Offline bool   `json:"offline"`
		} `json:"replicas"`
	} `json:"meta_cluster"`
}

// JetStreamMetaReady says whether the nodes' /jsz pages show a formed meta group of
// n nodes: all name the same leader, and the leader's page lists the n-1 others as
// current (a follower's page does not know whether its peers are current). If not,
// it says what is missing.
func JetStreamMetaReady(pages []JetStreamPage, n int) (bool, string) {
	if len(pages) != n {
		return false, fmt.Sprintf("%d of %d pages", len(pages), n)
	}
	leader := ""
	for i, p := range pages {
		if p.Meta == nil || p.Meta.Leader == "" {
			return false, fmt.Sprintf("node %d has no meta leader yet", i+1)
		}
		if p.Meta.ClusterSize != n {
			return false, fmt.Sprintf("node %d sees a meta group of %d", i+1, p.Meta.ClusterSize)
		}
		if leader != "" && p.Meta.Leader != leader {
			return false, fmt.Sprintf("nodes disagree on the meta leader (%s, %s)", leader, p.Meta.Leader)
		}
		leader = p.Meta.Leader
	}
	for _, p := range pages {
		current := 0
		seenSelf := false
		for _, r := range p.Meta.Replicas {
			if r.Name == leader {
				seenSelf = true
			}
			if r.Current && !r.Offline && r.Name != leader {
				current++
			}
		}
		if seenSelf {
			continue // a follower's page: lists the leader among its replicas
		}
		if current == n-1 {
			return true, ""
		}
		return false, fmt.Sprintf("the meta leader %s sees %d of %d peers current", leader, current, n-1)
	}
	return false, fmt.Sprintf("no page is the meta leader %s's", leader)
}

// WaitJetStreamMeta waits until the JetStream nodes whose monitoring base URLs are
// bases agree on a meta leader that sees every other node as current
// (JetStreamMetaReady).
func WaitJetStreamMeta(ctx context.Context, bases []string, timeout time.Duration) error {
	return waitUntil(ctx, timeout, func(ctx context.Context) (bool, string) {
		var pages []JetStreamPage
		for _, b := range bases {
			var p JetStreamPage
			if err := GetJSON(ctx, b+"/jsz", &p); err != nil {
				return false, err.Error()
			}
			pages = append(pages, p)
		}
		return JetStreamMetaReady(pages, len(bases))
	})
}

// TernClusterPage is the part of a Tern node's /cluster page the meta wait reads.
type TernClusterPage struct {
	Node string `json:"node"`
	Meta *struct {
		Running bool     `json:"running"`
		Leader  string   `json:"leader"`
		Voters  []string `json:"voters"`
	} `json:"meta"`
}

// WaitTernMeta waits until every Tern node whose monitoring base URL is in bases
// shows its meta group running, with one leader they agree on and every node a
// voter; it returns that leader.
func WaitTernMeta(ctx context.Context, bases []string, timeout time.Duration) (string, error) {
	leader := ""
	err := waitUntil(ctx, timeout, func(ctx context.Context) (bool, string) {
		leader = ""
		for _, b := range bases {
			var c TernClusterPage
			if err := GetJSON(ctx, b+"/cluster", &c); err != nil {
				return false, err.Error()
			}
			switch {
			case c.Meta == nil:
				return false, c.Node + ": no meta group (is cluster_size set?)"
			case !c.Meta.Running || c.Meta.Leader == "":
				return false, c.Node + ": meta group not formed yet"
			case len(c.Meta.Voters) != len(bases):
				return false, fmt.Sprintf("%s: %d voters of %d", c.Node, len(c.Meta.Voters), len(bases))
			case leader != "" && c.Meta.Leader != leader:
				return false, fmt.Sprintf("nodes disagree on the meta leader (%s, %s)", leader, c.Meta.Leader)
			}
			leader = c.Meta.Leader
		}
		return true, ""
	})
	return leader, err
}
