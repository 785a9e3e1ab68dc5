package mqtt

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/store"
)

// Fuzz targets for everything the MQTT front end reads back from disk at restart.

func seedOutMsgs() []*outMsg {
	return []*outMsg{
		{Topic: "a/b", Payload: []byte("hello"), QoS: 1},
		{Topic: "cmd/k1", Payload: []byte{}, QoS: 2, PID: 7, Pubrec: true},
		{Topic: "x", Payload: []byte("p"), Header: []byte{1, 2, 3}, Reply: "reply/to", QoS: 2, Retain: true,
			SubIDs: []uint32{268435455}, ExpireAt: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano(), PID: 65535},
		{Topic: "", Payload: bytes.Repeat([]byte{0xFF}, 300), QoS: 1, PID: 1, SubIDs: []uint32{1}},
		{Topic: "a/b", Payload: []byte("overlap"), QoS: 2, PID: 3, SubIDs: []uint32{1, 2, 268435455}},
		{Topic: "c", Payload: []byte("x"), QoS: 1, Retain: true, SubIDs: []uint32{7, 7000}},
	}
}

func seedRetained() []*retainedMsg {
	return []*retainedMsg{
		{subject: "status.k1", payload: []byte("online"), qos: 1},
		{subject: "a", payload: []byte{}, qos: 0},
		{subject: "x.y.z", payload: []byte("p"), header: []byte{9, 8}, reply: "r", qos: 2,
			expireAt: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()},
	}
}

// FuzzDecodeOutMsg: a stored queued or in-flight message decodes to a valid
// message or an error, never a panic; what decodes re-encodes to the same message.
func FuzzDecodeOutMsg(f *testing.F) {
	for _, m := range seedOutMsgs() {
		b := encodeOutMsg(m)
		f.Add(b)
		f.Add(b[:len(b)-1])
		f.Add(append(bytes.Clone(b), 0))
	}
	f.Add([]byte{})
	f.Add([]byte{0})                                                          // QoS 0
	f.Add([]byte{0x20, 0, 0, 0, 0, 0, 0, 0})                                  // unknown flag bit
	f.Add([]byte{0x11, 0, 0, 1, 5, 0, 0, 0, 0, 0})                            // more subscription ids, no first
	f.Add([]byte{0x11, 0, 3, 0, 0, 0, 0, 0, 0})                               // more subscription ids, none follow
	f.Add([]byte{0x11, 0, 3, 2, 5, 0, 0, 0, 0, 0})                            // a zero among them
	f.Add([]byte{0x11, 0, 3, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 5, 0})             // their count past the end
	f.Add([]byte{0x11, 0, 3, 1, 0x80, 0x80, 0x80, 0x80, 0x10, 0, 0, 0, 0, 0}) // one of 2^32
	f.Add([]byte{1, 0x80, 0x80, 0x04, 0, 0, 0, 0, 0, 0})                      // packet id 65536
	f.Add([]byte{1, 0, 0x80, 0x80, 0x80, 0x80, 0x10, 0, 0, 0, 0, 0})          // subscription id 2^32
	f.Add([]byte{1, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F})                   // topic length past the end
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeOutMsg(b)
		if err != nil {
			if m != nil || err.Error() == "" {
				t.Fatalf("error %v with message %+v", err, m)
			}
			return
		}
		if m.QoS < 1 || m.QoS > 2 {
			t.Fatalf("decoded QoS %d", m.QoS)
		}
		m2, err := decodeOutMsg(encodeOutMsg(m))
		if err != nil {
			t.Fatalf("re-encoded message does not decode: %v", err)
		}
		if !reflect.DeepEqual(m, m2) {
			t.Fatalf("round trip:\n%+v\n%+v", m, m2)
		}
	})
}

// TestOutMsgSubscriptionIDs: a stored message keeps every subscription identifier;
// records written when a message had at most one still read, and malformed lists are
// refused.
func TestOutMsgSubscriptionIDs(t *testing.T) {
	// flags QoS 1, packet id 0, subscription id 5, no expiry, topic "t", no reply, no
	// header, payload "p": a record of the one-identifier format.
	old := []byte{1, 0, 5, 0, 1, 't', 0, 0, 1, 'p'}
	m, err := decodeOutMsg(old)
	if err != nil || !slices.Equal(m.SubIDs, []uint32{5}) || m.Topic != "t" || string(m.Payload) != "p" {
		t.Fatalf("one-identifier record: %+v, %v", m, err)
	}
	if !bytes.Equal(encodeOutMsg(m), old) {
		t.Fatalf("a message with one identifier is stored as % x, want the old form % x", encodeOutMsg(m), old)
	}
	for _, ids := range [][]uint32{nil, {1, 2}, {268435455, 1, 99}} {
		m := &outMsg{Topic: "a/b", Payload: []byte("x"), QoS: 2, PID: 4, SubIDs: ids}
		got, err := decodeOutMsg(encodeOutMsg(m))
		if err != nil || !reflect.DeepEqual(got, m) {
			t.Fatalf("identifiers %v: decoded %+v, %v", ids, got, err)
		}
	}
	for name, b := range map[string][]byte{
		"more without a first": {0x11, 0, 0, 1, 5, 0, 0, 0, 0, 0},
		"none follow":          {0x11, 0, 3, 0, 0, 0, 0, 0, 0},
		"a zero":               {0x11, 0, 3, 2, 5, 0, 0, 0, 0, 0},
		"count past the end":   {0x11, 0, 3, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 5, 0},
	} {
		if m, err := decodeOutMsg(b); err == nil {
			t.Errorf("%s: decoded %+v", name, m)
		}
	}
}

// FuzzDecodeRetained: as FuzzDecodeOutMsg, for stored retained messages.
func FuzzDecodeRetained(f *testing.F) {
	for _, rm := range seedRetained() {
		b := encodeRetained(rm)
		f.Add(rm.subject, b)
		f.Add(rm.subject, b[:len(b)-1])
		f.Add(rm.subject, append(bytes.Clone(b), 1))
	}
	f.Add("a", []byte{})
	f.Add("a", []byte{3, 0, 0, 0, 0})                      // QoS 3
	f.Add("a", []byte{0x80, 0x02, 0, 0, 0, 0})             // QoS 256: was truncated to 0
	f.Add("a", []byte{1, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F}) // reply length past the end
	f.Fuzz(func(t *testing.T, subj string, b []byte) {
		rm, err := decodeRetained(subj, b)
		if err != nil {
			if rm != nil || err.Error() == "" {
				t.Fatalf("error %v with message %+v", err, rm)
			}
			return
		}
		if rm.qos > 2 || rm.subject != subj {
			t.Fatalf("decoded %+v", rm)
		}
		rm2, err := decodeRetained(subj, encodeRetained(rm))
		if err != nil {
			t.Fatalf("re-encoded message does not decode: %v", err)
		}
		if !reflect.DeepEqual(rm, rm2) {
			t.Fatalf("round trip:\n%+v\n%+v", rm, rm2)
		}
	})
}

// seedState is a realistic set of stored keys and values: two persistent sessions,
// messages queued and in flight for them, QoS 2 marks and retained messages.
func seedState(t testing.TB) map[string][]byte {
	sess := func(rec sessionRecord) []byte {
		b, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	data := map[string][]byte{
		kvSession + "dev1":  sess(sessionRecord{Expiry: -1, Subs: []subRecord{{Filter: "cmd/#", QoS: 1}, {Filter: "$share/g/x/+", QoS: 2, NoLocal: true, RAP: true, SubID: 5}}}),
		kvSession + "dev2":  sess(sessionRecord{Expiry: int64(time.Hour)}),
		qos2Key("dev2", 10): {},
		qos2Key("gone", 11): {},
		msgKey("gone", 1):   encodeOutMsg(seedOutMsgs()[0]),
		kvSession + "bad":   []byte(`{"expiry_ns":`),
		"zz":                []byte("unknown kind"),
	}
	for i, m := range seedOutMsgs() {
		data[msgKey("dev1", uint64(i+1))] = encodeOutMsg(m)
	}
	for _, rm := range seedRetained() {
		data[kvRetained+rm.subject] = encodeRetained(rm)
	}
	return data
}

// encodeState flattens keys and values for a fuzz input: length-prefixed key,
// length-prefixed value, repeated.
func encodeState(data map[string][]byte) []byte {
	var b []byte
	for k, v := range data {
		b = appendBytes(b, []byte(k))
		b = appendBytes(b, v)
	}
	return b
}

func decodeState(b []byte) map[string][]byte {
	r := &byteReader{b: b}
	data := make(map[string][]byte)
	for len(r.b) > 0 && len(data) < 256 {
		k, v := r.bytes(), r.bytes()
		if r.err != nil {
			break
		}
		data[string(k)] = v
	}
	return data
}

func fuzzServer(t *testing.T, dir string) *Server {
	s, err := NewServer(Config{StoreDir: dir, Sync: store.SyncNever, SysInterval: -1, IdleAfter: -1}, broker.New(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// FuzzRestore runs Server.restore on an arbitrary set of stored keys and values: no
// panic; it deletes only keys it was given; what it keeps is usable.
func FuzzRestore(f *testing.F) {
	f.Add(encodeState(seedState(f)))
	f.Add(encodeState(map[string][]byte{"": nil, "m": nil, "q\x00c\x0000": nil}))
	f.Add(encodeState(map[string][]byte{kvSession + "c": []byte(`{"expiry_ns":1}`), qos2Key("c", 0): nil, kvQoS2 + "c\x0070000": nil}))
	f.Add(encodeState(map[string][]byte{kvSession + "c": []byte(`{"subs":[{"filter":""},{"filter":"$share//#"},{"filter":"a/#/b","qos":9}]}`)}))
	f.Fuzz(func(t *testing.T, b []byte) {
		checkRestore(t, decodeState(b))
	})
}

// checkRestore runs restore on data: it deletes only keys it was given, and keeps
// only what it could use.
func checkRestore(t *testing.T, data map[string][]byte) {
	s := fuzzServer(t, "")
	s.kv = &kvStore{wake: make(chan struct{}, 1)} // collects the deletes; nothing is written
	s.retained.kv = s.kv
	s.restore(data)

	s.kv.mu.Lock()
	deleted := make(map[string]bool)
	for _, op := range s.kv.ops {
		if op.val != nil {
			t.Errorf("restore wrote %q", op.key)
		}
		if _, ok := data[op.key]; !ok {
			t.Errorf("restore deleted %q, which it was not given", op.key)
		}
		deleted[op.key] = true
	}
	s.kv.mu.Unlock()
	s.mu.Lock()
	for key := range data {
		if deleted[key] {
			continue
		}
		kind, rest := key[:2], key[2:]
		switch kind {
		case kvRetained:
			if s.retained.m[rest] == nil {
				t.Errorf("retained %q kept on disk, not in memory", rest)
			}
		case kvMessage, kvQoS2:
			client, _, _ := strings.Cut(rest, "\x00")
			if s.sessions[client] == nil {
				t.Errorf("%q kept without its session", key)
			}
		}
	}
	for subj, rm := range s.retained.m {
		if _, err := decodeRetained(subj, encodeRetained(rm)); err != nil {
			t.Errorf("restored retained %q does not re-encode: %v", subj, err)
		}
	}
	// A session's timer may be ending it (a restored expiry of 1 ns): its lock
	// orders that against letting the stand-in store go.
	for _, sess := range s.sessions {
		sess.mu.Lock()
	}
	s.kv, s.retained.kv = nil, nil
	for _, sess := range s.sessions {
		sess.mu.Unlock()
	}
	s.mu.Unlock()
	if err := s.Shutdown(time.Second); err != nil {
		t.Fatal(err)
	}
}

// FuzzKVLog writes arbitrary bytes as the MQTT state log and reads it back as at a
// restart: no panic, no error (damage is skipped, not fatal), and restore copes
// with whatever keys and values come out.
func FuzzKVLog(f *testing.F) {
	dir := f.TempDir()
	kv, _, err := openKV(dir, store.SyncNever, 0, slog.New(slog.DiscardHandler))
	if err != nil {
		f.Fatal(err)
	}
	for k, v := range seedState(f) {
		kv.put(k, v)
	}
	kv.del(kvSession + "bad")
	if err := kv.close(); err != nil {
		f.Fatal(err)
	}
	seg, err := os.ReadFile(filepath.Join(dir, segmentFile))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seg)
	f.Add(seg[:len(seg)/2])
	flipped := bytes.Clone(seg)
	flipped[len(flipped)/3] ^= 0x40
	f.Add(flipped)
	f.Add([]byte{})
	f.Add(binary.BigEndian.AppendUint32(nil, 0xFE544E01))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 1<<13 {
			return
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, segmentFile), b, 0o644); err != nil {
			t.Fatal(err)
		}
		kv, data, err := openKV(dir, store.SyncNever, 0, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatalf("openKV: %v", err)
		}
		if err := kv.close(); err != nil {
			t.Fatal(err)
		}
		checkRestore(t, data)
	})
}

// segmentFile is the first segment of the state log, which holds all of a small one.
const segmentFile = "00000000000000000001.log"
