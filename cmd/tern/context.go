package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// A connection context, as in `nats context`: a named server and the client
// options that go with it, saved under the user's configuration directory
// ($XDG_CONFIG_HOME/tern, else ~/.config/tern):
//
//	context/<name>.json   one context
//	context.txt           the name of the selected context
//
// Client commands take their server from --server, else $TERN_URL, else the
// context named by --context, else the selected context, else the default URL.
// The commands that read the monitoring endpoint (tern cluster) take it likewise
// from --monitor, $TERN_MONITOR_URL, then the context's monitor.
type ternContext struct {
	Description string `json:"description,omitempty"`
	Server      string `json:"server"`
	Creds       string `json:"creds,omitempty"`
	UDPKey      string `json:"udp_key,omitempty"`
	UDPPSKFile  string `json:"udp_psk_file,omitempty"`
	// TLS files for tls:// servers, absolute paths.
	TLSCA   string `json:"tls_ca,omitempty"`
	TLSCert string `json:"tls_cert,omitempty"`
	TLSKey  string `json:"tls_key,omitempty"`
	// Monitor is the server's monitoring endpoint, for the commands that read it
	// (tern cluster); empty means port 7480 on the host of Server.
	Monitor string `json:"monitor,omitempty"`
}

// configDir is where Tern keeps the client's configuration.
func configDir() (string, error) {
	if d := os.Getenv("XDG_CONFIG_HOME"); d != "" {
		return filepath.Join(d, "tern"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return "", fmt.Errorf("no configuration directory: set XDG_CONFIG_HOME or HOME")
	}
	return filepath.Join(home, ".config", "tern"), nil
}

var contextNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)

// checkContextName refuses names that are not plain file names: path separators,
// leading dots, spaces and other characters a shell would mangle.
func checkContextName(name string) error {
	if !contextNameRE.MatchString(name) {
		return usageErrorf("context name %q: want up to 64 letters, digits, '.', '_', '@' or '-', starting with a letter or digit", name)
	}
	return nil
}

func contextFile(name string) (string, error) {
	if err := checkContextName(name); err != nil {
		return "", err
	}
	dir, err := configDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "context", name+".json"), nil
}

func selectedFile() (string, error) {
	dir, err := configDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "context.txt"), nil
}

// errNoContext is a context that does not exist.
var errNoContext = errors.New("no such context")

func loadContext(name string) (*ternContext, error) {
	path, err := contextFile(name)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("context %q: %w (see tern context ls)", name, errNoContext)
	}
	if err != nil {
		return nil, err
	}
	var c ternContext
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("context %q: %s: %w", name, path, err)
	}
	return &c, nil
}

// saveContext writes a context privately (it may hold credentials), through a
// temporary file so that a crash leaves the old one or the new one.
func saveContext(name string, c *ternContext) error {
	path, err := contextFile(name)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return writePrivate(path, append(b, '\n'))
}

func writePrivate(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// selectedContext is the name of the selected context, "" when none is.
func selectedContext() (string, error) {
	path, err := selectedFile()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	return strings.TrimSpace(string(b)), err
}

func selectContext(name string) error {
	path, err := selectedFile()
	if err != nil {
		return err
	}
	return writePrivate(path, []byte(name+"\n"))
}

func listContexts() ([]string, error) {
	dir, err := configDir()
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(filepath.Join(dir, "context"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".json"); ok && !e.IsDir() && checkContextName(name) == nil {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names, nil
}

// contextFor is the context client options come from: the one named by
// --context, else the selected one; nil when neither is.
func contextFor(name string) (*ternContext, string, error) {
	if name == "" {
		sel, err := selectedContext()
		if err != nil || sel == "" {
			return nil, "", err
		}
		c, err := loadContext(sel)
		if err != nil {
			return nil, "", fmt.Errorf("selected %w; tern context select another or tern context rm %s", err, sel)
		}
		return c, sel, nil
	}
	c, err := loadContext(name)
	return c, name, err
}

// completeContexts offers the saved context names.
func completeContexts(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	names, _ := listContexts()
	return names, cobra.ShellCompDirectiveNoFileComp
}

// ---------------------------------------------------------------------------------
// tern context

const contextLong = `Saves servers and the client options that go with them under names, as
'nats context' does, so that client commands need no --server. The contexts
live in $XDG_CONFIG_HOME/tern/context (else ~/.config/tern/context), one JSON
file each; context.txt beside it names the selected one.

Client commands (pub, sub, req, reply, bench, stream, consumer) take the server
from --server, else $TERN_URL, else the context named by --context, else the
selected context, else tern://127.0.0.1:7400. --creds, --udp-key ($TERN_UDP_KEY),
--udp-psk-file, --tls-ca, --tls-cert and --tls-key given on the command line
likewise win over the context's.
The commands that read the server's monitoring endpoint (tern cluster) take it
from --monitor, else $TERN_MONITOR_URL, else the context's monitor, else port
7480 on the host of the server.`

func newContextCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "context <command>",
		Short: "Save and select servers to connect to (add, select, ls, show, rm)",
		Long:  contextLong,
		Example: `  tern context add local --server tern://127.0.0.1:7400 --description "my laptop"
  tern context add prod --server tern://a.example:7400,tern://b.example:7400 --creds s3cret --select
  tern context add prod --monitor http://a.example:9090   # where tern cluster reads it
  tern context ls
  tern sub 'orders.>'                     # on prod, the selected context
  tern sub --context local 'orders.>'     # on local, this once`,
		Args: groupArgs,
		RunE: showUsage,
	}
	cmd.AddCommand(newContextAddCmd(), newContextSelectCmd(), newContextListCmd(), newContextShowCmd(), newContextRemoveCmd())
	return cmd
}

func newContextAddCmd() *cobra.Command {
	var (
		c      ternContext
		choose bool
	)
	cmd := &cobra.Command{
		Use:   "add <name> [options]",
		Short: "Create a context, or change the options given of an existing one",
		Example: `  tern context add local --server tern://127.0.0.1:7400 --select
  tern context add edge --server udp://10.0.0.5:7400 --udp-key "$(cat server.pub)"
  tern context add secure --server tls://broker.example:7443 --tls-ca ca.pem --tls-cert me.pem --tls-key me-key.pem
  tern context add prod --description "production, EU"   # change only the description`,
		Args: argsBetween(1, 1, "want a context name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			old, err := loadContext(name)
			existed := err == nil
			switch {
			case errors.Is(err, errNoContext):
				if c.Server == "" {
					return usageErrorf("a new context needs --server")
				}
				old = &ternContext{}
			case err != nil:
				return err
			}
			fs := cmd.Flags()
			set := func(flag string, dst *string, v string) {
				if fs.Changed(flag) {
					*dst = v
				}
			}
			set("server", &old.Server, c.Server)
			set("description", &old.Description, c.Description)
			set("creds", &old.Creds, c.Creds)
			set("udp-key", &old.UDPKey, c.UDPKey)
			if fs.Changed("udp-psk-file") && c.UDPPSKFile != "" {
				// A relative path would change meaning with the working directory.
				if c.UDPPSKFile, err = filepath.Abs(c.UDPPSKFile); err != nil {
					return err
				}
			}
			set("udp-psk-file", &old.UDPPSKFile, c.UDPPSKFile)
			for _, f := range []struct {
				flag     string
				dst, val *string
			}{{"tls-ca", &old.TLSCA, &c.TLSCA}, {"tls-cert", &old.TLSCert, &c.TLSCert}, {"tls-key", &old.TLSKey, &c.TLSKey}} {
				if fs.Changed(f.flag) && *f.val != "" {
					if *f.val, err = filepath.Abs(*f.val); err != nil {
						return err
					}
				}
				set(f.flag, f.dst, *f.val)
			}
			if fs.Changed("monitor") && c.Monitor != "" {
				if c.Monitor, err = normalizeMonitorURL(c.Monitor); err != nil {
					return err
				}
			}
			set("monitor", &old.Monitor, c.Monitor)
			if old.Server == "" {
				return usageErrorf("--server must not be empty")
			}
			if err := saveContext(name, old); err != nil {
				return err
			}
			verb := "created"
			if existed {
				verb = "updated"
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "Context %s %s (server %s)\n", name, verb, old.Server)
			if choose {
				if err := selectContext(name); err != nil {
					return err
				}
				fmt.Fprintf(out, "Context %s selected\n", name)
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&c.Server, "server", "", "server `URL`s, comma-separated (needed for a new context)")
	fs.StringVar(&c.Description, "description", "", "free text shown by tern context ls")
	fs.StringVar(&c.Creds, "creds", "", "`credentials` sent in CONNECT")
	fs.StringVar(&c.UDPKey, "udp-key", "", "the server's public `key` (tern udp-keygen): udp:// sessions are encrypted")
	fs.StringVar(&c.UDPPSKFile, "udp-psk-file", "", "`file` with the pre-shared key of a server that has udp_psk_file (saved as an absolute path)")
	registerTLSFlags(fs, &c.TLSCA, &c.TLSCert, &c.TLSKey)
	fs.StringVar(&c.Monitor, "monitor", "", "the server's monitoring endpoint, `URL` or HOST[:PORT], for tern cluster (empty: port 7480 on the server's host)")
	fs.BoolVar(&choose, "select", false, "also select the context")
	return cmd
}

func newContextSelectCmd() *cobra.Command {
	return &cobra.Command{
		Use:               "select <name>",
		Short:             "Select the context client commands use",
		Args:              argsBetween(1, 1, "want a context name"),
		ValidArgsFunction: completeContexts,
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := loadContext(args[0]); err != nil {
				return err
			}
			if err := selectContext(args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Context %s selected\n", args[0])
			return nil
		},
	}
}

func newContextListCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the contexts, the selected one marked with *",
		Args:    argsBetween(0, 0, ""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return printContexts(cmd.OutOrStdout())
		},
	}
}

func printContexts(out io.Writer) error {
	names, err := listContexts()
	if err != nil {
		return err
	}
	sel, err := selectedContext()
	if err != nil {
		return err
	}
	if len(names) == 0 {
		fmt.Fprintln(out, "No contexts (tern context add NAME --server URL)")
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  NAME\tSERVER\tDESCRIPTION")
	for _, n := range names {
		mark := " "
		if n == sel {
			mark = "*"
		}
		c, err := loadContext(n)
		if err != nil {
			fmt.Fprintf(tw, "%s %s\t(unreadable: %v)\t\n", mark, n, err)
			continue
		}
		fmt.Fprintf(tw, "%s %s\t%s\t%s\n", mark, n, c.Server, c.Description)
	}
	return tw.Flush()
}

func newContextShowCmd() *cobra.Command {
	return &cobra.Command{
		Use:               "show [name]",
		Short:             "Show a context (the selected one when no name is given)",
		Args:              argsBetween(0, 1, ""),
		ValidArgsFunction: completeContexts,
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			c, name, err := contextFor(name)
			if err != nil {
				return err
			}
			if c == nil {
				return errors.New("no context is selected (tern context select NAME)")
			}
			sel, err := selectedContext()
			if err != nil {
				return err
			}
			path, _ := contextFile(name)
			selected := ""
			if name == sel {
				selected = " (selected)"
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintf(tw, "Context %s%s\n", name, selected)
			fmt.Fprintf(tw, "  description:\t%s\n", orDefault(c.Description, "-"))
			fmt.Fprintf(tw, "  server:\t%s\n", c.Server)
			creds := "-"
			if c.Creds != "" {
				creds = "set (not shown)"
			}
			fmt.Fprintf(tw, "  creds:\t%s\n", creds)
			fmt.Fprintf(tw, "  udp key:\t%s\n", orDefault(c.UDPKey, "-"))
			fmt.Fprintf(tw, "  udp psk file:\t%s\n", orDefault(c.UDPPSKFile, "-"))
			fmt.Fprintf(tw, "  tls ca:\t%s\n", orDefault(c.TLSCA, "-"))
			fmt.Fprintf(tw, "  tls cert:\t%s\n", orDefault(c.TLSCert, "-"))
			fmt.Fprintf(tw, "  tls key:\t%s\n", orDefault(c.TLSKey, "-"))
			fmt.Fprintf(tw, "  monitor:\t%s\n", orDefault(c.Monitor, monitorURLFor(c.Server)+" (from the server)"))
			fmt.Fprintf(tw, "  file:\t%s\n", path)
			return tw.Flush()
		},
	}
}

func newContextRemoveCmd() *cobra.Command {
	return &cobra.Command{
		Use:               "rm <name>",
		Short:             "Delete a context (and the selection, if it was selected)",
		Args:              argsBetween(1, 1, "want a context name"),
		ValidArgsFunction: completeContexts,
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			path, err := contextFile(name)
			if err != nil {
				return err
			}
			if err := os.Remove(path); errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("context %q: %w", name, errNoContext)
			} else if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Context %s deleted\n", name)
			if sel, err := selectedContext(); err == nil && sel == name {
				p, err := selectedFile()
				if err != nil {
					return err
				}
				if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), "No context is selected now")
			}
			return nil
		},
	}
}
