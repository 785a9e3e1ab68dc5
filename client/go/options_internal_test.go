package tern

import (
	"errors"
	"testing"
	"time"
)

// TestUDPConfigFromOptions: the udp:// options reach the session configuration; a
// bundling delay of 0 turns bundling off, and keys of the wrong size are refused.
func TestUDPConfigFromOptions(t *testing.T) {
	o := DefaultOptions()
	cfg, err := o.udpConfig()
	if err != nil || cfg.BundleDelay != time.Millisecond || cfg.IdleTimeout != 0 {
		t.Fatalf("defaults: %+v %v", cfg, err)
	}
	UDPBundleDelay(0)(&o)
	UDPIdleTimeout(time.Minute)(&o)
	if cfg, _ = o.udpConfig(); cfg.BundleDelay >= 0 || cfg.IdleTimeout != time.Minute {
		t.Fatalf("bundling off, idle 1m: %+v", cfg)
	}
	UDPServerKey([]byte("short"))(&o)
	if _, err := o.udpConfig(); !errors.Is(err, ErrBadOption) {
		t.Fatalf("a 5-byte server key: %v", err)
	}
}
