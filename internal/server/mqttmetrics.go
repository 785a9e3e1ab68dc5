package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tern-mq/tern/internal/mqtt"
)

// mqttCollector reports the MQTT front end's state at scrape time.
type mqttCollector struct{ s *mqtt.Server }

var (
	mqttConnsDesc    = prometheus.NewDesc("tern_mqtt_connections", "MQTT connections open now.", nil, nil)
	mqttIdleDesc     = prometheus.NewDesc("tern_mqtt_idle_connections", "MQTT connections idle now, waiting in the poller without a reader goroutine.", nil, nil)
	mqttSessionsDesc = prometheus.NewDesc("tern_mqtt_sessions", "MQTT sessions kept, connected or not.", nil, nil)
	mqttRetainedDesc = prometheus.NewDesc("tern_mqtt_retained_messages", "Retained messages held.", nil, nil)
	mqttInDesc       = prometheus.NewDesc("tern_mqtt_in_messages_total", "PUBLISH packets received from MQTT clients.", nil, nil)
	mqttOutDesc      = prometheus.NewDesc("tern_mqtt_out_messages_total", "PUBLISH packets sent to MQTT clients.", nil, nil)
	mqttDroppedDesc  = prometheus.NewDesc("tern_mqtt_dropped_messages_total", "Messages dropped for full session queues, slow clients or client size limits.", nil, nil)
)

func (c mqttCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{mqttConnsDesc, mqttIdleDesc, mqttSessionsDesc, mqttRetainedDesc, mqttInDesc, mqttOutDesc, mqttDroppedDesc} {
		ch <- d
	}
}

func (c mqttCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	ch <- prometheus.MustNewConstMetric(mqttConnsDesc, prometheus.GaugeValue, float64(st.Connections))
	ch <- prometheus.MustNewConstMetric(mqttIdleDesc, prometheus.GaugeValue, float64(st.Idle))
	ch <- prometheus.MustNewConstMetric(mqttSessionsDesc, prometheus.GaugeValue, float64(st.Sessions))
	ch <- prometheus.MustNewConstMetric(mqttRetainedDesc, prometheus.GaugeValue, float64(st.Retained))
	ch <- prometheus.MustNewConstMetric(mqttInDesc, prometheus.CounterValue, float64(st.InMsgs))
	ch <- prometheus.MustNewConstMetric(mqttOutDesc, prometheus.CounterValue, float64(st.OutMsgs))
	ch <- prometheus.MustNewConstMetric(mqttDroppedDesc, prometheus.CounterValue, float64(st.Dropped))
}
