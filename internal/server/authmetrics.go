package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tern-mq/tern/internal/auth"
)

// authCollector reports logins by protocol and outcome at scrape time.
type authCollector struct{ a *auth.Authenticator }

var authLoginsDesc = prometheus.NewDesc("tern_auth_logins_total",
	"Logins by protocol (native, udp, mqtt, kafka, http) and result (success, failure).", []string{"protocol", "result"}, nil)

var authRevokedDesc = prometheus.NewDesc("tern_auth_revoked_total",
	"Connections closed by protocol because a reload of the users file no longer admitted their login (user removed, credentials changed, moved to another account).",
	[]string{"protocol"}, nil)

func (c authCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- authLoginsDesc
	ch <- authRevokedDesc
}

func (c authCollector) Collect(ch chan<- prometheus.Metric) {
	for proto, st := range c.a.Stats() {
		ch <- prometheus.MustNewConstMetric(authLoginsDesc, prometheus.CounterValue, float64(st.Successes), proto, "success")
		ch <- prometheus.MustNewConstMetric(authLoginsDesc, prometheus.CounterValue, float64(st.Failures), proto, "failure")
		ch <- prometheus.MustNewConstMetric(authRevokedDesc, prometheus.CounterValue, float64(st.Revoked), proto)
	}
}
