package kafka_test

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestIncrementalFetchSessions: a full fetch with epoch 0 opens a session; the
// session's next fetches name nothing and are answered with only the partitions
// that have news (here none, then the one produced to, at the offset the session
// remembers); a wrong epoch and an unknown id are refused; epoch -1 closes it. A
// full fetch naming a session that is gone (its opening answer was lost with the
// client's connection, and the client asks again with the id it had) gets a new
// session, or none with epoch -1, as from Kafka.
func TestIncrementalFetchSessions(t *testing.T) {
	_, addr := startTern(t, nil)
	if res, err := kadm.NewClient(newClient(t, addr)).CreateTopic(ctxT(t), 2, -1, nil, "sess"); err != nil || res.Err != nil {
		t.Fatalf("create: %v %v", err, res.Err)
	}
	r := dialRaw(t, addr)
	for p := range 2 {
		if pr := producePart(t, r, produceReq("sess", int32(p), makeBatch(-1, -1, -1, "a"))); pr.ErrorCode != 0 {
			t.Fatalf("produce: %d", pr.ErrorCode)
		}
	}
	fetch := func(id, epoch int32, offsets map[int32]int64) *kmsg.FetchResponse {
		t.Helper()
		req := kmsg.NewPtrFetchRequest()
		req.Version, req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 12, 0, 0, 1<<20
		req.SessionID, req.SessionEpoch = id, epoch
		if len(offsets) > 0 {
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic = "sess"
			for p, o := range offsets {
				rp := kmsg.NewFetchRequestTopicPartition()
				rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, o, 1<<20
				rt.Partitions = append(rt.Partitions, rp)
			}
			req.Topics = append(req.Topics, rt)
		}
		return r.do(req).(*kmsg.FetchResponse)
	}
	parts := func(resp *kmsg.FetchResponse) map[int32]int {
		out := map[int32]int{}
		for _, ot := range resp.Topics {
			for _, op := range ot.Partitions {
				out[op.Partition] = len(op.RecordBatches)
			}
		}
		return out
	}

	full := fetch(0, 0, map[int32]int64{0: 1, 1: 1})
	if full.ErrorCode != 0 || full.SessionID == 0 || len(parts(full)) != 2 {
		t.Fatalf("full fetch opening a session: error %d, session %d, partitions %v", full.ErrorCode, full.SessionID, parts(full))
	}
	id := full.SessionID
	if inc := fetch(id, 1, nil); inc.ErrorCode != 0 || inc.SessionID != id || len(parts(inc)) != 0 {
		t.Fatalf("incremental fetch with nothing new: error %d, session %d, partitions %v", inc.ErrorCode, inc.SessionID, parts(inc))
	}
	if pr := producePart(t, r, produceReq("sess", 1, makeBatch(-1, -1, -1, "b"))); pr.ErrorCode != 0 {
		t.Fatalf("produce: %d", pr.ErrorCode)
	}
	inc := fetch(id, 2, nil)
	if got := parts(inc); inc.ErrorCode != 0 || len(got) != 1 || got[1] == 0 {
		t.Fatalf("incremental fetch after a produce to partition 1: error %d, partitions %v", inc.ErrorCode, got)
	}
	if inc := fetch(id, 9, nil); inc.ErrorCode != kerr.InvalidFetchSessionEpoch.Code {
		t.Fatalf("wrong epoch: error %d", inc.ErrorCode)
	}
	if inc := fetch(id+1, 1, nil); inc.ErrorCode != kerr.FetchSessionIDNotFound.Code {
		t.Fatalf("unknown session: error %d", inc.ErrorCode)
	}
	if closed := fetch(id, -1, map[int32]int64{0: 0}); closed.ErrorCode != 0 || closed.SessionID != 0 || parts(closed)[0] == 0 {
		t.Fatalf("closing fetch: error %d, session %d, partitions %v", closed.ErrorCode, closed.SessionID, parts(closed))
	}
	if inc := fetch(id, 3, nil); inc.ErrorCode != kerr.FetchSessionIDNotFound.Code {
		t.Fatalf("closed session: error %d", inc.ErrorCode)
	}
	again := fetch(id, 0, map[int32]int64{0: 1, 1: 1})
	if again.ErrorCode != 0 || again.SessionID == 0 || again.SessionID == id || parts(again)[1] == 0 {
		t.Fatalf("full fetch naming the closed session: error %d, session %d, partitions %v", again.ErrorCode, again.SessionID, parts(again))
	}
	if inc := fetch(again.SessionID, 1, nil); inc.ErrorCode != 0 || inc.SessionID != again.SessionID {
		t.Fatalf("the new session's next fetch: error %d, session %d", inc.ErrorCode, inc.SessionID)
	}
	if none := fetch(id, -1, map[int32]int64{0: 0}); none.ErrorCode != 0 || none.SessionID != 0 || parts(none)[0] == 0 {
		t.Fatalf("sessionless fetch naming the closed session: error %d, session %d, partitions %v", none.ErrorCode, none.SessionID, parts(none))
	}
	if inc := fetch(0, 1, nil); inc.ErrorCode != kerr.InvalidFetchSessionEpoch.Code {
		t.Fatalf("an epoch without a session: error %d", inc.ErrorCode)
	}
}
