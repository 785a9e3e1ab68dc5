package tern

import (
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/tern-mq/tern/internal/testenv/testcerts"
)

func TestTLSURLsAndOptions(t *testing.T) {
	got, err := parseServers("tls://a.example:7443, tls://[::1], tern://b.example:7400")
	if want := []string{"tls://a.example:7443", "tls://[::1]:7400", "b.example:7400"}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("parseServers: %q, %v; want %q", got, err, want)
	}
	if _, err := parseServers("https://a.example"); !errors.Is(err, ErrBadURL) || !strings.Contains(err.Error(), "tls://") {
		t.Fatalf("an unknown scheme: %v", err)
	}
	if urlOf("tls://a.example:7443") != "tls://a.example:7443" {
		t.Fatal("urlOf lost the tls:// scheme")
	}

	cs := testcerts.New(t)
	o := DefaultOptions()
	TLSCAFile(cs.CAFile)(&o)
	TLSClientCert(cs.ClientFiles.Cert, cs.ClientFiles.Key)(&o)
	TLSServerName("localhost")(&o)
	cfg, err := o.tlsConfig()
	if err != nil || cfg.RootCAs == nil || len(cfg.Certificates) != 1 || cfg.ServerName != "localhost" {
		t.Fatalf("tlsConfig: %+v, %v", cfg, err)
	}
	TLSCAFile(cs.Dir + "/missing.pem")(&o)
	if _, err := o.tlsConfig(); !errors.Is(err, ErrBadOption) || !strings.Contains(err.Error(), "missing.pem") {
		t.Fatalf("a missing CA file: %v", err)
	}
	o = DefaultOptions()
	TLSClientCert(cs.ClientFiles.Cert, "")(&o)
	if _, err := o.tlsConfig(); !errors.Is(err, ErrBadOption) {
		t.Fatalf("a certificate without its key: %v", err)
	}
}

// TestTLSClientLearnsOnlyTLSServers: a client given a tls:// server takes only the
// tls:// URLs the cluster announces (never a plaintext one), and a plaintext
// client only the others.
func TestTLSClientLearnsOnlyTLSServers(t *testing.T) {
	announced := []string{"tern://n2:7400", "tls://n2:7443", "tern://n3:7400", "tls://n3:7443"}
	for _, tc := range []struct {
		given string
		want  []string
	}{
		{"tls://n1:7443", []string{"tls://n2:7443", "tls://n3:7443"}},
		{"tern://n1:7400", []string{"n2:7400", "n3:7400"}},
	} {
		given, _ := parseServers(tc.given)
		c := &Conn{given: given, servers: given, url: given[0], log: slog.New(slog.DiscardHandler)}
		c.learnLocked(announced)
		got := slices.Clone(c.discovered)
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("given %s: learned %q, want %q", tc.given, got, tc.want)
		}
	}
}
