package streams

import "testing"

// TestRequestRouting: which API requests the catalogue answers (on the node that
// got them) and which stream the others are about (answered by its leader).
func TestRequestRouting(t *testing.T) {
	for _, c := range []struct {
		op        string
		catalogue bool
		stream    string
	}{
		{"STREAM.LIST", true, ""},
		{"STREAM.CREATE.ORDERS", true, "ORDERS"},
		{"STREAM.UPDATE.ORDERS", true, "ORDERS"},
		{"STREAM.DELETE.ORDERS", true, "ORDERS"},
		{"STREAM.INFO.ORDERS", false, "ORDERS"},
		{"STREAM.PURGE.ORDERS", false, "ORDERS"},
		{"STREAM.MSG.GET.ORDERS", false, "ORDERS"},
		{"CONSUMER.CREATE.ORDERS", false, "ORDERS"},
		{"CONSUMER.CREATE.ORDERS.W", false, "ORDERS"},
		{"CONSUMER.NEXT.ORDERS.W", false, "ORDERS"},
		{"CONSUMER.LIST.ORDERS", false, "ORDERS"},
		{"STREAM.NAMES", false, ""},
		{"CONSUMER", false, ""},
	} {
		if got := catalogueOp([]byte(c.op)); got != c.catalogue {
			t.Errorf("%s: catalogue %v, want %v", c.op, got, c.catalogue)
		}
		if got := string(streamOf([]byte(c.op))); got != c.stream {
			t.Errorf("%s: stream %q, want %q", c.op, got, c.stream)
		}
	}
}

// TestServeSubjects: the leader's subscriptions cover every per-stream request
// and ack, and nothing of another stream.
func TestServeSubjects(t *testing.T) {
	api, acks := serveSubjects("ORDERS")
	want := map[string]bool{
		"$TERN.API.STREAM.INFO.ORDERS": true, "$TERN.API.STREAM.PURGE.ORDERS": true,
		"$TERN.API.STREAM.MSG.GET.ORDERS": true, "$TERN.API.CONSUMER.*.ORDERS": true,
		"$TERN.API.CONSUMER.*.ORDERS.*": true, "$TERN.ACK.ORDERS.>": true,
	}
	for _, s := range append(api, acks...) {
		if !want[s] {
			t.Errorf("unexpected subject %s", s)
		}
		delete(want, s)
	}
	for s := range want {
		t.Errorf("missing subject %s", s)
	}
}

// TestServeSubjectsOfAccount: an account's stream is served on the account's
// subjects only.
func TestServeSubjectsOfAccount(t *testing.T) {
	api, acks := serveSubjects("$A.acme.ORDERS")
	want := map[string]bool{
		"$A.acme.$TERN.API.STREAM.INFO.ORDERS": true, "$A.acme.$TERN.API.STREAM.PURGE.ORDERS": true,
		"$A.acme.$TERN.API.STREAM.MSG.GET.ORDERS": true, "$A.acme.$TERN.API.CONSUMER.*.ORDERS": true,
		"$A.acme.$TERN.API.CONSUMER.*.ORDERS.*": true, "$A.acme.$TERN.ACK.ORDERS.>": true,
	}
	for _, s := range append(api, acks...) {
		if !want[s] {
			t.Errorf("unexpected subject %s", s)
		}
		delete(want, s)
	}
	for s := range want {
		t.Errorf("missing subject %s", s)
	}
	if got := infoSubject("$A.acme.ORDERS"); got != "$A.acme.$TERN.API.STREAM.INFO.ORDERS" {
		t.Errorf("info subject %s", got)
	}
	if got := infoSubject("ORDERS"); got != "$TERN.API.STREAM.INFO.ORDERS" {
		t.Errorf("info subject %s", got)
	}
}
