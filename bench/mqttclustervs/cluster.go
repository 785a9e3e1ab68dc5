package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/tern-mq/tern/bench/internal/monitoring"

	"github.com/tern-mq/tern/bench/internal/mqttload"
)

func cmdReady(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mqttclustervs ready", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cf := addCluster(fs)
	timeout := fs.Duration("timeout", 60*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, err := cf.parse(false)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	start := time.Now()
	if c.System == "tern" {
		if err := waitTernMQTTGroup(ctx, c.Monitors); err != nil {
			return err
		}
	}
	// A persistent session with a QoS 1 subscription on every node, then dropped: a
	// NATS cluster makes its MQTT streams on the first such connection.
	for i, addr := range c.MQTT {
		id := fmt.Sprintf("ready-%d-%d", i+1, time.Now().UnixNano())
		var last error
		for {
			if last = persistentProbe(addr, id); last == nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("ready: node %d (%s) does not serve a persistent session after %s: %v", i+1, addr, *timeout, last)
			case <-time.After(250 * time.Millisecond):
			}
		}
	}
	l := leaders(ctx, c)
	fmt.Fprintf(stdout, "%s: MQTT ready on 3 nodes after %s; leaders %s\n", c.System, time.Since(start).Round(time.Millisecond), formatLeaders(l))
	return nil
}

// persistentProbe makes a persistent session with one QoS 1 subscription on addr and
// removes it again (a clean CONNECT with the same id).
func persistentProbe(addr, id string) error {
	c, err := mqttload.DialWith(addr, mqttload.DialOptions{ClientID: id, Persistent: true, Timeout: 5 * time.Second})
	if err != nil {
		return err
	}
	err = c.Subscribe("ready/"+id, 1)
	c.Close()
	if err != nil {
		return err
	}
	return dropSession(addr, id)
}

// dropSession removes a persistent session: MQTT 3.1.1 discards the session of a
// client that connects with clean session on.
func dropSession(addr, id string) error {
	c, err := mqttload.DialWith(addr, mqttload.DialOptions{ClientID: id, Timeout: 5 * time.Second})
	if err != nil {
		return err
	}
	c.Close()
	return nil
}

// ternCluster is the part of a Tern node's /cluster page read here.
type ternCluster struct {
	Node string     `json:"node"`
	Meta *ternGroup `json:"meta"`
	MQTT *ternGroup `json:"mqtt"`
}

type ternGroup struct {
	Running bool     `json:"running"`
	Leader  string   `json:"leader"`
	Term    uint64   `json:"term"`
	Voters  []string `json:"voters"`
}

// waitTernMQTTGroup waits until every node shows the MQTT group running with one
// leader and three voters.
func waitTernMQTTGroup(ctx context.Context, monitors []string) error {
	why := ""
	for {
		ready, leader := true, ""
		for _, m := range monitors {
			var st ternCluster
			if err := monitoring.GetJSON(ctx, m+"/cluster", &st); err != nil {
				ready, why = false, err.Error()
				break
			}
			switch {
			case st.MQTT == nil:
				ready, why = false, st.Node+": no MQTT group (is cluster_size set?)"
			case !st.MQTT.Running || st.MQTT.Leader == "":
				ready, why = false, st.Node+": MQTT group not formed yet"
			case len(st.MQTT.Voters) != len(monitors):
				ready, why = false, fmt.Sprintf("%s: MQTT group has %d voters", st.Node, len(st.MQTT.Voters))
			case leader != "" && leader != st.MQTT.Leader:
				ready, why = false, "nodes disagree on the MQTT group's leader"
			default:
				leader = st.MQTT.Leader
			}
			if !ready {
				break
			}
		}
		if ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ready: Tern's MQTT group: %s", why)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// leaders names the leaders that matter to MQTT, as node 1 sees them (best effort:
// an error is reported as a leader named "?"). Tern: the meta group and the MQTT
// group. NATS: the JetStream meta group, each $MQTT_ stream and each consumer of
// $MQTT_msgs (a QoS 1 subscription's).
func leaders(ctx context.Context, c cluster) map[string]string {
	return leadersFrom(ctx, c, c.Monitors[0])
}

func leadersFrom(ctx context.Context, c cluster, monitor string) map[string]string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out := map[string]string{}
	if c.System == "tern" {
		var st ternCluster
		if err := monitoring.GetJSON(ctx, monitor+"/cluster", &st); err != nil {
			out["error"] = err.Error()
			return out
		}
		if st.Meta != nil {
			out["meta"] = st.Meta.Leader
		}
		if st.MQTT != nil {
			out["mqtt"] = st.MQTT.Leader
		}
		return out
	}
	var jsz natsJsz
	if err := monitoring.GetJSON(ctx, monitor+"/jsz?acc="+url.QueryEscape("$G")+"&streams=true&consumers=true", &jsz); err != nil {
		out["error"] = err.Error()
		return out
	}
	if jsz.Meta != nil {
		out["meta"] = jsz.Meta.Leader
	}
	for _, a := range jsz.Accounts {
		for _, s := range a.Streams {
			if !strings.HasPrefix(s.Name, "$MQTT_") {
				continue
			}
			if s.Cluster != nil {
				out[s.Name] = s.Cluster.Leader
			}
			if s.Name != "$MQTT_msgs" {
				continue
			}
			for _, co := range s.Consumers {
				if co.Cluster != nil {
					out["$MQTT_msgs>"+co.Name] = co.Cluster.Leader
				}
			}
		}
	}
	return out
}

// natsJsz is the part of nats-server's /jsz read here.
type natsJsz struct {
	Meta *struct {
		Leader string `json:"leader"`
	} `json:"meta_cluster"`
	Accounts []struct {
		Name    string `json:"name"`
		Streams []struct {
			Name    string `json:"name"`
			Cluster *struct {
				Leader string `json:"leader"`
			} `json:"cluster"`
			Consumers []struct {
				Name    string `json:"name"`
				Cluster *struct {
					Leader string `json:"leader"`
				} `json:"cluster"`
			} `json:"consumer_detail"`
		} `json:"stream_detail"`
	} `json:"account_details"`
}

func formatLeaders(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s=%s", k, m[k])
	}
	return b.String()
}
