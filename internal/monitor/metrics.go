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
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.connections, c.connectionsTotal, c.subscriptions, c.inMsgs, c.outMsgs,
		c.inBytes, c.outBytes, c.slowConsumers, c.droppedMsgs, c.info, c.uptime,
		c.lConnections, c.lOutMsgs, c.lInMsgs, c.lSlowConsumers, c.lDroppedMsgs,
	} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. It calls Source.Status exactly once.
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
}
