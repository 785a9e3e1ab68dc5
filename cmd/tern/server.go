package main

import (
	"context"
	"os"
	"time"

	"github.com/tern-mq/tern/internal/server"
)

func init() {
	register(command{name: "server", summary: "run the broker", run: runServer})
}

func runServer(ctx context.Context, args []string) error {
	cfg, err := server.LoadConfig(args, server.EnvLookup, os.Stderr)
	if err != nil {
		return err
	}
	log, err := server.NewLogger(cfg, os.Stderr)
	if err != nil {
		return err
	}
	server.Version = version
	s, err := server.New(cfg, log)
	if err != nil {
		return err
	}
	if err := s.Start(); err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.Shutdown(sctx)
}
