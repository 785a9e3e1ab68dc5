package main

import (
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
			return jsbus.New(url, opt), nil
		},
	},

	"tern": {Name: "Tern", DefaultURL: "tern://127.0.0.1:27400", New: ternstream.New},
}
