package main

import (
	"fmt"

	"github.com/tern-mq/tern/bench/internal/jsbus"
	"github.com/tern-mq/tern/bench/internal/streambench"
	"github.com/tern-mq/tern/bench/internal/ternstream"
)

// driverInfo is one broker streamvs can drive.
type driverInfo struct {
	Name       string // as shown in the tables
	DefaultURL string // what --<key>-url defaults to (bench/streams.sh's ports)
	New        func(url string) (streambench.Driver, error)
}

// jsReplay is --js-replay: which of nats.go's ordered consumers the replay row uses.
var jsReplay = jsbus.ReplayPush

// jsLeader is --js-leader: where a replicated JetStream stream's leader is.
var jsLeader = "any"

// knownDrivers are the --drivers keys, in table order. Each has --<key>-url,
// --<key>-pid and --<key>-version flags whether or not its driver is built in, so
// scripts can pass them ahead of time.
var knownDrivers = []string{"js", "tern"}

// registry holds the drivers built into this binary.
var registry = map[string]driverInfo{
	"js": {
		Name:       "JetStream",
		DefaultURL: "nats://127.0.0.1:24222",
		New: func(url string) (streambench.Driver, error) {
			opt, err := jsbus.ReplayMode(jsReplay)
			if err != nil {
				return nil, err
			}
			opts := []jsbus.Option{opt}
			switch jsLeader {
			case "any":
			case "local":
				opts = append(opts, jsbus.LocalLeader())
			default:
				return nil, fmt.Errorf("--js-leader %q: want any or local", jsLeader)
			}
			return jsbus.New(url, opts...), nil
		},
	},

	"tern": {Name: "Tern", DefaultURL: "tern://127.0.0.1:27400", New: ternstream.New},
}
