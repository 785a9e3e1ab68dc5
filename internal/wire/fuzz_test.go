package wire

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// reencode writes f back with the encoder of its type; nil for CONNECT/INFO/RHELLO,
// whose bodies are checked by their own parsers.
func reencode(f *Frame) []byte {
	switch f.Type {
	case TypePub:
		return AppendPub(nil, f.ID, f.Subject, f.Reply, f.Header, f.Payload)
	case TypeMsg:
		return AppendMsg(nil, f.SID, f.Subject, f.Reply, f.Header, f.Payload)
	case TypeSub:
		return AppendSub(nil, f.ID, f.SID, f.Subject, f.Queue, f.Filter)
	case TypeUnsub:
		return AppendUnsub(nil, f.ID, f.SID, f.Max)
	case TypePing:
		return AppendPing(nil)
	case TypePong:
		return AppendPong(nil)
	case TypeOK:
		return AppendOK(nil, f.ID)
	case TypeErr:
		return AppendErr(nil, f.Code, f.ID, string(f.Payload))
	case TypeRouteInterest:
		return AppendRouteInterest(nil, f.Subject, f.Queue, f.Weight)
	case TypeRouteRefresh:
		return AppendRouteRefresh(nil, f.Phase, f.Generation)
	case TypeRouteMsg:
		var queues [][]byte
		for q := range f.Queues.All() {
			queues = append(queues, q)
		}
		return AppendRouteMsg(nil, f.Seq, f.Attrs, f.Subject, f.Route, f.Reply, queues, f.Header, f.Payload)
	case TypeRouteAck:
		return AppendRouteAck(nil, f.Seq)
	case TypeRouteRaft:
		return AppendRouteRaft(nil, f.Payload)
	case TypeRouteAuth:
		return AppendRouteAuth(nil, f.Payload)
	}
	return nil
}

// FuzzDecode decodes arbitrary bytes as a stream of frames. Decoding never panics,
// always makes progress, and every frame it accepts re-encodes to exactly the bytes it
// was decoded from (one encoding per frame).
func FuzzDecode(f *testing.F) {
	for _, s := range samples() {
		if len(s.enc) < 4096 {
			f.Add(s.enc)
		}
	}
	f.Add(AppendConnect(nil, &Connect{Version: 1, Name: "x"}))
	f.Add(AppendRouteHello(nil, &RouteHello{Version: 1, Cluster: "c", ClientURLs: []string{"u"}}))
	f.Add(AppendRouteHello(nil, &RouteHello{Version: 1, Cluster: "c", Nonce: make([]byte, RouteNonceLen)}))
	f.Add(AppendInfo(nil, &Info{Version: 1, ServerName: "n", ConnectURLs: []string{"tern://a:1", "tern://b:2"}}))
	f.Add([]byte{byte(TypePub), 0xff, 0xff, 0xff, 0x7f})
	f.Add([]byte{0x7e, 0})
	f.Add([]byte{byte(TypeSub), 2, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		for len(data) > 0 {
			var fr Frame
			n, err := fr.Decode(data, 1<<16)
			if err != nil {
				return
			}
			if n <= 0 || n > len(data) {
				t.Fatalf("Decode consumed %d of %d", n, len(data))
			}
			if enc := reencode(&fr); enc != nil {
				var again Frame
				m, err := again.Decode(enc, 1<<16)
				if err != nil || m != len(enc) || !equal(fr, again) {
					t.Fatalf("%s does not survive re-encoding: %v", fr.Type, err)
				}
				if !bytes.Equal(enc, data[:n]) {
					t.Fatalf("%s: decoded from %x but encodes as %x: frames must have one encoding", fr.Type, data[:n], enc)
				}
			}
			if fr.Type == TypeConnect {
				_, _ = ParseConnect(fr.Payload)
			}
			if fr.Type == TypeInfo {
				_, _ = ParseInfo(fr.Payload)
			}
			if fr.Type == TypeRouteHello {
				_, _ = ParseRouteHello(fr.Payload)
			}
			if len(fr.Header) > 0 {
				_ = fr.Header.Validate()
				fr.Header.Each(func(k, v []byte) bool { return true })
				_, _ = fr.Header.Lookup("k")
			}
			data = data[n:]
		}
	})
}

// FuzzRouteFrames decodes arbitrary bytes as a stream of route frames, as a node
// reads a route. Besides what FuzzDecode checks, every decoded frame obeys the rules
// the route layer relies on: the RMSG queue list holds 1 to MaxRouteQueues non-empty
// names (at least one with AttrGroupOnly) and RouteMsgLen sizes it exactly; RINT,
// RREFRESH and RACK values are in range; RAUTH carries exactly RouteAuthLen bytes; an
// RHELLO that parses encodes back to the fields it parsed from, with a nonce of
// RouteNonceLen bytes exactly when it has HelloAuth.
func FuzzRouteFrames(f *testing.F) {
	var stream []byte
	for _, s := range routeSamples() {
		f.Add(s.enc)
		stream = append(stream, s.enc...)
	}
	f.Add(stream)
	// The handshake of two nodes with the secret, as one of them reads it: RHELLO,
	// RAUTH, then the first frames of the route.
	f.Add(append(append(AppendRouteHello(nil, sampleAuthHello()), AppendRouteAuth(nil, sampleProof())...),
		AppendRouteRefresh(nil, RefreshBegin, 1)...))
	// HelloAuth with the nonce cut short, and RAUTH a byte short and a byte long.
	short := AppendRouteHello(nil, sampleAuthHello())
	short = body(TypeRouteHello, short[2:len(short)-1]...)
	f.Add(short)
	f.Add(AppendRouteAuth(nil, sampleProof()[1:]))
	f.Add(AppendRouteAuth(nil, append(sampleProof(), 0)))
	f.Fuzz(func(t *testing.T, data []byte) {
		for len(data) > 0 {
			var fr Frame
			n, err := fr.Decode(data, 1<<16)
			if err != nil {
				if !errors.Is(err, ErrIncomplete) && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTooLarge) &&
					!errors.Is(err, ErrUnknownType) {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if n <= 0 || n > len(data) {
				t.Fatalf("Decode consumed %d of %d", n, len(data))
			}
			if enc := reencode(&fr); enc != nil {
				var again Frame
				m, err := again.Decode(enc, 1<<16)
				if err != nil || m != len(enc) || !equal(fr, again) {
					t.Fatalf("%s does not survive re-encoding: %v", fr.Type, err)
				}
				if !bytes.Equal(enc, data[:n]) {
					t.Fatalf("%s: decoded from %x but encodes as %x", fr.Type, data[:n], enc)
				}
			}
			switch fr.Type {
			case TypeRouteMsg:
				var queues [][]byte
				for q := range fr.Queues.All() {
					if len(q) == 0 {
						t.Fatal("empty queue name")
					}
					queues = append(queues, q)
				}
				if len(queues) != fr.Queues.Len() || len(queues) > MaxRouteQueues ||
					(len(queues) > 0) != (fr.Flags&FlagQueues != 0) ||
					fr.Attrs&AttrGroupOnly != 0 && len(queues) == 0 || fr.Attrs&AttrQoS > 2 {
					t.Fatalf("RMSG with flags %02x attrs %02x and %d queues", fr.Flags, fr.Attrs, len(queues))
				}
				if fr.Flags&FlagSeq != 0 && fr.Seq == 0 {
					t.Fatal("seq flag with seq 0")
				}
				if l := RouteMsgLen(fr.Seq, fr.Subject, fr.Route, fr.Reply, queues, fr.Header, fr.Payload); l != n {
					t.Fatalf("RouteMsgLen %d, frame %d", l, n)
				}
			case TypeRouteRefresh:
				if fr.Phase != RefreshBegin && fr.Phase != RefreshEnd || fr.Generation == 0 {
					t.Fatalf("RREFRESH phase %d generation %d", fr.Phase, fr.Generation)
				}
			case TypeRouteAck:
				if fr.Seq == 0 {
					t.Fatal("RACK 0")
				}
			case TypeRouteAuth:
				if len(fr.Payload) != RouteAuthLen {
					t.Fatalf("RAUTH of %d bytes", len(fr.Payload))
				}
			case TypeRouteHello:
				if h, err := ParseRouteHello(fr.Payload); err == nil {
					if (h.Flags&HelloAuth != 0) != (len(h.Nonce) == RouteNonceLen) || len(h.Nonce) != 0 && len(h.Nonce) != RouteNonceLen {
						t.Fatalf("RHELLO flags %#x with a nonce of %d bytes", h.Flags, len(h.Nonce))
					}
					var hf Frame
					if _, err := hf.Decode(AppendRouteHello(nil, &h), 0); err != nil {
						t.Fatalf("RHELLO %+v does not encode: %v", h, err)
					}
					again, err := ParseRouteHello(hf.Payload)
					if err != nil || !reflect.DeepEqual(h, again) {
						t.Fatalf("RHELLO %+v re-parsed as %+v (%v)", h, again, err)
					}
				}
			}
			data = data[n:]
		}
	})
}

// FuzzHeader checks the header block functions agree with each other.
func FuzzHeader(f *testing.F) {
	f.Add([]byte(AppendHeader(nil, "k", "v")))
	f.Add([]byte{0})
	f.Add([]byte{3, 'a'})
	f.Fuzz(func(t *testing.T, data []byte) {
		h := Header(data)
		valid := h.Validate() == nil
		seen := 0
		h.Each(func(k, v []byte) bool {
			seen += len(k) + len(v)
			if valid {
				if got, ok := h.Lookup(string(k)); !ok || len(got) > len(data) {
					t.Fatalf("Each saw key %q that Lookup misses", k)
				}
			}
			return true
		})
		if valid && seen > len(data) {
			t.Fatal("Each visited more bytes than the block has")
		}
	})
}
