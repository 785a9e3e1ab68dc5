// Package mqtt is Tern's MQTT 3.1, 3.1.1 and 5.0 front end: it accepts MQTT
// connections, keeps MQTT sessions (subscriptions, QoS 1 and 2 messages in flight and
// queued, QoS 2 publishes awaiting release, wills) and retained messages, and maps
// MQTT topics to Tern subjects so MQTT clients publish into and subscribe on the same
// broker as every other front end. The wire codec lives in package mqtt/packet.
//
// A session is the broker Sink of its subscriptions whether or not its client is
// connected: deliveries to an absent client queue (QoS 1 and 2) up to a bound, and are
// sent when it returns. What a session decides — CONNECT negotiation, QoS 1 and 2
// exchanges, the in-flight window and queue, topic aliases, keepalive, wills, expiry —
// is the pure state machine of package mqtt/session; this package drives it: it
// decodes packets into its events, applies its Ready (packets onto the outbound
// queue, records into the store, subscriptions and wills into the broker) and arms
// one timer per offline session from its deadline.
package mqtt
