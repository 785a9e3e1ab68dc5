package server

import (
	"errors"
	"fmt"

	"github.com/tern-mq/tern/internal/transport/udp"
)

// loadUDPKeys reads the key files the configuration names into the UDP listener's
// configuration. Keys live in files of their own, not in the configuration, so the
// configuration can be shared and logged while the key stays readable by the server
// alone.
func loadUDPKeys(ucfg *udp.Config, cfg Config) error {
	if cfg.UDPPSKFile != "" && cfg.UDPKeyFile == "" {
		return errors.New("udp_psk_file needs udp_key_file")
	}
	if cfg.UDPKeyFile != "" {
		k, err := udp.ReadKeyFile(cfg.UDPKeyFile)
		if err != nil {
			return fmt.Errorf("udp_key_file: %w", err)
		}
		ucfg.PrivateKey = k
	}
	if cfg.UDPPSKFile != "" {
		k, err := udp.ReadKeyFile(cfg.UDPPSKFile)
		if err != nil {
			return fmt.Errorf("udp_psk_file: %w", err)
		}
		ucfg.PSK = k
	}
	return nil
}
