// Package server assembles a Tern broker process: it reads configuration (defaults, a
// TOML file, TERN_* environment variables and command-line flags, in rising order of
// precedence), creates the broker core, opens the listeners of each front end and the
// HTTP monitoring endpoint, and shuts them down in order.
//
// It owns configuration and lifecycle only; routing lives in package broker and each
// protocol in its own package.
package server
