package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"
)

// jsz is the part of nats-server's /jsz monitoring page wait-js reads.
type jsz struct {
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

// metaReady says whether the nodes' /jsz pages show a formed meta group of n nodes:
// all name the same leader, and the leader's page lists the n-1 others as current
// (a follower's page does not know whether its peers are current). If not, it says
// what is missing.
func metaReady(pages []jsz, n int) (bool, string) {
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

func cmdWaitJS(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("replicatedvs wait-js", flag.ContinueOnError)
	fs.SetOutput(stderr)
	monitors := fs.String("monitors", "", "comma-separated monitoring URLs of every node (http://127.0.0.1:24512,...)")
	timeout := fs.Duration("timeout", 60*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	bases := splitList(*monitors)
	if len(bases) == 0 {
		return errors.New("wait-js: --monitors is required")
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	why := ""
	for {
		var pages []jsz
		for _, b := range bases {
			var p jsz
			if err := getJSON(ctx, client, b+"/jsz", &p); err != nil {
				why = err.Error()
				break
			}
			pages = append(pages, p)
		}
		if len(pages) == len(bases) {
			var ok bool
			if ok, why = metaReady(pages, len(bases)); ok {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait-js: JetStream cluster not ready after %s: %s", *timeout, why)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func getJSON(ctx context.Context, c *http.Client, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(v)
}
