package wire

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"reflect"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/vectors.json from the encoders")

// vectorFrame is a frame in readable form; see testdata/README.md.
type vectorFrame struct {
	Type       string      `json:"type"`
	Flags      uint8       `json:"flags"`
	ID         uint64      `json:"id,omitempty"`
	SID        uint64      `json:"sid,omitempty"`
	Max        uint64      `json:"max,omitempty"`
	Code       uint16      `json:"code,omitempty"`
	Subject    string      `json:"subject,omitempty"`
	Reply      string      `json:"reply,omitempty"`
	Queue      string      `json:"queue,omitempty"`
	Filter     string      `json:"filter,omitempty"`
	Headers    [][2]string `json:"headers,omitempty"`
	PayloadHex string      `json:"payload_hex,omitempty"`
	Connect    *Connect    `json:"connect,omitempty"`
	Info       *Info       `json:"info,omitempty"`
	// Route frames.
	Attrs      uint8       `json:"attrs,omitempty"`
	Phase      uint8       `json:"phase,omitempty"`
	Weight     uint32      `json:"weight,omitempty"`
	Seq        uint64      `json:"seq,omitempty"`
	Generation uint64      `json:"generation,omitempty"`
	Queues     []string    `json:"queues,omitempty"`
	RouteHello *RouteHello `json:"route_hello,omitempty"`
}

type vector struct {
	Name  string       `json:"name"`
	Hex   string       `json:"hex"`
	Frame *vectorFrame `json:"frame,omitempty"`
	Error string       `json:"error,omitempty"` // incomplete | too_large | malformed | unknown_type
}

func vectorOf(f *Frame) *vectorFrame {
	v := &vectorFrame{Type: f.Type.String(), Flags: f.Flags, ID: f.ID, SID: f.SID, Max: f.Max, Code: uint16(f.Code),
		Subject: string(f.Subject), Reply: string(f.Reply), Queue: string(f.Queue), Filter: string(f.Filter),
		Attrs: f.Attrs, Phase: f.Phase, Weight: f.Weight, Seq: f.Seq, Generation: f.Generation}
	for q := range f.Queues.All() {
		v.Queues = append(v.Queues, string(q))
	}
	f.Header.Each(func(k, val []byte) bool {
		v.Headers = append(v.Headers, [2]string{string(k), string(val)})
		return true
	})
	switch f.Type {
	case TypeConnect:
		c, _ := ParseConnect(f.Payload)
		v.Connect = &c
	case TypeInfo:
		in, _ := ParseInfo(f.Payload)
		v.Info = &in
	case TypeRouteHello:
		h, _ := ParseRouteHello(f.Payload)
		v.RouteHello = &h
	default:
		v.PayloadHex = hex.EncodeToString(f.Payload)
	}
	return v
}

func generateVectors() []vector {
	var out []vector
	add := func(name string, enc []byte) {
		var f Frame
		if _, err := f.Decode(enc, 0); err != nil {
			panic(name + ": " + err.Error())
		}
		out = append(out, vector{Name: name, Hex: hex.EncodeToString(enc), Frame: vectorOf(&f)})
	}
	h := AppendHeader(nil, "sender", "s1")
	h = AppendHeader(h, "trace", "abc")
	add("connect", AppendConnect(nil, &Connect{Version: Version, Flags: ConnectNoResponders, Name: "svc", Lang: "go", ClientVersion: "0.1.0", Credentials: []byte("token")}))
	add("info", AppendInfo(nil, &Info{Version: Version, Flags: InfoHeaders, ServerID: "a1b2", ServerName: "edge-1", ServerVersion: "0.1.0", ClientID: 7, MaxPayload: 1 << 20, PingIntervalMS: 120000}))
	add("info_connect_urls", AppendInfo(nil, &Info{Version: Version, Flags: InfoHeaders | InfoAuthRequired, ServerID: "c3d4",
		ServerName: "n1", ServerVersion: "0.1.0", ClientID: 8, MaxPayload: 1 << 20, PingIntervalMS: 120000,
		ConnectURLs: []string{"tern://10.0.0.1:7400", "tern://10.0.0.2:7400", "tern://10.0.0.3:7400"}}))
	// INFO as servers wrote it before connect_urls: decoders read it as an empty list.
	infoV1 := AppendInfo(nil, &Info{Version: Version, Flags: InfoHeaders, ServerID: "a1b2", ServerName: "edge-1", ServerVersion: "0.1.0", ClientID: 7, MaxPayload: 1 << 20, PingIntervalMS: 120000})
	infoV1 = infoV1[:len(infoV1)-1]
	infoV1[1]--
	add("info_without_connect_urls", infoV1)
	add("pub_hello", AppendPub(nil, 0, "a.b", "", nil, []byte("hello")))
	add("pub_empty_payload", AppendPub(nil, 0, "a", "", nil, nil))
	add("pub_reply", AppendPub(nil, 0, "svc.time", "_INBOX.x.1", nil, []byte("now?")))
	add("pub_headers", AppendPub(nil, 0, "sensors.k1.temp", "", h, []byte("21.5")))
	add("pub_ack_reply_headers", AppendPub(nil, 300, "orders.new", "r.1", h, []byte{0, 1, 2, 255}))
	add("pub_200_byte_payload", AppendPub(nil, 0, "big", "", nil, make([]byte, 200)))
	add("sub", AppendSub(nil, 0, 1, "a.*", "", ""))
	add("sub_queue", AppendSub(nil, 0, 2, "jobs.>", "workers", ""))
	add("sub_ack_queue_filter", AppendSub(nil, 5, 3, "ev", "g", `hdr.sender == "s1" && size <= 512`))
	add("unsub", AppendUnsub(nil, 0, 1, 0))
	add("unsub_ack_max", AppendUnsub(nil, 6, 2, 10))
	add("msg_hello", AppendMsg(nil, 1, []byte("a.b"), nil, nil, []byte("hello")))
	add("msg_reply_headers", AppendMsg(nil, 300, []byte("orders.new"), []byte("r.1"), h, []byte("x")))
	add("ping", AppendPing(nil))
	add("pong", AppendPong(nil))
	add("ok", AppendOK(nil, 300))
	add("err_bad_subject", AppendErr(nil, CodeBadSubject, 5, `subject "a..b": empty token`))
	add("err_fatal_no_id", AppendErr(nil, CodeTooLarge, 0, "frame too large"))
	add("rhello", AppendRouteHello(nil, &RouteHello{Version: Version, Cluster: "prod", NodeName: "n1", NodeID: "a1b2c3",
		RouteAddr: "10.0.0.1:7401", ServerVersion: "0.1.0", ClientURLs: []string{"tern://10.0.0.1:7400", "mqtt://10.0.0.1:1883"}}))
	add("rhello_no_client_urls", AppendRouteHello(nil, &RouteHello{Version: Version, Cluster: "prod", NodeName: "n2", NodeID: "d4e5f6", RouteAddr: "10.0.0.2:7401", ServerVersion: "0.1.0"}))
	nonce := make([]byte, RouteNonceLen)
	for i := range nonce {
		nonce[i] = byte(i)
	}
	add("rhello_auth", AppendRouteHello(nil, &RouteHello{Version: Version, Cluster: "prod", NodeName: "n3", NodeID: "g7h8i9",
		RouteAddr: "10.0.0.3:7401", ServerVersion: "0.1.0", ClientURLs: []string{"tern://10.0.0.3:7400"}, Nonce: nonce}))
	add("rint", AppendRouteInterest(nil, "sensors.*.temp", "", 2))
	add("rint_queue", AppendRouteInterest(nil, "jobs.>", "workers", 300))
	add("rint_withdrawn", AppendRouteInterest(nil, "sensors.*.temp", "", 0))
	add("rrefresh_begin", AppendRouteRefresh(nil, RefreshBegin, 7))
	add("rrefresh_end", AppendRouteRefresh(nil, RefreshEnd, 7))
	add("rmsg_hello", AppendRouteMsg[string, string](nil, 0, 0, "a.b", "", "", nil, nil, []byte("hello")))
	add("rmsg_seq_qos1_queues", AppendRouteMsg(nil, 300, 1, "jobs.new", "", "", []string{"workers", "audit"}, nil, []byte("job")))
	add("rmsg_all_fields", AppendRouteMsg(nil, 1, 2|AttrRetain, "orders.new", "", "r.1", []string{"g"}, h, []byte{0, 1, 2, 255}))
	add("rmsg_routed", AppendRouteMsg(nil, 0, 0, "orders.new", "_INBOX.abc.1", "$TERN.ACK.S.C.0.1.1.1.0.0", []string(nil), nil, []byte("x")))
	add("rmsg_group_only", AppendRouteMsg(nil, 0, AttrGroupOnly, "push.orders", "", "$TERN.ACK.S.C.0.1.1.1.0.0", []string{"deliver"}, nil, []byte("x")))
	add("rack", AppendRouteAck(nil, 300))
	add("rraft", AppendRouteRaft(nil, []byte{0x01, 0x02, 0x03}))
	proof := make([]byte, RouteAuthLen)
	for i := range proof {
		proof[i] = byte(0xf0 ^ i)
	}
	add("rauth", AppendRouteAuth(nil, proof))
	errVec := func(name, kind string, b []byte) {
		out = append(out, vector{Name: name, Hex: hex.EncodeToString(b), Error: kind})
	}
	errVec("incomplete_header", "incomplete", []byte{byte(TypePub)})
	errVec("incomplete_body", "incomplete", AppendPub(nil, 0, "a.b", "", nil, []byte("hello"))[:6])
	errVec("too_large", "too_large", []byte{byte(TypePub), 0x80, 0x80, 0x80, 0x01}) // 2 MiB body, over the 1 MiB + 64 KiB default
	errVec("unknown_type", "unknown_type", []byte{0x7e, 0x00})
	errVec("unknown_flag", "malformed", []byte{byte(TypePub), 0x03, 0x80, 0x01, 'a'})
	errVec("non_minimal_varint", "malformed", []byte{byte(TypeOK), 0x02, 0x81, 0x00})
	errVec("empty_flagged_reply", "malformed", []byte{byte(TypePub), 0x04, FlagReply, 0x01, 'a', 0x00})
	errVec("trailing_bytes", "malformed", []byte{byte(TypePing), 0x01, 0x00})
	errVec("unknown_route_type", "unknown_type", []byte{0x2f, 0x00})
	errVec("rauth_short", "malformed", AppendRouteAuth(nil, proof[:RouteAuthLen-1]))
	errVec("rraft_empty", "malformed", []byte{byte(TypeRouteRaft), 0x00})
	errVec("rint_weight_over_32_bits", "malformed", []byte{byte(TypeRouteInterest), 0x08, 0x00, 0x01, 'a', 0x80, 0x80, 0x80, 0x80, 0x10})
	errVec("rrefresh_phase_3", "malformed", []byte{byte(TypeRouteRefresh), 0x02, 0x03, 0x01})
	errVec("rrefresh_generation_0", "malformed", []byte{byte(TypeRouteRefresh), 0x02, RefreshBegin, 0x00})
	errVec("rack_0", "malformed", []byte{byte(TypeRouteAck), 0x01, 0x00})
	errVec("rmsg_qos_3", "malformed", []byte{byte(TypeRouteMsg), 0x04, 0x00, 0x03, 0x01, 'a'})
	errVec("rmsg_group_only_without_queues", "malformed", []byte{byte(TypeRouteMsg), 0x04, 0x00, AttrGroupOnly, 0x01, 'a'})
	errVec("rmsg_queues_count_0", "malformed", []byte{byte(TypeRouteMsg), 0x05, FlagQueues, 0x00, 0x01, 'a', 0x00})
	errVec("rmsg_seq_0", "malformed", []byte{byte(TypeRouteMsg), 0x05, FlagSeq, 0x00, 0x00, 0x01, 'a'})
	return out
}

func TestVectors(t *testing.T) {
	path := "testdata/vectors.json"
	gen := generateVectors()
	if *update {
		b, _ := json.MarshalIndent(gen, "", "  ")
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var file []vector
	if err := json.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(file, gen) {
		t.Fatal("testdata/vectors.json differs from what the encoders produce; run go test ./internal/wire -run TestVectors -update if the change is intended")
	}
	// Decode every vector from its hex alone, as another client would.
	for _, v := range file {
		raw, err := hex.DecodeString(v.Hex)
		if err != nil {
			t.Fatal(err)
		}
		var f Frame
		n, err := f.Decode(raw, 0)
		if v.Error != "" {
			want := map[string]error{"incomplete": ErrIncomplete, "too_large": ErrTooLarge, "malformed": ErrMalformed, "unknown_type": ErrUnknownType}[v.Error]
			if !errors.Is(err, want) {
				t.Errorf("%s: got %v, want %s", v.Name, err, v.Error)
			}
			continue
		}
		if err != nil || n != len(raw) || !reflect.DeepEqual(vectorOf(&f), v.Frame) {
			t.Errorf("%s: decoded %+v (%v)", v.Name, vectorOf(&f), err)
		}
	}
}
