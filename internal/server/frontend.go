package server

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/tern-mq/tern/internal/kafka"
	"github.com/tern-mq/tern/internal/monitor"
	"github.com/tern-mq/tern/internal/mqtt"
	"github.com/tern-mq/tern/internal/native"
	"github.com/tern-mq/tern/internal/outbound"
)

// Frontend is one listener of the server: native TCP, native UDP, MQTT, MQTT over
// WebSocket, the Kafka API, monitoring, the TLS listeners of each (and the
// cluster's routes after them).
// Adding a listener means adding a Frontend; Start, Shutdown, /status and
// /connections treat them all alike.
type Frontend interface {
	// Name is the listener's name in /status ("native", "native_tls", "udp",
	// "mqtt", "mqtt_ws", "mqtt_tls", "mqtt_wss", "kafka", "kafka_tls", "http",
	// "https").
	Name() string
	// Addr is the address the listener is bound to.
	Addr() net.Addr
	// Serve accepts connections until Shutdown; it returns nil after Shutdown.
	Serve() error
	// Shutdown stops accepting, ends the listener's connections and waits for them
	// until ctx ends. Listeners that share a protocol server (native TCP and UDP;
	// MQTT and MQTT over WebSocket) end its connections together.
	Shutdown(ctx context.Context) error
	// Stats are the counters of the listener's connections, live and gone.
	Stats() monitor.ListenerStats
	// Connections describes the listener's live connections.
	Connections() []monitor.ConnInfo
}

// once runs a shared protocol server's shutdown for the first front end that asks
// and gives every caller its result.
type once struct {
	once sync.Once
	err  error
}

func (o *once) do(fn func() error) error {
	o.once.Do(func() { o.err = fn() })
	return o.err
}

// timeoutOf turns a context's deadline into the timeout the protocol servers take.
func timeoutOf(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return max(time.Until(dl), 0)
	}
	return 5 * time.Second
}

// nativeFrontend is a listener of the native protocol: TCP, or reliable UDP sessions.
type nativeFrontend struct {
	name, transport string
	ln              net.Listener
	srv             *native.Server
	stop            *once
}

func (f *nativeFrontend) Name() string   { return f.name }
func (f *nativeFrontend) Addr() net.Addr { return f.ln.Addr() }
func (f *nativeFrontend) Serve() error   { return f.srv.Serve(f.ln) }

func (f *nativeFrontend) Shutdown(ctx context.Context) error {
	_ = f.ln.Close()
	return f.stop.do(func() error { return f.srv.Shutdown(timeoutOf(ctx)) })
}

func (f *nativeFrontend) Stats() monitor.ListenerStats {
	return listenerStats(f.srv.TransportStats(f.transport))
}

// listenerStats is how /status shows a listener's connection counters.
func listenerStats(t outbound.Totals) monitor.ListenerStats {
	return monitor.ListenerStats{
		Connections: t.Connections, TotalConnections: t.TotalConnections,
		InMsgs: t.InMsgs, OutMsgs: t.OutMsgs, InBytes: t.InBytes, OutBytes: t.OutBytes,
		SlowConsumers: t.SlowConsumers, DroppedMsgs: t.Dropped,
	}
}

func (f *nativeFrontend) Connections() []monitor.ConnInfo {
	conns := f.srv.TransportConnections(f.transport)
	out := make([]monitor.ConnInfo, len(conns))
	for i, c := range conns {
		out[i] = monitor.ConnInfo{
			ID: c.ID, Name: c.Name, Remote: c.Remote, Protocol: "native", Transport: c.Transport, Start: c.Start,
			Subscriptions: c.Subscriptions, InMsgs: c.InMsgs, OutMsgs: c.OutMsgs,
			InBytes: c.InBytes, OutBytes: c.OutBytes, PendingBytes: c.Pending, Dropped: c.Dropped,
			SlowConsumer: c.SlowConsumer,
		}
	}
	return out
}

// mqttFrontend is an MQTT listener: plain TCP, or WebSocket when ws is set.
type mqttFrontend struct {
	name, transport string
	ln              net.Listener
	srv             *mqtt.Server
	ws              *http.Server // nil for TCP
	stop            *once
}

func (f *mqttFrontend) Name() string   { return f.name }
func (f *mqttFrontend) Addr() net.Addr { return f.ln.Addr() }

func (f *mqttFrontend) Serve() error {
	if f.ws == nil {
		// Shutdown closes the listener before the server, so Serve may see either.
		if err := f.srv.Serve(f.ln); !errors.Is(err, mqtt.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			return err
		}
		return nil
	}
	if err := f.ws.Serve(f.ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (f *mqttFrontend) Shutdown(ctx context.Context) error {
	if f.ws != nil {
		_ = f.ws.Close() // upgraded connections are the MQTT server's to close
	}
	_ = f.ln.Close() // Close closes only listeners Serve was given

	return f.stop.do(func() error { return f.srv.Shutdown(timeoutOf(ctx)) })
}

func (f *mqttFrontend) Stats() monitor.ListenerStats {
	return listenerStats(f.srv.TransportStats(f.transport).Totals)
}

func (f *mqttFrontend) Connections() []monitor.ConnInfo {
	conns := f.srv.TransportConnections(f.transport)
	out := make([]monitor.ConnInfo, len(conns))
	for i, c := range conns {
		proto := "mqtt3.1.1"
		switch c.Version {
		case 3:
			proto = "mqtt3.1"
		case 5:
			proto = "mqtt5"
		}
		out[i] = monitor.ConnInfo{
			ID: c.ID, Name: c.ClientID, Remote: c.Remote, Protocol: proto, Transport: c.Transport, Start: c.Start,
			Subscriptions: c.Subscriptions, InMsgs: c.InMsgs, OutMsgs: c.OutMsgs,
			InBytes: c.InBytes, OutBytes: c.OutBytes, PendingBytes: c.Pending, Dropped: c.Dropped,
			SlowConsumer: c.SlowConsumer,
		}
	}
	return out
}

// kafkaFrontend is a Kafka API listener: plain TCP, or TLS (transport "tls").
type kafkaFrontend struct {
	name, transport string
	ln              net.Listener
	srv             *kafka.Server
}

func (f *kafkaFrontend) Name() string   { return f.name }
func (f *kafkaFrontend) Addr() net.Addr { return f.ln.Addr() }

func (f *kafkaFrontend) Serve() error {
	serve := f.srv.Serve
	if f.transport == "tls" {
		serve = f.srv.ServeTLS
	}
	if err := serve(f.ln); !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}

func (f *kafkaFrontend) Shutdown(ctx context.Context) error {
	_ = f.ln.Close()
	return f.srv.Shutdown(timeoutOf(ctx))
}

func (f *kafkaFrontend) Stats() monitor.ListenerStats {
	return listenerStats(f.srv.TransportStats(f.transport))
}

func (f *kafkaFrontend) Connections() []monitor.ConnInfo {
	var out []monitor.ConnInfo
	for _, c := range f.srv.Connections() {
		if c.Transport != f.transport {
			continue
		}
		out = append(out, monitor.ConnInfo{
			ID: c.ID, Name: c.ClientID, Remote: c.Remote, Protocol: "kafka", Transport: c.Transport, Start: c.Start,
			InMsgs: c.InMsgs, OutMsgs: c.OutMsgs, InBytes: c.InBytes, OutBytes: c.OutBytes, PendingBytes: c.Pending,
		})
	}
	return out
}

// monitorFrontend is an HTTP monitoring endpoint ("http", or "https" over TLS): it
// has no client connections of its own to report.
type monitorFrontend struct {
	name string
	ln   net.Listener
	srv  *monitor.Server
}

func (f *monitorFrontend) Name() string                    { return f.name }
func (f *monitorFrontend) Addr() net.Addr                  { return f.ln.Addr() }
func (f *monitorFrontend) Serve() error                    { return f.srv.Serve(f.ln) }
func (f *monitorFrontend) Stats() monitor.ListenerStats    { return monitor.ListenerStats{} }
func (f *monitorFrontend) Connections() []monitor.ConnInfo { return nil }

func (f *monitorFrontend) Shutdown(context.Context) error {
	err := f.srv.Close()
	_ = f.ln.Close() // when Close came before Serve
	return err
}
