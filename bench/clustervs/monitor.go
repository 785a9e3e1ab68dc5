package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"
)

// view is what one node's monitoring endpoint says about the cluster.
type view struct {
	Name string
	// Routes maps each node this one has a route to onto the interest entries (remote
	// subscriptions) it holds from that node, summed over the routes to it.
	Routes map[string]int
	// Members maps each member this node knows of onto its state ("alive", "suspect",
	// ...); nil for a system without membership (NATS).
	Members map[string]string
}

// parseTernCluster reads Tern's /cluster.
func parseTernCluster(b []byte) (view, error) {
	var st struct {
		Node    string `json:"node"`
		Members []struct {
			Name  string `json:"name"`
			State string `json:"state"`
		} `json:"members"`
		Routes []struct {
			Node     string `json:"node"`
			Interest int    `json:"interest"`
		} `json:"routes"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return view{}, fmt.Errorf("/cluster: %w", err)
	}
	if st.Node == "" {
		return view{}, errors.New("/cluster: no node name")
	}
	v := view{Name: st.Node, Routes: map[string]int{}, Members: map[string]string{}}
	for _, r := range st.Routes {
		v.Routes[r.Node] += r.Interest
	}
	for _, m := range st.Members {
		v.Members[m.Name] = m.State
	}
	return v, nil
}

// parseNATSRoutez reads nats-server's /routez. A server keeps several routes to each
// peer (a pool, and routes pinned to accounts): they are summed.
func parseNATSRoutez(b []byte) (view, error) {
	var rz struct {
		ServerName string `json:"server_name"`
		Routes     []struct {
			RemoteName string `json:"remote_name"`
			NumSubs    int    `json:"subscriptions"`
		} `json:"routes"`
	}
	if err := json.Unmarshal(b, &rz); err != nil {
		return view{}, fmt.Errorf("/routez: %w", err)
	}
	if rz.ServerName == "" {
		return view{}, errors.New("/routez: no server_name")
	}
	v := view{Name: rz.ServerName, Routes: map[string]int{}}
	for _, r := range rz.Routes {
		if r.RemoteName != "" {
			v.Routes[r.RemoteName] += r.NumSubs
		}
	}
	return v, nil
}

// gone reports whether v no longer shows node: as a route, and (for a system with
// membership) as a member that is not dead or left.
func (v view) routeGone(node string) bool {
	_, ok := v.Routes[node]
	return !ok
}

func (v view) memberGone(node string) bool {
	st, ok := v.Members[node]
	return !ok || st == "dead" || st == "left"
}

// meshed reports whether every node of views has a route to every other and, where
// membership is shown, knows every other as alive; otherwise what is missing.
func meshed(views []view) (bool, string) {
	var missing []string
	for _, v := range views {
		for _, o := range views {
			if o.Name == v.Name {
				continue
			}
			if _, ok := v.Routes[o.Name]; !ok {
				missing = append(missing, fmt.Sprintf("%s has no route to %s", v.Name, o.Name))
			}
			if v.Members != nil && v.Members[o.Name] != "alive" {
				missing = append(missing, fmt.Sprintf("%s does not see %s alive", v.Name, o.Name))
			}
		}
	}
	slices.Sort(missing)
	return len(missing) == 0, strings.Join(missing, "; ")
}

// monitor reads views over HTTP.
type monitor struct {
	path   string
	parse  func([]byte) (view, error)
	client *http.Client
}

func newMonitor(k *kind) *monitor {
	return &monitor{path: k.monitorPath, parse: k.parseView, client: &http.Client{Timeout: 2 * time.Second}}
}

// view fetches the view of the node whose monitoring base URL is base
// (http://host:port).
func (m *monitor) view(ctx context.Context, base string) (view, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+m.path, nil)
	if err != nil {
		return view{}, err
	}
	resp, err := m.client.Do(req)
	if err != nil {
		return view{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return view{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return view{}, fmt.Errorf("GET %s%s: %s", base, m.path, resp.Status)
	}
	return m.parse(b)
}

// views fetches every node's view, in order.
func (m *monitor) views(ctx context.Context, bases []string) ([]view, error) {
	out := make([]view, len(bases))
	for i, b := range bases {
		v, err := m.view(ctx, b)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// waitMesh polls until the nodes are fully meshed or timeout passes.
func (m *monitor) waitMesh(ctx context.Context, bases []string, timeout time.Duration) ([]view, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := "no answer yet"
	for {
		vs, err := m.views(ctx, bases)
		if err == nil {
			ok, missing := meshed(vs)
			if ok {
				return vs, nil
			}
			last = missing
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("not fully meshed within %s: %s", timeout, last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
