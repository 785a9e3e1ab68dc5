package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/tern-mq/tern/bench/internal/harness"
	"github.com/tern-mq/tern/bench/internal/monitoring"
)

// cmdWaitJS waits until every node of a JetStream cluster names the same meta leader
// and the leader sees every other node as current (monitoring.JetStreamMetaReady).
func cmdWaitJS(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := flag.NewFlagSet("replicatedvs wait-js", flag.ContinueOnError)
	fs.SetOutput(stderr)
	monitors := fs.String("monitors", "", "comma-separated monitoring URLs of every node (http://127.0.0.1:24512,...)")
	timeout := fs.Duration("timeout", 60*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	bases := harness.SplitList(*monitors)
	if len(bases) == 0 {
		return errors.New("wait-js: --monitors is required")
	}
	if err := monitoring.WaitJetStreamMeta(ctx, bases, *timeout); err != nil {
		return fmt.Errorf("wait-js: JetStream cluster %w", err)
	}
	return nil
}
