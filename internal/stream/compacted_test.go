package stream_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/stream"
)

// readAll reads stream from its start with an ephemeral consumer until
// nothing is pending, and returns every message's value by key (Tern-Key
// header, else subject), in the order read, with tombstones as "<null>", and
// how many it read. Compaction may remove messages while it reads.
func (e *env) readAll(stream string) (map[string][]string, int) {
	e.t.Helper()
	c := e.addConsumer(stream, tern.ConsumerConfig{DeliverPolicy: tern.DeliverAll, AckPolicy: tern.AckNone})
	p := e.js.Pull(stream, c.Name)
	defer p.Close()
	byKey, n := map[string][]string{}, 0
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		msgs, err := p.Fetch(e.ctx, 100, tern.FetchMaxWait(100*time.Millisecond))
		if err != nil && !errors.Is(err, tern.ErrTimeout) {
			e.t.Fatalf("fetch: %v", err)
		}
		for _, m := range msgs {
			k := m.Header.Get(tern.KeyHeader)
			if k == "" {
				k = m.Subject
			}
			v := string(m.Data)
			if m.Header.Get(tern.NullHeader) != "" {
				v = "<null>"
			}
			byKey[k] = append(byKey[k], v)
			n++
		}
		if len(msgs) == 0 && e.consumerInfo(stream, c.Name).NumPending == 0 {
			return byKey, n
		}
	}
	e.t.Fatalf("reading %s: still messages pending after 10 s", stream)
	return nil, 0
}

// TestCompactedStream: a compacted stream keeps each key's latest message once
// later segments hold newer ones, removes a tombstoned key after the tombstone
// retention, keys messages without a Tern-Key by subject, and goes on after a
// restart with the keys rebuilt from disk.
func TestCompactedStream(t *testing.T) {
	dir := t.TempDir()
	srv := startAt(t, dir, nil)
	e := connectEnv(t, srv)
	cfg := tern.StreamConfig{Name: "profiles", Subjects: []string{"profiles.>"}, SegmentBytes: 512,
		Compact: &tern.Compaction{TombstoneRetention: tern.Duration(time.Millisecond)}}
	info := e.addStream(cfg)
	if info.Config.Compact == nil || info.Config.Compact.TombstoneRetention != tern.Duration(time.Millisecond) {
		t.Fatalf("config as stored: %+v", info.Config.Compact)
	}
	const keys, rounds = 5, 20
	for r := 0; r < rounds; r++ {
		for k := 0; k < keys; k++ {
			e.publish("profiles.update", fmt.Sprintf("k%d-v%d", k, r), tern.Key(fmt.Sprintf("k%d", k)))
		}
		e.publish(fmt.Sprintf("profiles.s%d", r%2), fmt.Sprintf("s%d-v%d", r%2, r))
	}
	e.publish("profiles.update", "", tern.Key("k4"), tern.Tombstone())
	// Filler on one key rolls past the segments that hold everything above.
	for i := 0; i < 40; i++ {
		e.publish("profiles.update", fmt.Sprintf("f-v%d", i), tern.Key("filler"))
	}
	want := func(byKey map[string][]string) error {
		for k := 0; k < 4; k++ {
			if got, w := byKey[fmt.Sprintf("k%d", k)], fmt.Sprintf("k%d-v%d", k, rounds-1); len(got) != 1 || got[0] != w {
				return fmt.Errorf("key k%d: %q, want only %q", k, got, w)
			}
		}
		if got := byKey["k4"]; len(got) != 0 {
			return fmt.Errorf("tombstoned key k4: %q, want nothing", got)
		}
		for s := 0; s < 2; s++ {
			if got, w := byKey[fmt.Sprintf("profiles.s%d", s)], fmt.Sprintf("s%d-v%d", s, rounds-2+s); len(got) != 1 || got[0] != w {
				return fmt.Errorf("subject profiles.s%d: %q, want only %q", s, got, w)
			}
		}
		if f := byKey["filler"]; len(f) == 0 || f[len(f)-1] != "f-v39" {
			return fmt.Errorf("filler: %q, want it to end with f-v39", f)
		}
		return nil
	}
	var last error
	waitFor(t, "compaction", func() bool {
		st := e.streamInfo("profiles").State
		if st.Msgs > 4+2+40 {
			return false
		}
		byKey, _ := e.readAll("profiles")
		last = want(byKey)
		return last == nil
	})
	st := e.streamInfo("profiles").State
	if st.LastSeq != rounds*(keys+1)+1+40 || st.Deleted == 0 {
		t.Fatalf("state after compaction: %+v", st)
	}
	// The segments compaction left mostly removed are rewritten without the
	// removed messages: the files come to 999 bytes, where the dead messages
	// kept in their segments would make 1387.
	var files int64
	waitFor(t, "sparse segments rewritten", func() bool {
		files = stream.SegmentFileBytes(t, dir)
		return files < 1200
	})
	t.Logf("%d live messages, %d bytes of log files", st.Msgs, files)
	// The state says as much: the files' bytes, and the keys: k0..k3, the two
	// subjects without a key and the filler (k4 went with its tombstone).
	if st := e.streamInfo("profiles").State; st.FileBytes != uint64(files) || st.Keys != 7 {
		t.Fatalf("state: %d file bytes (the files hold %d), %d keys (want 7)", st.FileBytes, files, st.Keys)
	}

	e.nc.Close()
	stop(t, srv)
	srv = startAt(t, dir, nil)
	defer stop(t, srv)
	e = connectEnv(t, srv)
	byKey, n := e.readAll("profiles")
	if err := want(byKey); err != nil {
		t.Fatalf("after restart: %v", err)
	}
	if after := e.streamInfo("profiles").State; after.Msgs != uint64(n) || after.LastSeq != st.LastSeq {
		t.Fatalf("after restart: %+v, read %d (before: %+v)", after, n, st)
	}
	// The rebuilt keys know k0's latest: a newer one supersedes it.
	e.publish("profiles.update", "k0-new", tern.Key("k0"))
	for i := 0; i < 40; i++ {
		e.publish("profiles.update", fmt.Sprintf("g-v%d", i), tern.Key("filler"))
	}
	waitFor(t, "k0 compacted again", func() bool {
		byKey, _ := e.readAll("profiles")
		got := byKey["k0"]
		return len(got) == 1 && got[0] == "k0-new"
	})
}

// TestCompactionConfigRules: compaction needs limits retention; it can be
// switched on for a stream that has messages, which then keeps the latest of
// each key it already holds, and off again, after which nothing is removed.
func TestCompactionConfigRules(t *testing.T) {
	e := newEnv(t)
	if _, err := e.js.AddStream(e.ctx, tern.StreamConfig{Name: "wq", Retention: tern.RetainWorkQueue, Compact: &tern.Compaction{}}); err == nil {
		t.Fatal("a compacted work queue was accepted")
	}
	if _, err := e.js.AddStream(e.ctx, tern.StreamConfig{Name: "neg", Compact: &tern.Compaction{MinLag: -1}}); err == nil {
		t.Fatal("a negative min lag was accepted")
	}
	info := e.addStream(tern.StreamConfig{Name: "c", Compact: &tern.Compaction{}})
	if got := info.Config.Compact.TombstoneRetention; got != tern.Duration(24*time.Hour) {
		t.Fatalf("default tombstone retention %v", got)
	}

	cfg := e.addStream(tern.StreamConfig{Name: "plain", Subjects: []string{"plain.>"}, SegmentBytes: 512}).Config
	publishRounds := func(rounds int) {
		for r := range rounds {
			for k := range 3 {
				e.publish("plain.x", fmt.Sprintf("k%d-v%d", k, r), tern.Key(fmt.Sprintf("k%d", k)))
			}
		}
		for i := range 30 {
			e.publish("plain.x", fmt.Sprintf("f%d", i), tern.Key("filler"))
		}
	}
	publishRounds(5)
	cfg.Compact = &tern.Compaction{}
	if _, err := e.js.UpdateStream(e.ctx, cfg); err != nil {
		t.Fatalf("switching compaction on: %v", err)
	}
	waitFor(t, "the messages stored before the switch compacted", func() bool {
		byKey, _ := e.readAll("plain")
		return len(byKey["k0"]) == 1 && byKey["k0"][0] == "k0-v4"
	})

	// Off, its settings kept.
	cfg.Compact = &tern.Compaction{TombstoneRetention: tern.Duration(time.Hour), Off: true}
	info, err := e.js.UpdateStream(e.ctx, cfg)
	if err != nil {
		t.Fatalf("switching compaction off: %v", err)
	}
	if c := info.Config.Compact; c == nil || !c.Off || time.Duration(c.TombstoneRetention) != time.Hour {
		t.Fatalf("switched off, the settings are %+v", c)
	}
	publishRounds(3)
	time.Sleep(1500 * time.Millisecond) // a compaction tick or more
	if byKey, _ := e.readAll("plain"); len(byKey["k0"]) != 4 {
		t.Fatalf("after compaction was switched off, k0 has %q, want its 4 values", byKey["k0"])
	}
	// And on again, without being off, and then removed.
	cfg.Compact = &tern.Compaction{TombstoneRetention: tern.Duration(time.Hour)}
	if _, err := e.js.UpdateStream(e.ctx, cfg); err != nil {
		t.Fatalf("switching compaction on again: %v", err)
	}
	waitFor(t, "compacted again", func() bool {
		byKey, _ := e.readAll("plain")
		return len(byKey["k0"]) == 1 && byKey["k0"][0] == "k0-v2"
	})
	cfg.Compact = nil
	if info, err := e.js.UpdateStream(e.ctx, cfg); err != nil || info.Config.Compact != nil {
		t.Fatalf("removing compaction: %v, %+v", err, info)
	}
	publishRounds(2)
	time.Sleep(1500 * time.Millisecond)
	if byKey, _ := e.readAll("plain"); len(byKey["k0"]) != 3 {
		t.Fatalf("after compaction was removed, k0 has %q, want 3 values", byKey["k0"])
	}
}
