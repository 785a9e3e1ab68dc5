package main

import (
	"bytes"
	"crypto/tls"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tern-mq/tern/bench/internal/mqttload"
	"github.com/tern-mq/tern/internal/server"
	"github.com/tern-mq/tern/internal/server/servertest"
	"github.com/tern-mq/tern/internal/testenv/testcerts"
)

func TestRatioColumns(t *testing.T) {
	bs := []broker{{name: "mosquitto"}, {name: "mochi"}, {name: "tern"}}
	if got, want := ratioHeads(bs), []string{"tern/mosquitto", "tern/mochi"}; !slices.Equal(got, want) {
		t.Errorf("ratioHeads = %q, want %q", got, want)
	}
	if got, want := ratioCells([]float64{100, 0, 250}), []string{"2.50×", "–"}; !slices.Equal(got, want) {
		t.Errorf("ratioCells = %q, want %q", got, want)
	}
	if got := ratioCells([]float64{100, 200, 0}); !slices.Equal(got, []string{"–", "–"}) {
		t.Errorf("ratioCells with the last failed = %q", got)
	}
	if got := ratioHeads(bs[:1]); len(got) != 0 {
		t.Errorf("one broker: ratioHeads = %q, want none", got)
	}
	if got := ratioCells(nil); len(got) != 0 {
		t.Errorf("no broker: ratioCells = %q, want none", got)
	}
	var b bytes.Buffer
	tableRow(&b, "a", "b c")
	if b.String() != "| a | b c |\n" {
		t.Errorf("tableRow = %q", b.String())
	}
}

// TestDialTLS connects the load client over TLS (--tls-ca) to a Tern server with
// only a TLS MQTT port, as bench/mqtt.sh does with TLS=1.
func TestDialTLS(t *testing.T) {
	certs := testcerts.New(t)
	s := servertest.Start(t, func(c *server.Config) {
		c.MQTTPort, c.MQTTWSPort, c.MQTTTLSPort = -1, -1, 0
		c.TLSCertFile, c.TLSKeyFile = certs.ServerFiles.Cert, certs.ServerFiles.Key
	})
	cfg, err := tlsConfig(certs.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	b := broker{name: "tern", addr: s.MQTTTLSAddr().String(), tls: cfg}
	c, err := dial(b, "tls-probe", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Subscribe("bench/tls", 1); err != nil {
		t.Fatal(err)
	}
	c.Close()
	// Without TLS the server answers no CONNECT; with another CA the handshake fails.
	plain := b
	plain.tls = nil
	if c, err := mqttload.DialWith(plain.addr, mqttload.DialOptions{ClientID: "plain", Timeout: time.Second}); err == nil {
		c.Close()
		t.Error("plain MQTT to the TLS port: connected")
	}
	other := b
	other.tls = &tls.Config{RootCAs: testcerts.NewCA(t, "Other CA").Pool()}
	if c, err := dial(other, "other-ca", nil); err == nil {
		c.Close()
		t.Error("a server certificate of another CA: accepted")
	}
	if _, err := tlsConfig(filepath.Join(t.TempDir(), "missing.pem")); err == nil {
		t.Error("tlsConfig of a missing file: no error")
	}
}
