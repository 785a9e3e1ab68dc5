package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tern-mq/tern/internal/runtimetune"
	"github.com/tern-mq/tern/internal/server"
)

const serverExample = `  tern server                                    # every default: native :7400, MQTT :1883, HTTP :7480
  tern server --config /etc/tern/tern.toml --log-format json
  tern server --host 127.0.0.1 --port 17400 --http "" --store-dir ""
  TERN_MAX_PENDING=128MiB tern server --sync always`

func newServerCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "server [options]",
		Short: "Run the broker",
		Long: "Runs the broker until SIGINT or SIGTERM, then shuts down cleanly. SIGHUP reloads\n" +
			"the TLS certificate, key, CA and CRL files, of the listeners and of the cluster's\n" +
			"routes (docs/security.md).\n\n" + server.OptionsIntro,
		Example: serverExample,
		Args:    argsBetween(0, 0, ""),
	}
	cf := server.AddConfigFlags(cmd.Flags())
	for _, o := range server.Options() {
		if o.Values != nil {
			_ = cmd.RegisterFlagCompletionFunc(o.Flag, cobra.FixedCompletions(o.Values, cobra.ShellCompDirectiveNoFileComp))
		}
	}
	cmd.SetUsageFunc(func(c *cobra.Command) error {
		w := c.OutOrStderr()
		fmt.Fprintf(w, "Usage:\n  %s\n\nExamples:\n%s\n\n", c.UseLine(), c.Example)
		server.WriteOptionsHelp(w, [2]string{"-h, --help", "show this help"})
		return nil
	})
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := cf.Load(server.EnvLookup)
		if err != nil {
			return err
		}
		return serve(cmd.Context(), cfg)
	}
	return cmd
}

// serve runs the server until ctx ends; tests replace it to see the configuration.
var serve = runServer

func runServer(ctx context.Context, cfg server.Config) error {
	log, err := server.NewLogger(cfg, os.Stderr)
	if err != nil {
		return err
	}
	server.Version = version
	runtimetune.Apply(cfg, log)
	// From before the server starts: SIGHUP's default is to end the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	s, err := server.New(cfg, log)
	if err != nil {
		return err
	}
	if err := s.Start(); err != nil {
		return err
	}
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-hup:
			log.Info("SIGHUP: reloading")
			_ = s.Reload() // logs what it did; a part that fails keeps its old files
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.Shutdown(sctx)
}
