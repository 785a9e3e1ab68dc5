package stream

import (
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/replica"
	"github.com/tern-mq/tern/internal/store"
	"github.com/tern-mq/tern/internal/streamapi"
)

// TestReplicatedCompressionUpdate: a change of compression reaches every
// partition's log on every replica, through the partition's machine (the log's
// writer), and the replicas go on storing the same messages.
func TestReplicatedCompressionUpdate(t *testing.T) {
	net := replica.NewLocalNetwork()
	const parts = 2
	cfg := streamapi.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, Partitions: parts}
	nodes := startReplNodes(t, net, cfg)
	leader := leaderOf(t, nodes)
	const first, total = 40, 120
	for i := 1; i <= first; i++ {
		leader.publish(t, i)
	}
	for _, n := range nodes {
		for p, m := range n.s.repl.machines {
			if c := store.Compression(m.compression.Load()); c != store.CompressNone {
				t.Fatalf("node %d, partition %d: compression %v before the update", n.id, p, c)
			}
		}
	}
	// Every node applies the catalogue's new configuration, as the cluster's
	// reconciliation does.
	cfg.Compression = "s2"
	before := make(map[*replNode][]uint64)
	for _, n := range nodes {
		for _, l := range n.s.parts {
			before[n] = append(before[n], l.State().LastSeq)
		}
		if _, err := n.m.UpdateStream(cfg); err != nil {
			t.Fatalf("node %d: %v", n.id, err)
		}
		if got := n.s.Config().Compression; got != "s2" {
			t.Fatalf("node %d: config compression %q after the update", n.id, got)
		}
		for p, m := range n.s.repl.machines {
			if c := store.Compression(m.compression.Load()); c != store.CompressS2 {
				t.Fatalf("node %d, partition %d: machine asked for %v, want s2", n.id, p, c)
			}
		}
	}
	for i := first + 1; i <= total; i++ {
		leader.publish(t, i)
	}
	want := make([]uint64, parts)
	for p, l := range leader.s.parts {
		want[p] = l.State().LastSeq
	}
	for _, n := range nodes {
		for p, l := range n.s.parts {
			deadline := time.Now().Add(5 * time.Second)
			for l.State().LastSeq < want[p] && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			if got := l.State().LastSeq; got != want[p] {
				t.Fatalf("node %d, partition %d: at %d, leader at %d", n.id, p, got, want[p])
			}
			// A partition that applied messages since the update gave its log
			// the setting first (the machine's own field, read after the
			// commit the log's state shows).
			m := n.s.repl.machines[p]
			if want[p] > before[n][p] && m.logCompression != store.CompressS2 {
				t.Fatalf("node %d, partition %d: log given %v, want s2", n.id, p, m.logCompression)
			}
			for seq := uint64(1); seq <= want[p]; seq++ {
				rec, _, err := l.Read(seq, nil)
				lrec, _, lerr := leader.s.parts[p].Read(seq, nil)
				if err != nil || lerr != nil || string(rec.Payload) != string(lrec.Payload) || string(rec.Subject) != string(lrec.Subject) {
					t.Fatalf("node %d, partition %d, seq %d: %q %v, leader %q %v", n.id, p, seq, rec.Payload, err, lrec.Payload, lerr)
				}
			}
		}
	}
	var n int
	for _, w := range want {
		n += int(w)
	}
	if n != total {
		t.Fatalf("%d messages stored, %d published", n, total)
	}
}

// TestMachinePassesCompression: the machine gives its log the compression asked
// for before it writes, on Apply as on Restore, and only when it changed.
func TestMachinePassesCompression(t *testing.T) {
	l := openTestLog(t, t.TempDir())
	m := newPartitionMachine(l, time.Minute, nil)
	m.setCompression(store.CompressS2)
	if m.logCompression != store.CompressNone {
		t.Fatal("the log was given the setting off the machine's goroutine")
	}
	if err := m.Apply([]replica.Entry{{Index: 1, Data: msgEntryOf(1, 1, testMsg{subj: "a", data: "x"})}}); err != nil {
		t.Fatal(err)
	}
	if m.logCompression != store.CompressS2 {
		t.Fatalf("after Apply: log given %v, want s2", m.logCompression)
	}
	m.setCompression(store.CompressNone)
	if err := m.Restore(nil); err != nil {
		t.Fatal(err)
	}
	if m.logCompression != store.CompressNone {
		t.Fatalf("after Restore: log given %v, want none", m.logCompression)
	}
	if got := logRecords(t, l); len(got) != 1 || got[0] != "1 a x 1" {
		t.Fatalf("log holds %v", got)
	}
	// A closed log refuses the setting: Apply fails rather than write with
	// the old one.
	m.setCompression(store.CompressS2)
	_ = l.Close()
	if err := m.Apply(nil); err == nil {
		t.Fatal("Apply on a closed log passed a compression")
	}
}
