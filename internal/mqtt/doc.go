// Package mqtt is Tern's MQTT 3.1, 3.1.1 and 5.0 front end: it accepts MQTT
// connections, keeps MQTT sessions (subscriptions, QoS 1 and 2 messages in flight and
// queued, QoS 2 publishes awaiting release, wills) and retained messages, and maps
// MQTT topics to Tern subjects so MQTT clients publish into and subscribe on the same
// broker as every other front end. The wire codec lives in package mqtt/packet.
//
// A session is the broker Sink of its subscriptions whether or not its client is
// connected: deliveries to an absent client queue (QoS 1 and 2) up to a bound, and are
// sent when it returns. The in-flight window and queue are a plain data structure
// (flight) with no I/O, driven by the session under its lock.
package mqtt
