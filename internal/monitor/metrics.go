package monitor

import (
	"github.com/prometheus/client_golang/prometheus"
)

// collector turns one Source.Status snapshot per scrape into the tern_* metrics, so
// every value in a scrape comes from the same instant.
type collector struct {
	src Source

	connections      *prometheus.Desc
	connectionsTotal *prometheus.Desc
	subscriptions    *prometheus.Desc
	inMsgs           *prometheus.Desc
	outMsgs          *prometheus.Desc
	inBytes          *prometheus.Desc
	outBytes         *prometheus.Desc
	slowConsumers    *prometheus.Desc
	droppedMsgs      *prometheus.Desc
	info             *prometheus.Desc
	uptime           *prometheus.Desc

	// By listener (Status.ByListener): the same counters, labelled.
	lConnections   *prometheus.Desc
	lOutMsgs       *prometheus.Desc
	lInMsgs        *prometheus.Desc
	lSlowConsumers *prometheus.Desc
	lDroppedMsgs   *prometheus.Desc

	// Cluster (ClusterSource.ClusterStats), by the route's node where labelled.
	clusterMembers  *prometheus.Desc
	clusterRoutes   *prometheus.Desc
	clusterInterest *prometheus.Desc
	routeAuthFails  *prometheus.Desc
	rInMsgs         *prometheus.Desc
	rInBytes        *prometheus.Desc
	rOutMsgs        *prometheus.Desc
	rOutBytes       *prometheus.Desc
	rDroppedMsgs    *prometheus.Desc
	rRTT            *prometheus.Desc
	rPendingBytes   *prometheus.Desc
	rUnacked        *prometheus.Desc
	rInterest       *prometheus.Desc
	rExcluded       *prometheus.Desc
	rExclusions     *prometheus.Desc
	rExcludedDrops  *prometheus.Desc
}

func newCollector(src Source) *collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &collector{
		src:              src,
		connections:      d("tern_connections", "Client connections currently open."),
		connectionsTotal: d("tern_connections_total", "Client connections accepted since the server started."),
		subscriptions:    d("tern_subscriptions", "Subscriptions currently registered."),
		inMsgs:           d("tern_in_messages_total", "Messages received from clients."),
		outMsgs:          d("tern_out_messages_total", "Messages delivered to clients."),
		inBytes:          d("tern_in_bytes_total", "Payload bytes received from clients."),
		outBytes:         d("tern_out_bytes_total", "Payload bytes delivered to clients."),
		slowConsumers:    d("tern_slow_consumers_total", "Connections of every protocol that hit their pending limit."),
		droppedMsgs:      d("tern_dropped_messages_total", "Messages dropped: slow-consumer drop policy (every protocol), too large for an MQTT client, full MQTT session queues."),
		info:             d("tern_info", "Server identity; the value is always 1.", "version", "server_id", "server_name"),
		uptime:           d("tern_uptime_seconds", "Seconds since the server started."),
		lConnections:     d("tern_listener_connections", "Client connections currently open, by listener.", "listener"),
		lOutMsgs:         d("tern_listener_out_messages_total", "Messages delivered to clients, by listener.", "listener"),
		lInMsgs:          d("tern_listener_in_messages_total", "Messages received from clients, by listener.", "listener"),
		lSlowConsumers:   d("tern_listener_slow_consumers_total", "Connections that hit their pending limit, by listener.", "listener"),
		lDroppedMsgs:     d("tern_listener_dropped_messages_total", "Messages dropped for connections of a listener (slow-consumer drop policy, too large for the client).", "listener"),
		clusterMembers:   d("tern_cluster_members", "Alive cluster members, this node included."),
		clusterRoutes:    d("tern_cluster_routes", "Routes up to other cluster nodes."),
		clusterInterest:  d("tern_cluster_local_interest", "Interest entries (subjects and queue groups) this node advertises to the others."),
		routeAuthFails:   d("tern_route_auth_failures_total", "Routes refused because the peer did not prove the cluster secret (cluster_secret_file), or asked for it when this node has none, or, with cluster_tls, failed TLS (no valid certificate of the cluster CA, or no TLS)."),
		rInMsgs:          d("tern_route_in_msgs_total", "Messages received over the route from a node (since the route connected).", "node"),
		rInBytes:         d("tern_route_in_bytes_total", "Payload bytes received over the route from a node (since the route connected).", "node"),
		rOutMsgs:         d("tern_route_out_msgs_total", "Messages forwarded over the route to a node (since the route connected).", "node"),
		rOutBytes:        d("tern_route_out_bytes_total", "Payload bytes forwarded over the route to a node (since the route connected).", "node"),
		rDroppedMsgs:     d("tern_route_dropped_msgs_total", "Messages for a node dropped because its route was over its pending limit (since the route connected).", "node"),
		rRTT:             d("tern_route_rtt_seconds", "Last measured round trip of the route to a node.", "node"),
		rPendingBytes:    d("tern_route_pending_bytes", "Bytes queued for the route to a node and not yet written.", "node"),
		rUnacked:         d("tern_route_unacked_msgs", "Messages forwarded to a node with a sequence (MQTT QoS 1 and 2) and not yet acknowledged by it.", "node"),
		rInterest:        d("tern_route_interest", "Interest entries a node advertised over its route.", "node"),
		rExcluded:        d("tern_route_excluded", "1 while the route to a node is excluded (the node is behind or stalled and gets no traffic), else 0.", "node"),
		rExclusions:      d("tern_route_exclusions_total", "Times the route to a node was excluded (since the route connected).", "node"),
		rExcludedDrops:   d("tern_route_excluded_drops_total", "Messages (QoS 0) for a node not forwarded while its route was excluded (since the route connected).", "node"),
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.connections, c.connectionsTotal, c.subscriptions, c.inMsgs, c.outMsgs,
		c.inBytes, c.outBytes, c.slowConsumers, c.droppedMsgs, c.info, c.uptime,
		c.lConnections, c.lOutMsgs, c.lInMsgs, c.lSlowConsumers, c.lDroppedMsgs,
		c.clusterMembers, c.clusterRoutes, c.clusterInterest, c.routeAuthFails, c.rInMsgs, c.rInBytes, c.rOutMsgs,
		c.rOutBytes, c.rDroppedMsgs, c.rRTT, c.rPendingBytes, c.rUnacked, c.rInterest,
		c.rExcluded, c.rExclusions, c.rExcludedDrops,
	} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. It calls Source.Status exactly once, and
// ClusterSource.ClusterStats once when the source has it.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.src.Status()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	gauge(c.connections, float64(st.Connections))
	counter(c.connectionsTotal, st.TotalConnections)
	gauge(c.subscriptions, float64(st.Subscriptions))
	counter(c.inMsgs, st.InMsgs)
	counter(c.outMsgs, st.OutMsgs)
	counter(c.inBytes, st.InBytes)
	counter(c.outBytes, st.OutBytes)
	counter(c.slowConsumers, st.SlowConsumers)
	counter(c.droppedMsgs, st.DroppedMsgs)
	gauge(c.info, 1, st.Version, st.ServerID, st.ServerName)
	gauge(c.uptime, uptime(st).Seconds())
	labelled := func(d *prometheus.Desc, t prometheus.ValueType, v uint64, listener string) {
		ch <- prometheus.MustNewConstMetric(d, t, float64(v), listener)
	}
	for name, ls := range st.ByListener {
		labelled(c.lConnections, prometheus.GaugeValue, uint64(ls.Connections), name)
		labelled(c.lOutMsgs, prometheus.CounterValue, ls.OutMsgs, name)
		labelled(c.lInMsgs, prometheus.CounterValue, ls.InMsgs, name)
		labelled(c.lSlowConsumers, prometheus.CounterValue, ls.SlowConsumers, name)
		labelled(c.lDroppedMsgs, prometheus.CounterValue, ls.DroppedMsgs, name)
	}
	if cs, ok := c.src.(ClusterSource); ok {
		if cl := cs.ClusterStats(); cl != nil {
			c.collectCluster(ch, cl)
		}
	}
}

// collectCluster reports a cluster node; a server running alone has none of these
// series.
func (c *collector) collectCluster(ch chan<- prometheus.Metric, cl *ClusterStats) {
	metric := func(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, t, v, labels...)
	}
	metric(c.clusterMembers, prometheus.GaugeValue, float64(cl.Members))
	metric(c.clusterRoutes, prometheus.GaugeValue, float64(len(cl.Routes)))
	metric(c.clusterInterest, prometheus.GaugeValue, float64(cl.LocalInterest))
	metric(c.routeAuthFails, prometheus.CounterValue, float64(cl.RouteAuthFailures))
	for _, r := range cl.Routes {
		metric(c.rInMsgs, prometheus.CounterValue, float64(r.InMsgs), r.Node)
		metric(c.rInBytes, prometheus.CounterValue, float64(r.InBytes), r.Node)
		metric(c.rOutMsgs, prometheus.CounterValue, float64(r.OutMsgs), r.Node)
		metric(c.rOutBytes, prometheus.CounterValue, float64(r.OutBytes), r.Node)
		metric(c.rDroppedMsgs, prometheus.CounterValue, float64(r.DroppedMsgs), r.Node)
		if r.RTT > 0 {
			// A route not yet measured has no round trip to report: 0 would read as a
			// perfect link.
			metric(c.rRTT, prometheus.GaugeValue, r.RTT.Seconds(), r.Node)
		}
		metric(c.rPendingBytes, prometheus.GaugeValue, float64(r.PendingBytes), r.Node)
		metric(c.rUnacked, prometheus.GaugeValue, float64(r.Unacked), r.Node)
		metric(c.rInterest, prometheus.GaugeValue, float64(r.Interest), r.Node)
		excluded := 0.0
		if r.Excluded {
			excluded = 1
		}
		metric(c.rExcluded, prometheus.GaugeValue, excluded, r.Node)
		metric(c.rExclusions, prometheus.CounterValue, float64(r.Exclusions), r.Node)
		metric(c.rExcludedDrops, prometheus.CounterValue, float64(r.ExcludedDrops), r.Node)
	}
}
