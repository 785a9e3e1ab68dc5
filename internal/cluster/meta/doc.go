// Package meta is the cluster's catalogue: the state the meta Raft group replicates
// to every node. It owns the list of nodes and their tags, the definitions of
// streams and consumers, where each stream partition's replicas live (its Raft group
// and the nodes of that group), and the MQTT client-id registry (which node a client
// is connected to, so a takeover on another node closes the old connection).
//
// State is a deterministic state machine: Apply takes a command as it was committed
// to the meta group's log, with the log index, and changes the state the same way on
// every node. It reads no clock (times come inside commands, stamped by the node that
// proposed them), does no I/O and starts no goroutine. Commands are JSON
// (EncodeCommand, decoded by Apply), so the log can be read by a person; a command
// that does not decode is refused with ErrBadCommand and changes nothing.
//
// Placement is part of Apply: a new stream partition's replicas are chosen from the
// nodes the state knows, spread across zones when nodes have a "zone" tag, least
// loaded first, so every node computes the same placement without asking anyone.
//
// The driver (internal/cluster) proposes commands through the meta group
// (internal/replica), waits for their index to be applied locally, and answers the
// client with the Result Apply gave. Snapshot and Restore move the whole state.
package meta
