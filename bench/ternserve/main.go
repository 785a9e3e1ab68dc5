// Command ternserve runs the Tern server exactly as `tern server` does, under a CPU
// profile, for looking at where the broker spends its time during a benchmark:
//
//	ternserve --cpuprofile tern.prof --host 127.0.0.1 --port 17400 --http ""
//	go tool pprof -top tern.prof
//
// Every option other than --cpuprofile is passed to the server's own configuration
// (see tern server --help). The profile is written when the process gets SIGINT or
// SIGTERM. bench/run.sh uses it when TERN_CPUPROFILE is set.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/tern-mq/tern/internal/runtimetune"
	"github.com/tern-mq/tern/internal/server"
)

func main() {
	if err := run(os.Args[1:]); err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "ternserve:", err)
		os.Exit(1)
	}
}

// splitProfile takes --cpuprofile FILE (or --cpuprofile=FILE) out of args.
func splitProfile(args []string) (path string, rest []string, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "cpuprofile" {
			rest = append(rest, a)
			continue
		}
		if !hasVal {
			if i+1 >= len(args) {
				return "", nil, errors.New("--cpuprofile needs a file name")
			}
			i++
			val = args[i]
		}
		path = val
	}
	return path, rest, nil
}

func run(args []string) error {
	profPath, rest, err := splitProfile(args)
	if err != nil {
		return err
	}
	cfg, err := server.LoadConfig(rest, server.EnvLookup, os.Stderr)
	if err != nil {
		return err
	}
	log, err := server.NewLogger(cfg, os.Stderr)
	if err != nil {
		return err
	}
	runtimetune.Apply(cfg, log)
	s, err := server.New(cfg, log)
	if err != nil {
		return err
	}
	if profPath != "" {
		f, err := os.Create(profPath)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := s.Start(); err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.Shutdown(sctx)
}
