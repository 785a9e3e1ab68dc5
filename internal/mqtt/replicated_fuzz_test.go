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
