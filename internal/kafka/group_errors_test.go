package kafka_test

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestGroupProtocolErrors drives the group APIs by hand and checks Kafka's
// answers: FindCoordinator in both forms, MEMBER_ID_REQUIRED with an id, a
// one-member group through join and sync, then UNKNOWN_MEMBER_ID,
// ILLEGAL_GENERATION, INVALID_SESSION_TIMEOUT, INCONSISTENT_GROUP_PROTOCOL, a
// commit of a generation that is gone, a commit over a connection older than the
// member's last one, batched LeaveGroup and multi-group OffsetFetch.
func TestGroupProtocolErrors(t *testing.T) {
	_, addr := startTern(t, fastGroups)
	r := dialRaw(t, addr)
	host, port, _ := strings.Cut(addr, ":")

	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.Version, fc.CoordinatorKey = 3, "g"
	if resp := r.do(fc).(*kmsg.FindCoordinatorResponse); resp.ErrorCode != 0 || resp.Host != host || resp.NodeID != 0 {
		t.Fatalf("FindCoordinator v3: %+v", resp)
	}
	fc = kmsg.NewPtrFindCoordinatorRequest()
	fc.Version, fc.CoordinatorKeys = 4, []string{"g", "h"}
	resp := r.do(fc).(*kmsg.FindCoordinatorResponse)
	if len(resp.Coordinators) != 2 || resp.Coordinators[1].Key != "h" || resp.Coordinators[1].ErrorCode != 0 || port == "" {
		t.Fatalf("FindCoordinator v4: %+v", resp)
	}
	fc.CoordinatorType = 1 // transactions
	if resp := r.do(fc).(*kmsg.FindCoordinatorResponse); resp.Coordinators[0].ErrorCode == 0 {
		t.Fatalf("a transaction coordinator was found: %+v", resp)
	}

	join := func(member string, session time.Duration, protocol string) *kmsg.JoinGroupResponse {
		jg := kmsg.NewPtrJoinGroupRequest()
		jg.Version, jg.Group, jg.MemberID, jg.ProtocolType = 6, "g", member, "consumer"
		jg.SessionTimeoutMillis, jg.RebalanceTimeoutMillis = int32(session/time.Millisecond), 10_000
		p := kmsg.NewJoinGroupRequestProtocol()
		p.Name, p.Metadata = protocol, []byte{0, 0}
		jg.Protocols = append(jg.Protocols, p)
		return r.do(jg).(*kmsg.JoinGroupResponse)
	}
	first := join("", 10*time.Second, "range")
	if first.ErrorCode != kerr.MemberIDRequired.Code || !strings.HasPrefix(first.MemberID, "raw-test-") {
		t.Fatalf("first join: %+v, want MEMBER_ID_REQUIRED and an id", first)
	}
	me := first.MemberID
	joined := join(me, 10*time.Second, "range")
	if joined.ErrorCode != 0 || joined.Generation != 1 || joined.LeaderID != me || len(joined.Members) != 1 {
		t.Fatalf("join: %+v", joined)
	}
	sync := func(member string, gen int32) *kmsg.SyncGroupResponse {
		sg := kmsg.NewPtrSyncGroupRequest()
		sg.Version, sg.Group, sg.MemberID, sg.Generation = 4, "g", member, gen
		a := kmsg.NewSyncGroupRequestGroupAssignment()
		a.MemberID, a.MemberAssignment = me, []byte("mine")
		sg.GroupAssignment = append(sg.GroupAssignment, a)
		return r.do(sg).(*kmsg.SyncGroupResponse)
	}
	if s := sync(me, 1); s.ErrorCode != 0 || string(s.MemberAssignment) != "mine" {
		t.Fatalf("sync: %+v", s)
	}
	if s := sync(me, 7); s.ErrorCode != kerr.IllegalGeneration.Code {
		t.Fatalf("sync of generation 7: %+v", s)
	}
	hb := func(member string, gen int32) int16 {
		h := kmsg.NewPtrHeartbeatRequest()
		h.Version, h.Group, h.MemberID, h.Generation = 4, "g", member, gen
		return r.do(h).(*kmsg.HeartbeatResponse).ErrorCode
	}
	if c := hb(me, 1); c != 0 {
		t.Fatalf("heartbeat: %d", c)
	}
	if c := hb("stranger", 1); c != kerr.UnknownMemberID.Code {
		t.Fatalf("heartbeat of a stranger: %d", c)
	}
	if c := hb(me, 0); c != kerr.IllegalGeneration.Code {
		t.Fatalf("heartbeat of generation 0: %d", c)
	}
	if j := join("", time.Second, "range"); j.ErrorCode != kerr.InvalidSessionTimeout.Code {
		t.Fatalf("join with a 1 s session: %+v", j)
	}
	if j := join("", 10*time.Second, "other"); j.ErrorCode != kerr.InconsistentGroupProtocol.Code {
		t.Fatalf("join with another protocol: %+v", j)
	}

	commitOver := func(r *raw, grp, member string, gen int32, offset int64) int16 {
		oc := kmsg.NewPtrOffsetCommitRequest()
		oc.Version, oc.Group, oc.MemberID, oc.Generation = 8, grp, member, gen
		ot := kmsg.NewOffsetCommitRequestTopic()
		ot.Topic = "errs"
		op := kmsg.NewOffsetCommitRequestTopicPartition()
		op.Offset = offset
		ot.Partitions = append(ot.Partitions, op)
		oc.Topics = append(oc.Topics, ot)
		return r.do(oc).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode
	}
	commit := func(grp, member string, gen int32) int16 { return commitOver(r, grp, member, gen, 3) }
	if c := commit("g", me, 1); c != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("commit to a missing topic: %d", c)
	}
	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.Version = 5
	ctt := kmsg.NewCreateTopicsRequestTopic()
	ctt.Topic, ctt.NumPartitions, ctt.ReplicationFactor = "errs", 1, 1
	ct.Topics = append(ct.Topics, ctt)
	r.do(ct)
	if c := commit("g", me, 1); c != 0 {
		t.Fatalf("commit: %d", c)
	}
	if c := commit("g", me, 5); c != kerr.IllegalGeneration.Code {
		t.Fatalf("commit of generation 5: %d", c)
	}
	if c := commit("g", "stranger", 1); c != kerr.UnknownMemberID.Code {
		t.Fatalf("commit of a stranger: %d", c)
	}
	if c := commit("other", "", 3); c != kerr.IllegalGeneration.Code {
		t.Fatalf("commit of a generation of a group that is not there: %d", c)
	}
	// The member commits over a new connection: a commit read from its first
	// connection afterwards (sent before the client gave up on it) is refused and
	// leaves the newer offset.
	r2 := dialRaw(t, addr)
	if c := commitOver(r2, "g", me, 1, 9); c != 0 {
		t.Fatalf("commit over a new connection: %d", c)
	}
	if c := commitOver(r, "g", me, 1, 2); c != kerr.RequestTimedOut.Code {
		t.Fatalf("commit over the older connection after it: %d, want REQUEST_TIMED_OUT", c)
	}

	// Leave: the member and a stranger at once (v3+).
	lg := kmsg.NewPtrLeaveGroupRequest()
	lg.Version, lg.Group = 5, "g"
	for _, id := range []string{me, "stranger"} {
		m := kmsg.NewLeaveGroupRequestMember()
		m.MemberID = id
		lg.Members = append(lg.Members, m)
	}
	lr := r.do(lg).(*kmsg.LeaveGroupResponse)
	if len(lr.Members) != 2 || lr.Members[0].ErrorCode != 0 || lr.Members[1].ErrorCode != kerr.UnknownMemberID.Code {
		t.Fatalf("leave: %+v", lr)
	}
	if c := hb(me, 1); c != kerr.UnknownMemberID.Code {
		t.Fatalf("heartbeat after leaving: %d", c)
	}

	// Two groups in one OffsetFetch (v8+).
	of := kmsg.NewPtrOffsetFetchRequest()
	of.Version = 8
	for _, grp := range []string{"g", "none"} {
		rg := kmsg.NewOffsetFetchRequestGroup()
		rg.Group = grp
		rt := kmsg.NewOffsetFetchRequestGroupTopic()
		rt.Topic, rt.Partitions = "errs", []int32{0}
		rg.Topics = append(rg.Topics, rt)
		of.Groups = append(of.Groups, rg)
	}
	fr := r.do(of).(*kmsg.OffsetFetchResponse)
	if len(fr.Groups) != 2 || fr.Groups[0].Topics[0].Partitions[0].Offset != 9 || fr.Groups[1].Topics[0].Partitions[0].Offset != -1 {
		t.Fatalf("offset fetch: %+v", fr)
	}
}
