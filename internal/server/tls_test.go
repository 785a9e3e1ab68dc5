package server_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/auth/authtest"
	"github.com/tern-mq/tern/internal/server"
	"github.com/tern-mq/tern/internal/server/servertest"
	"github.com/tern-mq/tern/internal/testenv"
	"github.com/tern-mq/tern/internal/testenv/testcerts"
	"github.com/tern-mq/tern/internal/wire"
)

// startTLS runs a server on loopback whose only listeners are the TLS ones
// (native, MQTT, MQTT over wss, Kafka, https: every plain port off), with the
// certificates of cs, after mutate (which may be nil) adjusts the configuration.
func startTLS(t *testing.T, cs *testcerts.Set, mutate func(*server.Config)) *server.Server {
	t.Helper()
	return servertest.Start(t, func(cfg *server.Config) {
		cfg.Port, cfg.UDPPort, cfg.MQTTPort, cfg.MQTTWSPort, cfg.KafkaPort, cfg.HTTPAddr = -1, -1, -1, -1, -1, ""
		cfg.TLSPort, cfg.MQTTTLSPort, cfg.MQTTWSSPort, cfg.KafkaTLSPort, cfg.HTTPSAddr = 0, 0, 0, 0, "127.0.0.1:0"
		cfg.TLSCertFile, cfg.TLSKeyFile = cs.ServerFiles.Cert, cs.ServerFiles.Key
		cfg.TLSCAFile, cfg.TLSCRLFile = cs.CAFile, cs.CRLFile
		cfg.KafkaGroupInitialDelay = 0
		if mutate != nil {
			mutate(cfg)
		}
	})
}

func portOf(a net.Addr) string { return strconv.Itoa(a.(*net.TCPAddr).Port) }

// run runs a command to its end within limit and returns its stdout, stderr and
// error.
func run(t *testing.T, limit time.Duration, name string, args ...string) (string, string, error) {
	t.Helper()
	return runIn(t, limit, "", name, args...)
}

func runIn(t *testing.T, limit time.Duration, stdin, name string, args ...string) (string, string, error) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Fatalf("%s not installed (scripts/deps.sh installs it): %v", name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.String(), errOut.String(), err
}

// start runs a command in the background, killed at the end of the test; wait
// gives its output once it has ended, within limit.
func start(t *testing.T, name string, args ...string) (wait func(limit time.Duration) (string, error)) {
	t.Helper()
	cmd := exec.Command(name, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v (scripts/deps.sh installs it)", name, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		done <- nil
	})
	return func(limit time.Duration) (string, error) {
		select {
		case err := <-done:
			done <- err
			if err != nil {
				return out.String(), fmt.Errorf("%s: %w\n%s", name, err, errOut.String())
			}
			return out.String(), nil
		case <-time.After(limit):
			return out.String(), fmt.Errorf("%s still running after %v\n%s", name, limit, errOut.String())
		}
	}
}

// waitSubscriptions waits until the broker holds at least n subscriptions.
func waitSubscriptions(t *testing.T, s *server.Server, n int) {
	t.Helper()
	waitUntil(t, fmt.Sprintf("%d subscriptions", n), 10*time.Second, func() bool { return s.Broker().Count() >= n })
}

func TestTLSNativeGoClientWithClientCertificates(t *testing.T) {
	cs := testcerts.New(t)
	s := startTLS(t, cs, func(c *server.Config) { c.TLSClientAuth = "require" })
	if s.Addr() != nil || s.URL() != "" || s.TLSURL() == "" {
		t.Fatalf("port -1: plain listener %v, URL %q, TLS URL %q", s.Addr(), s.URL(), s.TLSURL())
	}
	url := s.TLSURL()
	opts := func(p *testcerts.Pair) []tern.Option {
		o := []tern.Option{tern.TLSCAFile(cs.CAFile), tern.NoReconnect(), tern.Timeout(2 * time.Second)}
		if p != nil {
			o = append(o, tern.TLSClientCert(p.Cert, p.Key))
		}
		return o
	}
	for name, p := range map[string]*testcerts.Pair{"no": nil, "expired": &cs.ExpiredFiles, "revoked": &cs.RevokedFiles} {
		nc, err := tern.Connect(url, opts(p)...)
		if err == nil {
			nc.Close()
			t.Errorf("%s client certificate: connected", name)
		}
	}
	// The plaintext protocol on the TLS port gets nowhere either.
	if nc, err := tern.Connect(strings.Replace(url, "tls://", "tern://", 1), tern.NoReconnect()); err == nil {
		nc.Close()
		t.Error("plaintext client connected to the TLS port")
	}

	nc, err := tern.Connect(url, opts(&cs.ClientFiles)...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub, err := nc.SubscribeSync("tls.>")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := nc.Publish("tls.x", []byte("m"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		m, err := sub.NextMsg(5 * time.Second)
		if err != nil || string(m.Data) != "m"+strconv.Itoa(i) {
			t.Fatalf("message %d: %v, %v", i, m, err)
		}
	}
	// The refused connections leave once the server has closed them, which may
	// come after the client gave up on them.
	st := s.Status().ByListener["native_tls"]
	for deadline := time.Now().Add(5 * time.Second); st.Connections > 1 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
		st = s.Status().ByListener["native_tls"]
	}
	if st.Connections != 1 || st.InMsgs != 3 {
		t.Fatalf("native_tls listener stats %+v, want 1 connection and 3 messages in", st)
	}
	conns := s.Connections()
	if len(conns) != 1 || conns[0].Transport != "tls" {
		t.Fatalf("connections %+v, want one over tls", conns)
	}
}

func TestTLSMosquitto(t *testing.T) {
	cs := testcerts.New(t)
	s := startTLS(t, cs, func(c *server.Config) { c.TLSClientAuth = "verify" })
	port := portOf(s.MQTTTLSAddr())
	tlsArgs := []string{"-h", "127.0.0.1", "-p", port, "--cafile", cs.CAFile}
	certArgs := append(slices.Clone(tlsArgs), "--cert", cs.ClientFiles.Cert, "--key", cs.ClientFiles.Key)

	// A subscriber with the CA only; a publisher with a client certificate.
	before := s.Broker().Count()
	wait := start(t, "mosquitto_sub", append(slices.Clone(tlsArgs), "-t", "tls/#", "-q", "1", "-C", "3", "-W", "20", "-F", "%t %p")...)
	waitSubscriptions(t, s, before+1)
	for i := range 3 {
		if _, errOut, err := run(t, 20*time.Second, "mosquitto_pub", append(slices.Clone(certArgs), "-t", "tls/a", "-q", "1", "-m", "m"+strconv.Itoa(i))...); err != nil {
			t.Fatalf("mosquitto_pub with a client certificate: %v\n%s", err, errOut)
		}
	}
	out, err := wait(20 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Fields(strings.ReplaceAll(out, "\n", " ")), []string{"tls/a", "m0", "tls/a", "m1", "tls/a", "m2"}; !slices.Equal(got, want) {
		t.Fatalf("mosquitto_sub got %q, want %q", got, want)
	}
	// Refused: a client that does not trust the server's CA, one with an
	// expired certificate, one with a revoked one.
	other := testcerts.NewCA(t, "other")
	otherCA := testcerts.WriteFile(t, cs.Dir, "other-ca.pem", other.PEM)
	for name, args := range map[string][]string{
		"untrusted server": {"-h", "127.0.0.1", "-p", port, "--cafile", otherCA},
		"expired":          append(slices.Clone(tlsArgs), "--cert", cs.ExpiredFiles.Cert, "--key", cs.ExpiredFiles.Key),
		"revoked":          append(slices.Clone(tlsArgs), "--cert", cs.RevokedFiles.Cert, "--key", cs.RevokedFiles.Key),
	} {
		if _, _, err := run(t, 20*time.Second, "mosquitto_pub", append(args, "-t", "tls/b", "-q", "1", "-m", "x")...); err == nil {
			t.Errorf("mosquitto_pub, %s: published", name)
		}
	}
	if st := s.Status().ByListener["mqtt_tls"]; st.TotalConnections < 4 || st.InMsgs != 3 {
		t.Fatalf("mqtt_tls listener stats %+v", st)
	}
}

func TestTLSMosquittoRequiresClientCertificate(t *testing.T) {
	cs := testcerts.New(t)
	s := startTLS(t, cs, func(c *server.Config) { c.TLSClientAuth = "require" })
	args := []string{"-h", "127.0.0.1", "-p", portOf(s.MQTTTLSAddr()), "--cafile", cs.CAFile, "-t", "t", "-q", "1", "-m", "x"}
	if _, _, err := run(t, 20*time.Second, "mosquitto_pub", args...); err == nil {
		t.Fatal("published without a client certificate")
	}
	if _, errOut, err := run(t, 20*time.Second, "mosquitto_pub", append(args, "--cert", cs.ClientFiles.Cert, "--key", cs.ClientFiles.Key)...); err != nil {
		t.Fatalf("with a client certificate: %v\n%s", err, errOut)
	}
}

// pahoTLS is a paho-mqtt script that connects over TLS (transport "tcp" or
// "websockets"), subscribes, publishes three messages to itself at QoS 1 and
// prints their payloads.
const pahoTLS = `
import os, sys, ssl, queue, threading
import paho.mqtt.client as mqtt
c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="paho-" + os.environ["TRANSPORT"], transport=os.environ["TRANSPORT"])
c.tls_set(ca_certs=os.environ["CA"], certfile=os.environ["CERT"], keyfile=os.environ["KEY"])
msgs, subscribed = queue.Queue(), threading.Event()
c.on_message = lambda cl, ud, m: msgs.put(m.payload.decode())
c.on_subscribe = lambda *a: subscribed.set()
c.on_connect = lambda cl, ud, fl, rc, pr: cl.subscribe("paho/tls", qos=1)
c.connect("localhost", int(os.environ["PORT"]), keepalive=30)
c.loop_start()
if not subscribed.wait(10):
    sys.exit("not subscribed")
for i in range(3):
    c.publish("paho/tls", "p%d" % i, qos=1).wait_for_publish(10)
for i in range(3):
    print(msgs.get(timeout=10))
c.disconnect(); c.loop_stop()
`

func TestTLSPaho(t *testing.T) {
	cs := testcerts.New(t)
	s := startTLS(t, cs, func(c *server.Config) { c.TLSClientAuth = "require" })
	py := testenv.Python(t, "paho-mqtt")
	for _, tc := range []struct {
		transport string
		addr      net.Addr
		listener  string
	}{{"tcp", s.MQTTTLSAddr(), "mqtt_tls"}, {"websockets", s.MQTTWSSAddr(), "mqtt_wss"}} {
		t.Run(tc.transport, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, py, "-c", pahoTLS)
			cmd.Env = append(os.Environ(), "TRANSPORT="+tc.transport, "PORT="+portOf(tc.addr), "CA="+cs.CAFile,
				"CERT="+cs.ClientFiles.Cert, "KEY="+cs.ClientFiles.Key)
			var out, errOut bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errOut
			if err := cmd.Run(); err != nil {
				t.Fatalf("paho over %s: %v\n%s\n%s", tc.transport, err, out.String(), errOut.String())
			}
			if got := strings.Fields(out.String()); !slices.Equal(got, []string{"p0", "p1", "p2"}) {
				t.Fatalf("paho over %s got %q", tc.transport, got)
			}
			if st := s.Status().ByListener[tc.listener]; st.TotalConnections == 0 || st.InMsgs != 3 {
				t.Fatalf("%s listener stats %+v", tc.listener, st)
			}
		})
	}
}

func TestTLSKafka(t *testing.T) {
	cs := testcerts.New(t)
	s := startTLS(t, cs, nil)
	addr := "localhost:" + portOf(s.KafkaTLSAddr())
	ssl := []string{"-b", addr, "-X", "security.protocol=ssl", "-X", "ssl.ca.location=" + cs.CAFile}

	t.Run("kcat", func(t *testing.T) {
		lines := []string{"one", "two", "three"}
		if _, errOut, err := runIn(t, 30*time.Second, strings.Join(lines, "\n")+"\n", "kcat", append(slices.Clone(ssl), "-P", "-t", "tls-kcat")...); err != nil {
			t.Fatalf("kcat -P: %v\n%s", err, errOut)
		}
		out, errOut, err := run(t, 30*time.Second, "kcat", append(slices.Clone(ssl), "-C", "-t", "tls-kcat", "-o", "beginning", "-e", "-q")...)
		if err != nil {
			t.Fatalf("kcat -C: %v\n%s", err, errOut)
		}
		if got := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); !slices.Equal(got, lines) {
			t.Fatalf("kcat consumed %q, want %q", got, lines)
		}
		// Without TLS on the TLS port kcat gets no metadata.
		if _, _, err := run(t, 20*time.Second, "kcat", "-b", addr, "-L", "-m", "3"); err == nil {
			t.Fatal("kcat without TLS listed the TLS port's metadata")
		}
	})

	t.Run("franz-go", func(t *testing.T) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DialTLSConfig(cs.CA.ClientConfig(nil)),
			kgo.ConsumeTopics("tls-franz"), kgo.AllowAutoTopicCreation(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for i := range 5 {
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "tls-franz", Value: []byte("f" + strconv.Itoa(i))}).FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}
		}
		var got []string
		for len(got) < 5 && ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			if errs := fs.Errors(); len(errs) > 0 && ctx.Err() == nil {
				t.Fatalf("fetch: %v", errs)
			}
			fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		}
		if want := []string{"f0", "f1", "f2", "f3", "f4"}; !slices.Equal(got, want) {
			t.Fatalf("franz-go consumed %q, want %q", got, want)
		}
		if st := s.Status().ByListener["kafka_tls"]; st.TotalConnections == 0 || st.InMsgs < 5 {
			t.Fatalf("kafka_tls listener stats %+v", st)
		}
	})
}

// sClient runs openssl s_client against addr with args and reports whether the
// handshake succeeded, with the output.
func sClient(t *testing.T, addr, ca string, args ...string) (bool, string) {
	t.Helper()
	args = append([]string{"s_client", "-connect", addr, "-servername", "localhost", "-CAfile", ca, "-verify_return_error", "-brief"}, args...)
	out, errOut, err := run(t, 20*time.Second, "openssl", args...)
	all := out + errOut
	return err == nil && strings.Contains(all, "CONNECTION ESTABLISHED"), all
}

func TestTLSVersionsAndCiphersWithOpenSSL(t *testing.T) {
	cs := testcerts.New(t)
	s := startTLS(t, cs, func(c *server.Config) { c.TLSCAFile, c.TLSCRLFile = "", "" })
	addr := s.TLSAddr().String()
	// @SECLEVEL=0 lets OpenSSL offer TLS 1.1 at all: the refusal is the server's.
	if ok, out := sClient(t, addr, cs.CAFile, "-tls1_1", "-cipher", "DEFAULT:@SECLEVEL=0"); ok || !strings.Contains(out, "alert protocol version") {
		t.Fatalf("TLS 1.1: established %v, want a protocol version alert:\n%s", ok, out)
	}
	if ok, out := sClient(t, addr, cs.CAFile, "-tls1_2"); !ok || !strings.Contains(out, "TLSv1.2") {
		t.Fatalf("TLS 1.2 by default: %v\n%s", ok, out)
	}
	if ok, out := sClient(t, addr, cs.CAFile, "-tls1_3"); !ok || !strings.Contains(out, "TLSv1.3") {
		t.Fatalf("TLS 1.3: %v\n%s", ok, out)
	}

	s13 := startTLS(t, cs, func(c *server.Config) { c.TLSCAFile, c.TLSCRLFile, c.TLSMinVersion = "", "", "1.3" })
	if ok, out := sClient(t, s13.TLSAddr().String(), cs.CAFile, "-tls1_2"); ok {
		t.Fatalf("TLS 1.2 with tls_min_version 1.3 established:\n%s", out)
	}
	if ok, out := sClient(t, s13.TLSAddr().String(), cs.CAFile, "-tls1_3"); !ok {
		t.Fatalf("TLS 1.3 with tls_min_version 1.3: %s", out)
	}

	sc := startTLS(t, cs, func(c *server.Config) {
		c.TLSCAFile, c.TLSCRLFile, c.TLSCiphers = "", "", "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"
	})
	if ok, out := sClient(t, sc.TLSAddr().String(), cs.CAFile, "-tls1_2", "-cipher", "ECDHE-ECDSA-AES128-GCM-SHA256"); ok || !strings.Contains(out, "alert handshake failure") {
		t.Fatalf("a cipher left out of tls_ciphers was accepted:\n%s", out)
	}
	if ok, out := sClient(t, sc.TLSAddr().String(), cs.CAFile, "-tls1_2", "-cipher", "ECDHE-ECDSA-AES256-GCM-SHA384"); !ok || !strings.Contains(out, "ECDHE-ECDSA-AES256-GCM-SHA384") {
		t.Fatalf("a cipher of tls_ciphers: %v\n%s", ok, out)
	}
}

func TestTLSConfigErrors(t *testing.T) {
	cs := testcerts.New(t)
	for _, tc := range []struct {
		name   string
		mutate func(*server.Config)
		want   string
	}{
		{"port without cert", func(c *server.Config) { c.TLSCertFile, c.TLSKeyFile = "", "" }, "option tls_port: a TLS listener needs tls_cert_file and tls_key_file"},
		{"https without key", func(c *server.Config) {
			c.TLSPort, c.MQTTTLSPort, c.MQTTWSSPort, c.KafkaTLSPort, c.TLSKeyFile = -1, -1, -1, -1, ""
		}, "option https:"},
		{"missing cert file", func(c *server.Config) { c.TLSCertFile = cs.Dir + "/missing.pem" }, "missing.pem"},
		{"insecure cipher", func(c *server.Config) { c.TLSCiphers = "TLS_RSA_WITH_RC4_128_SHA" }, "insecure"},
	} {
		cfg := server.DefaultConfig()
		cfg.Host, cfg.Port, cfg.MQTTPort, cfg.KafkaPort, cfg.HTTPAddr, cfg.StoreDir = "127.0.0.1", 0, -1, -1, "", ""
		cfg.TLSPort, cfg.MQTTTLSPort, cfg.MQTTWSSPort, cfg.KafkaTLSPort, cfg.HTTPSAddr = 0, 0, 0, 0, "127.0.0.1:0"
		cfg.TLSCertFile, cfg.TLSKeyFile = cs.ServerFiles.Cert, cs.ServerFiles.Key
		tc.mutate(&cfg)
		if _, err := server.New(cfg, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

func TestTLSMonitoring(t *testing.T) {
	cs := testcerts.New(t)
	s := startTLS(t, cs, nil)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cs.CA.ClientConfig(nil)}}
	resp, err := hc.Get("https://localhost:" + portOf(s.HTTPSAddr()) + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /healthz over TLS: %s %s", resp.Status, body)
	}
	// Plain HTTP on the https port gets no answer.
	plain := &http.Client{Timeout: 5 * time.Second}
	if resp, err := plain.Get("http://localhost:" + portOf(s.HTTPSAddr()) + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP answered on the https port")
		}
	}
}

// TestTLSStalledHandshakeIsBounded: a client that opens a TLS port and says
// nothing is closed after connect_timeout, on every TLS listener, and the
// listener keeps accepting meanwhile.
func TestTLSStalledHandshakeIsBounded(t *testing.T) {
	cs := testcerts.New(t)
	s := startTLS(t, cs, func(c *server.Config) { c.ConnectTimeout = 300 * time.Millisecond })
	for name, a := range map[string]net.Addr{"native": s.TLSAddr(), "mqtt": s.MQTTTLSAddr(), "wss": s.MQTTWSSAddr(),
		"kafka": s.KafkaTLSAddr(), "https": s.HTTPSAddr()} {
		stalled, err := net.Dial("tcp", a.String())
		if err != nil {
			t.Fatal(err)
		}
		defer stalled.Close()
		// Meanwhile a real handshake on the same listener succeeds.
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", a.String(), cs.CA.ClientConfig(nil))
		if err != nil {
			t.Fatalf("%s: handshake beside a stalled one: %v", name, err)
		}
		c.Close()
		start := time.Now()
		_ = stalled.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = stalled.Read(make([]byte, 1))
		if err == nil || time.Since(start) > 3*time.Second {
			t.Fatalf("%s: stalled handshake: read %v after %v, want the server to close it after connect_timeout", name, err, time.Since(start))
		}
	}
}

// TestClientCertificateIdentifiesUser: over TLS with client certificates, the
// certificate alone logs a native client in as the user whose cert_subject it
// carries, with that user's permissions; a MQTT client over TLS likewise.
func TestClientCertificateIdentifiesUser(t *testing.T) {
	cs := testcerts.New(t)
	users := filepath.Join(t.TempDir(), "users.toml")
	data := "[[users]]\nname = \"certuser\"\ncert_subject = \"" + cs.Client.Cert.Subject.String() + "\"\n" +
		"publish = { allow = [\"certs.>\"] }\nsubscribe = { allow = [\"certs.>\"] }\n"
	if err := os.WriteFile(users, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startTLS(t, cs, func(c *server.Config) { c.TLSClientAuth, c.UsersFile = "verify", users })
	url := "tls://" + s.TLSAddr().String()
	nc, err := tern.Connect(url, tern.TLSCAFile(cs.CAFile), tern.TLSClientCert(cs.ClientFiles.Cert, cs.ClientFiles.Key), tern.NoReconnect())
	if err != nil {
		t.Fatalf("certificate login: %v", err)
	}
	defer nc.Close()
	if _, err := nc.SubscribeSync("certs.x"); err != nil {
		t.Fatalf("the certificate's user may subscribe to certs.>: %v", err)
	}
	var we *wire.Error
	if _, err := nc.SubscribeSync("other.x"); !errors.As(err, &we) || we.Code != wire.CodePermission {
		t.Fatalf("subscription outside the certificate user's permissions: %v, want permission denied", err)
	}
	// Without a certificate there are no credentials, and a users file makes
	// anonymous access "none".
	if c, err := tern.Connect(url, tern.TLSCAFile(cs.CAFile), tern.NoReconnect()); err == nil {
		c.Close()
		t.Fatal("a TLS client without certificate or credentials was let in")
	}
}

// TestKafkaSASLOverTLS: SASL_SSL, the combination an operator puts on a network:
// kcat and franz-go log in with SCRAM-SHA-512 inside TLS, a wrong password is
// refused, and the user's permissions hold.
func TestKafkaSASLOverTLS(t *testing.T) {
	cs := testcerts.New(t)
	s := startTLS(t, cs, func(c *server.Config) { c.UsersFile = authtest.File(t) })
	addr := "localhost:" + portOf(s.KafkaTLSAddr())
	saslSSL := func(user, pw string) []string {
		return []string{"-b", addr, "-X", "security.protocol=sasl_ssl", "-X", "ssl.ca.location=" + cs.CAFile,
			"-X", "sasl.mechanisms=SCRAM-SHA-512", "-X", "sasl.username=" + user, "-X", "sasl.password=" + pw}
	}
	// Root makes the topic: a stream capturing sensors.k1, where alice may
	// publish. Alice produces to it over SASL_SSL and root reads it back.
	nc, err := tern.Connect("tls://"+s.TLSAddr().String(), tern.TLSCAFile(cs.CAFile),
		tern.Credentials([]byte(authtest.Root+":"+authtest.RootPassword)), tern.NoReconnect())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := nc.Streams().AddStream(ctx, tern.StreamConfig{Name: "SENS", Subjects: []string{"sensors.k1"}}); err != nil {
		t.Fatal(err)
	}
	lines := []string{"r1", "r2"}
	if _, errOut, err := runIn(t, 30*time.Second, strings.Join(lines, "\n")+"\n", "kcat",
		append(saslSSL(authtest.Alice, authtest.AlicePassword), "-P", "-t", "SENS")...); err != nil {
		t.Fatalf("kcat -P as alice over SASL_SSL: %v\n%s", err, errOut)
	}
	out, errOut, err := run(t, 30*time.Second, "kcat", append(saslSSL(authtest.Root, authtest.RootPassword), "-C", "-t", "SENS", "-o", "beginning", "-e", "-q")...)
	if err != nil {
		t.Fatalf("kcat -C as root over SASL_SSL: %v\n%s", err, errOut)
	}
	if got := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); !slices.Equal(got, lines) {
		t.Fatalf("kcat consumed %q, want %q", got, lines)
	}
	if _, errOut, err := run(t, 20*time.Second, "kcat", append(saslSSL(authtest.Alice, "wrong"), "-L", "-m", "5")...); err == nil || !strings.Contains(strings.ToLower(errOut), "authentication") {
		t.Fatalf("kcat with a wrong password: %v\n%s", err, errOut)
	}
	// franz-go as alice, over TLS: producing outside her permissions is refused.
	alice, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DialTLSConfig(cs.CA.ClientConfig(nil)),
		kgo.SASL(scram.Auth{User: authtest.Alice, Pass: authtest.AlicePassword}.AsSha512Mechanism()), kgo.ProducerBatchMaxBytes(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer alice.Close()
	if err := alice.ProduceSync(ctx, &kgo.Record{Topic: "SENS", Value: []byte("f")}).FirstErr(); err != nil {
		t.Fatalf("alice produces to SENS: %v", err)
	}
	if r, err := kadm.NewClient(alice).CreateTopics(ctx, 1, 1, nil, "ORDERS"); err == nil && r["ORDERS"].Err == nil {
		t.Fatal("alice created a topic")
	}
}

// TestMosquittoPasswordsOverTLS: mosquitto clients over TLS log in with user
// names and passwords; a wrong password is refused and permissions hold.
func TestMosquittoPasswordsOverTLS(t *testing.T) {
	cs := testcerts.New(t)
	s := startTLS(t, cs, func(c *server.Config) { c.UsersFile = authtest.File(t) })
	tlsArgs := []string{"-h", "127.0.0.1", "-p", portOf(s.MQTTTLSAddr()), "--cafile", cs.CAFile}
	root := append(slices.Clone(tlsArgs), "-u", authtest.Root, "-P", authtest.RootPassword)
	alice := append(slices.Clone(tlsArgs), "-u", authtest.Alice, "-P", authtest.AlicePassword)
	before := s.Broker().Count()
	wait := start(t, "mosquitto_sub", append(slices.Clone(root), "-t", "sensors/#", "-q", "1", "-C", "1", "-W", "20", "-F", "%t %p")...)
	waitSubscriptions(t, s, before+1)
	// Alice may not publish on sensors/secret (dropped; MQTT 3 cannot say so), and
	// may on sensors/k1.
	for _, topic := range []string{"sensors/secret", "sensors/k1"} {
		if _, errOut, err := run(t, 20*time.Second, "mosquitto_pub", append(slices.Clone(alice), "-t", topic, "-q", "1", "-m", topic)...); err != nil {
			t.Fatalf("mosquitto_pub as alice to %s: %v\n%s", topic, err, errOut)
		}
	}
	out, err := wait(20 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out); got != "sensors/k1 sensors/k1" {
		t.Fatalf("root's subscriber got %q, want only sensors/k1", got)
	}
	if _, errOut, err := run(t, 20*time.Second, "mosquitto_pub", append(slices.Clone(tlsArgs), "-u", authtest.Alice, "-P", "wrong", "-t", "sensors/k1", "-m", "x")...); err == nil {
		t.Fatalf("a wrong password over TLS was accepted:\n%s", errOut)
	}
}
