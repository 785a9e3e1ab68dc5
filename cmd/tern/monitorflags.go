package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tern-mq/tern/internal/monitor"
)

// defaultMonitorURL is the monitoring endpoint of a server with every default, on
// this machine.
var defaultMonitorURL = "http://127.0.0.1:" + strconv.Itoa(monitor.DefaultPort)

// monitorFlags are the options of the commands that read a server's HTTP
// monitoring endpoint (tern cluster) instead of speaking the protocol.
type monitorFlags struct {
	fs      *pflag.FlagSet
	url     string
	context string
	timeout time.Duration
}

func (m *monitorFlags) register(cmd *cobra.Command) {
	m.fs = cmd.Flags()
	m.fs.StringVar(&m.url, "monitor", defaultMonitorURL, "the server's monitoring endpoint, `URL` or HOST[:PORT] (its http option)")
	_ = m.fs.SetAnnotation("monitor", defaultAnnotation, []string{"$TERN_MONITOR_URL, else the context's monitor, else port " +
		strconv.Itoa(monitor.DefaultPort) + " on the host of $TERN_URL or of the context's server, else " + defaultMonitorURL})
	registerContextFlag(cmd, &m.context, "take the monitoring endpoint from this saved `context` (its monitor, else its server's host)")
	m.fs.DurationVar(&m.timeout, "timeout", 2*time.Second, "limit on the HTTP request")
}

// resolve fills in the endpoint when --monitor is not given: $TERN_MONITOR_URL,
// the context's monitor, else the monitoring port on the host of the server the
// client commands would use. A context that cannot be read is an error even when
// it would not be used, as for the client commands.
func (m *monitorFlags) resolve() error {
	ctx, _, err := contextFor(m.context)
	if err != nil {
		return err
	}
	if ctx == nil {
		ctx = &ternContext{}
	}
	raw := m.url
	switch {
	case m.fs.Changed("monitor"):
	case os.Getenv("TERN_MONITOR_URL") != "":
		raw = os.Getenv("TERN_MONITOR_URL")
	case ctx.Monitor != "":
		raw = ctx.Monitor
	case os.Getenv("TERN_URL") != "":
		raw = monitorURLFor(os.Getenv("TERN_URL"))
	case ctx.Server != "":
		raw = monitorURLFor(ctx.Server)
	}
	u, err := normalizeMonitorURL(raw)
	if err != nil {
		return err
	}
	m.url = u
	return nil
}

// normalizeMonitorURL accepts what an operator types for a monitoring endpoint:
// a URL, or HOST[:PORT] meaning http:// and port 7480 when none is given.
func normalizeMonitorURL(raw string) (string, error) {
	s := strings.TrimSpace(raw)
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", usageErrorf("monitoring endpoint %q: want http://HOST:PORT or HOST[:PORT]", raw)
	}
	if u.Port() == "" {
		u.Host = net.JoinHostPort(u.Hostname(), strconv.Itoa(monitor.DefaultPort))
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// monitorURLFor guesses the monitoring endpoint of the server client commands
// connect to: the default monitoring port on the host of its first URL.
func monitorURLFor(servers string) string {
	first, _, _ := strings.Cut(servers, ",")
	first = strings.TrimSpace(first)
	if !strings.Contains(first, "://") {
		first = "tern://" + first
	}
	u, err := url.Parse(first)
	if err != nil || u.Hostname() == "" {
		return defaultMonitorURL
	}
	return "http://" + net.JoinHostPort(u.Hostname(), strconv.Itoa(monitor.DefaultPort))
}

// get reads one path of the monitoring endpoint and returns its body; an answer
// other than 200 OK is an error carrying what the server said.
func (m *monitorFlags) get(ctx context.Context, path string) ([]byte, error) {
	if err := m.resolve(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	target := m.url + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", target, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w (is the server's monitoring endpoint there? see --monitor)", target, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("GET %s: reading the answer: %w", target, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", target, resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}

// registerContextFlag adds --context, naming the saved context options come from;
// help says which.
func registerContextFlag(cmd *cobra.Command, p *string, help string) {
	fs := cmd.Flags()
	fs.StringVar(p, "context", "", help)
	_ = fs.SetAnnotation("context", defaultAnnotation, []string{"the selected one, if any"})
	_ = cmd.RegisterFlagCompletionFunc("context", completeContexts)
}
