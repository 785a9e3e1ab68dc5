package mqtt

import (
	"encoding/binary"
	"testing"

	"github.com/tern-mq/tern/internal/replica"
)

// FuzzMQTTGroupEntry feeds arbitrary bytes to the MQTT group's entry decoder and to
// a replica applying them: an entry another node proposed is outside bytes. Nothing
// panics; an entry that decodes is applied, and the state's snapshot restores into
// a state whose snapshot is the same.
func FuzzMQTTGroupEntry(f *testing.F) {
	sess := appendItem(binary.AppendUvarint(nil, 2), &kvOp{key: kvSession + "c1", val: []byte(`{"expiry_ns":-1,"subs":[{"filter":"a/#","qos":2}]}`)})
	sess = appendItem(sess, &kvOp{pub: &pubItem{subject: []byte("a.b"), payload: []byte("x"), qos: 2, origin: "c2", qos2PID: 7}})
	f.Add(sess)
	f.Add(appendItem(binary.AppendUvarint(nil, 1), &kvOp{key: kvRetained + "a.b", val: encodeRetained(&retainedMsg{subject: "a.b", payload: []byte("r"), qos: 1})}))
	f.Add(appendItem(binary.AppendUvarint(nil, 1), &kvOp{key: msgKey("c1", 5)}))
	f.Add([]byte{1, 9})
	// A session's records written as its host, a claim by another node, and a
	// QoS 2 publish from the old host after it.
	fenced := appendItem(binary.AppendUvarint(nil, 4), &kvOp{key: kvSession + "c1", from: "n1", val: []byte(`{"expiry_ns":-1,"host":"n1"}`)})
	fenced = appendItem(fenced, &kvOp{key: "c1", from: "n2", claim: true})
	fenced = appendItem(fenced, &kvOp{key: msgKey("c1", 5), from: "n1"})
	fenced = appendItem(fenced, &kvOp{pub: &pubItem{subject: []byte("a.b"), payload: []byte("x"), qos: 2, origin: "c1", qos2PID: 7, from: "n1"}})
	f.Add(fenced)
	f.Fuzz(func(t *testing.T, data []byte) {
		_, derr := decodeEntry(data)
		st := NewState(100, nil)
		if err := st.Apply([]replica.Entry{{Index: 1, Data: data}}); err != nil {
			t.Fatalf("apply: %v", err)
		}
		if derr == nil {
			snap, err := st.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			again := NewState(100, nil)
			if err := again.Restore(snap); err != nil {
				t.Fatalf("restore of a snapshot: %v", err)
			}
			if snap2, _ := again.Snapshot(); string(snap2) != string(snap) {
				t.Fatalf("snapshot changed across a restore")
			}
		}
		_ = NewState(100, nil).Restore(data) // a snapshot from a peer: outside bytes too
	})
}

// TestMQTTGroupStoresForMatchingSessions: a publish entry is stored, at the QoS the
// subscription granted, for the persistent sessions whose filters match it, not for
// the publisher's own session under No Local, and the publisher's QoS 2 packet id
// is marked received in the same entry.
func TestMQTTGroupStoresForMatchingSessions(t *testing.T) {
	st := NewState(100, nil)
	e := binary.AppendUvarint(nil, 4)
	e = appendItem(e, &kvOp{key: kvSession + "sub", val: []byte(`{"expiry_ns":-1,"subs":[{"filter":"a/+","qos":1}]}`)})
	e = appendItem(e, &kvOp{key: kvSession + "pub", val: []byte(`{"expiry_ns":-1,"subs":[{"filter":"a/b","qos":2,"no_local":true}]}`)})
	e = appendItem(e, &kvOp{key: kvSession + "other", val: []byte(`{"expiry_ns":-1,"subs":[{"filter":"z/#","qos":2}]}`)})
	e = appendItem(e, &kvOp{pub: &pubItem{subject: []byte("a.b"), payload: []byte("hello"), qos: 2, origin: "pub", qos2PID: 9}})
	if err := st.Apply([]replica.Entry{{Index: 3, Data: e}}); err != nil {
		t.Fatal(err)
	}
	_, msgs, _, ok := st.storedOf("sub")
	if !ok || len(msgs) != 1 || msgs[0].QoS != 1 || string(msgs[0].Payload) != "hello" || msgs[0].Topic != "a/b" || msgs[0].MID != 3*maxEntryItems+3 {
		t.Fatalf("sub: ok %v, msgs %+v", ok, msgs)
	}
	if _, msgs, qos2, _ := st.storedOf("pub"); len(msgs) != 0 || len(qos2) != 1 || qos2[0] != 9 {
		t.Fatalf("pub: msgs %d, qos2 %v; want none (No Local) and packet id 9", len(msgs), qos2)
	}
	if _, msgs, _, _ := st.storedOf("other"); len(msgs) != 0 {
		t.Fatalf("other: %d messages for a filter that does not match", len(msgs))
	}
	// The same publication proposed again (its first answer lost) applies once,
	// also on a replica that restored a snapshot taken between the two.
	again := appendItem(binary.AppendUvarint(nil, 1), &kvOp{pub: &pubItem{id: 77, subject: []byte("a.b"), payload: []byte("x"), qos: 1}})
	if err := st.Apply([]replica.Entry{{Index: 4, Data: again}}); err != nil {
		t.Fatal(err)
	}
	snap, err := st.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	restored := NewState(100, nil)
	if err := restored.Restore(snap); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*State{st, restored} {
		if err := s.Apply([]replica.Entry{{Index: 5, Data: again}}); err != nil {
			t.Fatal(err)
		}
		if _, msgs, _, _ := s.storedOf("sub"); len(msgs) != 2 {
			t.Fatalf("a publication applied twice: %d messages stored, want 2", len(msgs))
		}
	}
	del := appendItem(binary.AppendUvarint(nil, 2), &kvOp{key: msgKey("sub", 3*maxEntryItems+3)})
	del = appendItem(del, &kvOp{key: msgKey("sub", 4*maxEntryItems)})
	if err := st.Apply([]replica.Entry{{Index: 6, Data: del}}); err != nil {
		t.Fatal(err)
	}
	if _, msgs, _, _ := st.storedOf("sub"); len(msgs) != 0 {
		t.Fatalf("acknowledged message still stored: %d", len(msgs))
	}
}

// TestMQTTGroupFencesFormerHosts: once a node claims a stored session, the records
// its former host writes for it as its host are left out — the session record,
// its messages' and packet ids' records, a QoS 2 publish marking a packet id
// received — while the new host's are applied, as are unfenced records and
// a former host's QoS 1 publish; a claim keeps the record's other fields. A node
// that claims a session back writes under its new claim only: what it proposed
// under the old one is left out.
func TestMQTTGroupFencesFormerHosts(t *testing.T) {
	st := NewState(100, nil)
	apply := func(index uint64, ops ...kvOp) {
		t.Helper()
		e := binary.AppendUvarint(nil, uint64(len(ops)))
		for i := range ops {
			e = appendItem(e, &ops[i])
		}
		if err := st.Apply([]replica.Entry{{Index: index, Data: e}}); err != nil {
			t.Fatal(err)
		}
	}
	apply(1,
		kvOp{key: kvSession + "sub", from: "n1", val: []byte(`{"expiry_ns":-1,"subs":[{"filter":"a/#","qos":2}],"host":"n1","user":"u"}`)},
		kvOp{key: kvSession + "pub", from: "n1", val: []byte(`{"expiry_ns":-1,"host":"n1"}`)},
		kvOp{key: msgKey("sub", 1), from: "n1", val: encodeOutMsg(&outMsg{Topic: "a/x", Payload: []byte("one"), QoS: 2, PID: 1})},
	)
	if h := st.HostOf("sub"); h != "n1" {
		t.Fatalf("host %q, want n1", h)
	}
	apply(2, kvOp{key: "sub", from: "n2", claim: true}, kvOp{key: "pub", from: "n2", claim: true})
	rec, msgs, _, ok := st.storedOf("sub")
	if !ok || rec.Host != "n2" || rec.User != "u" || len(rec.Subs) != 1 || rec.Expiry != -1 || len(msgs) != 1 {
		t.Fatalf("after the claim: %+v, %d messages", rec, len(msgs))
	}
	// The former host: its PUBREC record, a new message record, a deletion, a
	// session record and a QoS 2 publish are all left out.
	apply(3,
		kvOp{key: msgKey("sub", 1), from: "n1", val: encodeOutMsg(&outMsg{Topic: "a/x", Payload: []byte("one"), QoS: 2, PID: 1, Pubrec: true})},
		kvOp{key: msgKey("sub", 9), from: "n1", val: encodeOutMsg(&outMsg{Topic: "a/x", Payload: []byte("nine"), QoS: 1})},
		kvOp{key: kvSession + "sub", from: "n1", val: []byte(`{"expiry_ns":5,"host":"n1"}`)},
		kvOp{key: qos2Key("pub", 3), from: "n1"},
		kvOp{pub: &pubItem{id: 1, subject: []byte("a.b"), payload: []byte("two"), qos: 2, origin: "pub", qos2PID: 4, from: "n1"}},
	)
	rec, msgs, _, _ = st.storedOf("sub")
	if rec.Host != "n2" || rec.Expiry != -1 || len(msgs) != 1 || msgs[0].Pubrec {
		t.Fatalf("the former host's records were applied: %+v, %+v", rec, msgs)
	}
	if _, _, qos2, _ := st.storedOf("pub"); len(qos2) != 0 {
		t.Fatalf("the former host's QoS 2 publish marked %v received", qos2)
	}
	// The new host's records, a QoS 1 publish from anywhere and a claim-free
	// record are applied.
	apply(4,
		kvOp{key: msgKey("sub", 1), from: "n2", epoch: 1, val: encodeOutMsg(&outMsg{Topic: "a/x", Payload: []byte("one"), QoS: 2, PID: 1, Pubrec: true})},
		kvOp{pub: &pubItem{id: 2, subject: []byte("a.b"), payload: []byte("three"), qos: 2, origin: "pub", qos2PID: 5, from: "n2", epoch: 1}},
		kvOp{pub: &pubItem{id: 3, subject: []byte("a.c"), payload: []byte("four"), qos: 1, origin: "pub"}},
		kvOp{key: kvRetained + "a.b", val: encodeRetained(&retainedMsg{subject: "a.b", payload: []byte("r"), qos: 1})},
	)
	_, msgs, _, _ = st.storedOf("sub")
	if len(msgs) != 3 || !msgs[0].Pubrec || string(msgs[1].Payload) != "three" || string(msgs[2].Payload) != "four" {
		t.Fatalf("the new host's records: %+v", msgs)
	}
	if _, _, qos2, _ := st.storedOf("pub"); len(qos2) != 1 || qos2[0] != 5 {
		t.Fatalf("QoS 2 packet ids marked %v, want [5]", qos2)
	}
	if len(st.retained) != 1 {
		t.Fatalf("retained %v", st.retained)
	}
	// n1 claims the session back (epoch 2): what it proposed under its first
	// claim and commits only now is still left out; what it writes under the new
	// one is applied, and n2's is not any more.
	apply(5, kvOp{key: "pub", from: "n1", claim: true})
	apply(6,
		kvOp{pub: &pubItem{id: 4, subject: []byte("a.b"), payload: []byte("five"), qos: 2, origin: "pub", qos2PID: 6, from: "n1"}},
		kvOp{pub: &pubItem{id: 5, subject: []byte("a.b"), payload: []byte("six"), qos: 2, origin: "pub", qos2PID: 7, from: "n2", epoch: 1}},
		kvOp{pub: &pubItem{id: 6, subject: []byte("a.b"), payload: []byte("seven"), qos: 2, origin: "pub", qos2PID: 8, from: "n1", epoch: 2}},
	)
	if _, _, qos2, _ := st.storedOf("pub"); len(qos2) != 2 || qos2[0] != 5 || qos2[1] != 8 {
		t.Fatalf("after the claim back, QoS 2 packet ids marked %v, want [5 8]", qos2)
	}
	if st.hostErr("pub", "n1", 2) != nil || st.hostErr("pub", "n1", 0) == nil ||
		st.hostErr("pub", "n2", 1) == nil || st.hostErr("nobody", "n3", 0) != nil {
		t.Fatal("hosts disagrees with the claims")
	}
}
