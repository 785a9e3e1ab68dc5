// Package purity checks that the packages holding the project's state machines stay
// pure: no sockets, files or processes (net, os, syscall), no wall clock (time.Now
// and the timers), no goroutines. Replicas apply the same events to these machines
// and must reach the same state; tests replay them in virtual time. The check is a
// test (purity_test.go) over the list in Pure.
package purity

// Pure lists the state-machine packages, relative to the repository root.
var Pure = []string{
	"internal/transport/arq",
	"internal/stream/consumer",
	"internal/cluster/interest",
	"internal/cluster/meta",
	"internal/mqtt/session",
}
