package kafka

import (
	"bytes"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tern-mq/tern/internal/kafka/group"
	"github.com/tern-mq/tern/internal/streamapi"
)

// The consumer group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
// LeaveGroup (the group machine, coordinator.go), OffsetCommit and OffsetFetch
// (durable consumers, offsets.go), OffsetDelete, DescribeGroups, ListGroups and
// DeleteGroups.

// maxOffsetMetadata is the longest commit metadata accepted, as Kafka's
// offset.metadata.max.bytes; Tern does not keep it.
const maxOffsetMetadata = 4096

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func (c *conn) clientHost() string {
	if h, _, err := net.SplitHostPort(c.remote); err == nil {
		return "/" + h
	}
	return "/" + c.remote
}

// ---------------------------------------------------------------------------------
// FindCoordinator

func (c *conn) findCoordinator(req *kmsg.FindCoordinatorRequest) *kmsg.FindCoordinatorResponse {
	resp := kmsg.NewPtrFindCoordinatorResponse()
	resp.Version = req.Version
	keys := req.CoordinatorKeys
	if req.Version < 4 {
		keys = []string{req.CoordinatorKey}
	}
	for _, key := range keys {
		out := kmsg.NewFindCoordinatorResponseCoordinator()
		out.Key, out.NodeID, out.Port = key, -1, -1
		var msg string
		switch {
		case req.CoordinatorType != 0:
			out.ErrorCode, msg = kerr.InvalidRequest.Code, "only consumer groups (key type 0) have coordinators: transactions and share groups are not supported"
		case key == "":
			out.ErrorCode, msg = kerr.InvalidRequest.Code, "empty group id"
		default:
			b, _, ok := c.s.coords.Coordinator(c.group(key).coordKey())
			if !ok {
				out.ErrorCode = kerr.CoordinatorNotAvailable.Code
			} else {
				out.NodeID = b.ID
				out.Host, out.Port = b.endpoint(c.tls)
			}
		}
		if msg != "" {
			out.ErrorMessage = &msg
		}
		resp.Coordinators = append(resp.Coordinators, out)
	}
	if req.Version < 4 && len(resp.Coordinators) == 1 {
		o := resp.Coordinators[0]
		resp.ErrorCode, resp.ErrorMessage, resp.NodeID, resp.Host, resp.Port = o.ErrorCode, o.ErrorMessage, o.NodeID, o.Host, o.Port
		resp.Coordinators = nil
	}
	return resp
}

// ---------------------------------------------------------------------------------
// JoinGroup, SyncGroup, Heartbeat, LeaveGroup

// parkBound bounds how long a parked join or sync waits: the machine answers by
// the rebalance timeout (plus an empty group's initial delay) or the session
// timeout, whichever applies; this only guards against a lost answer.
func (c *conn) parkBound(session, rebalance time.Duration) time.Duration {
	d := max(session, rebalance) + max(c.s.groups.cfg.InitialRebalanceDelay, group.DefaultInitialRebalanceDelay) + 10*time.Second
	if c.s.parkMax > 0 {
		d = min(d, c.s.parkMax)
	}
	return d
}

func (c *conn) joinGroup(req *kmsg.JoinGroupRequest) *kmsg.JoinGroupResponse {
	resp := kmsg.NewPtrJoinGroupResponse()
	resp.Version = req.Version
	resp.Generation, resp.MemberID = -1, req.MemberID
	if code := c.s.coordinatorCode(c.group(req.Group)); code != 0 {
		resp.ErrorCode = code
		return resp
	}
	j := group.Join{Version: req.Version, MemberID: req.MemberID, InstanceID: str(req.InstanceID),
		ClientID: c.clientID(), ClientHost: c.clientHost(), ProtocolType: req.ProtocolType,
		SessionTimeout:   time.Duration(req.SessionTimeoutMillis) * time.Millisecond,
		RebalanceTimeout: time.Duration(req.RebalanceTimeoutMillis) * time.Millisecond, Nonce: nonce()}
	if req.Version == 0 {
		j.RebalanceTimeout = j.SessionTimeout
	}
	for _, p := range req.Protocols {
		j.Protocols = append(j.Protocols, group.Protocol{Name: p.Name, Metadata: bytes.Clone(p.Metadata)}) // kept past the request
	}
	d := c.s.groups.get(c.group(req.Group), true)
	if d == nil {
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		return resp
	}
	tok, ch := d.park()
	j.Token = tok
	d.do(func(now time.Time, g *group.Group) { g.Join(now, j) })
	r, ok := d.wait(tok, ch, c.parkBound(j.SessionTimeout, j.RebalanceTimeout))
	if !ok || r.Join == nil {
		resp.ErrorCode = kerr.RebalanceInProgress.Code
		return resp
	}
	jr := r.Join
	resp.ErrorCode, resp.Generation, resp.MemberID, resp.LeaderID = jr.Err, jr.Generation, jr.MemberID, jr.Leader
	if jr.Err == 0 || req.Version < 7 {
		pt, p := jr.ProtocolType, jr.Protocol
		resp.ProtocolType, resp.Protocol = &pt, &p
	}
	resp.SkipAssignment = jr.SkipAssignment && req.Version >= 9
	for _, m := range jr.Members {
		rm := kmsg.NewJoinGroupResponseMember()
		rm.MemberID, rm.ProtocolMetadata = m.ID, m.Metadata
		if m.InstanceID != "" {
			id := m.InstanceID
			rm.InstanceID = &id
		}
		resp.Members = append(resp.Members, rm)
	}
	return resp
}

// memberGroup is the group a member's request (sync, heartbeat) is for, or the error
// it gets: not coordinated here, or no member of it here.
func (s *Server) memberGroup(groupID groupRef) (*groupDriver, int16) {
	if code := s.coordinatorCode(groupID); code != 0 {
		return nil, code
	}
	d := s.groups.get(groupID, false)
	if d == nil {
		return nil, kerr.UnknownMemberID.Code
	}
	return d, 0
}

func (c *conn) syncGroup(req *kmsg.SyncGroupRequest) *kmsg.SyncGroupResponse {
	resp := kmsg.NewPtrSyncGroupResponse()
	resp.Version = req.Version
	d, code := c.s.memberGroup(c.group(req.Group))
	if code != 0 {
		resp.ErrorCode = code
		return resp
	}
	s := group.Sync{MemberID: req.MemberID, InstanceID: str(req.InstanceID), Generation: req.Generation,
		ProtocolType: req.ProtocolType, Protocol: req.Protocol}
	for _, a := range req.GroupAssignment {
		// The group keeps it past this request, whose bytes the connection's
		// next read overwrites.
		s.Assignments = append(s.Assignments, group.Assignment{MemberID: a.MemberID, Data: bytes.Clone(a.MemberAssignment)})
	}
	tok, ch := d.park()
	s.Token = tok
	d.do(func(now time.Time, g *group.Group) { g.Sync(now, s) })
	// A parked sync waits for the leader's, or for the leader's session to end.
	session := c.s.groups.cfg.MaxSessionTimeout
	if session <= 0 {
		session = group.DefaultMaxSessionTimeout
	}
	r, ok := d.wait(tok, ch, c.parkBound(session, 0))
	if !ok || r.Sync == nil {
		resp.ErrorCode = kerr.RebalanceInProgress.Code
		return resp
	}
	sr := r.Sync
	resp.ErrorCode, resp.MemberAssignment = sr.Err, sr.Assignment
	if sr.Err == 0 {
		pt, p := sr.ProtocolType, sr.Protocol
		resp.ProtocolType, resp.Protocol = &pt, &p
	}
	return resp
}

func (c *conn) heartbeat(req *kmsg.HeartbeatRequest) *kmsg.HeartbeatResponse {
	resp := kmsg.NewPtrHeartbeatResponse()
	resp.Version = req.Version
	d, code := c.s.memberGroup(c.group(req.Group))
	if code != 0 {
		resp.ErrorCode = code
		return resp
	}
	d.do(func(now time.Time, g *group.Group) {
		resp.ErrorCode = g.Heartbeat(now, req.MemberID, str(req.InstanceID), req.Generation)
	})
	return resp
}

func (c *conn) leaveGroup(req *kmsg.LeaveGroupRequest) *kmsg.LeaveGroupResponse {
	resp := kmsg.NewPtrLeaveGroupResponse()
	resp.Version = req.Version
	if code := c.s.coordinatorCode(c.group(req.Group)); code != 0 {
		resp.ErrorCode = code
		return resp
	}
	type leaving struct{ member, instance string }
	var who []leaving
	if req.Version < 3 {
		who = []leaving{{member: req.MemberID}}
	}
	for _, m := range req.Members {
		who = append(who, leaving{member: m.MemberID, instance: str(m.InstanceID)})
	}
	codes := make([]int16, len(who))
	d := c.s.groups.get(c.group(req.Group), false)
	if d == nil {
		for i := range codes {
			codes[i] = kerr.UnknownMemberID.Code
		}
	} else {
		d.do(func(now time.Time, g *group.Group) {
			for i, w := range who {
				codes[i] = g.Leave(now, w.member, w.instance)
			}
		})
	}
	if req.Version < 3 {
		resp.ErrorCode = codes[0]
		return resp
	}
	for i, w := range who {
		m := kmsg.NewLeaveGroupResponseMember()
		m.MemberID, m.ErrorCode = w.member, codes[i]
		if w.instance != "" {
			inst := w.instance
			m.InstanceID = &inst
		}
		resp.Members = append(resp.Members, m)
	}
	return resp
}

// ---------------------------------------------------------------------------------
// OffsetCommit, OffsetFetch

func (c *conn) offsetCommit(req *kmsg.OffsetCommitRequest) *kmsg.OffsetCommitResponse {
	resp := kmsg.NewPtrOffsetCommitResponse()
	resp.Version = req.Version
	gr := c.group(req.Group)
	code := c.s.coordinatorCode(gr)
	// Each topic's offsets, the partitions they are for (at) and each partition's
	// answer.
	type topicCommit struct {
		t         *topic
		positions []streamapi.SeekPosition
		at        []int
		codes     []int16
		call      *apiCall
	}
	commits := make([]topicCommit, len(req.Topics))
	for ti, rt := range req.Topics {
		tc := &commits[ti]
		tc.codes = make([]int16, len(rt.Partitions))
		tcode := code
		if tcode == 0 {
			if req.Version >= 10 {
				tc.t, tcode = c.findIDFor(rt.TopicID, needRead)
			} else {
				tc.t, tcode, _ = c.findFor(rt.Topic, false, needRead)
			}
		}
		for i, p := range rt.Partitions {
			switch {
			case tcode != 0:
				tc.codes[i] = tcode
			case p.Partition < 0 || int(p.Partition) >= tc.t.parts:
				tc.codes[i] = kerr.UnknownTopicOrPartition.Code
			case p.Metadata != nil && len(*p.Metadata) > maxOffsetMetadata:
				tc.codes[i] = kerr.OffsetMetadataTooLarge.Code
			case p.Offset < 0:
				tc.codes[i] = kerr.InvalidCommitOffsetSize.Code
			default:
				tc.positions = append(tc.positions, streamapi.SeekPosition{Partition: int(p.Partition), Next: uint64(p.Offset) + 1})
				tc.at = append(tc.at, i)
			}
		}
		tc.positions = dedupPositions(tc.positions)
	}
	// The member is checked and the seeks sent under the group's lock, so that
	// the consumers get the commits in the order the group accepted them.
	accept := func(send func()) int16 {
		d := c.s.groups.get(gr, false)
		switch {
		case d != nil:
			var code int16
			d.do(func(now time.Time, g *group.Group) {
				if code = g.CheckCommit(now, req.MemberID, str(req.InstanceID), req.Generation, c.id); code == 0 {
					send()
				}
			})
			return code
		case req.Generation >= 0:
			// No such group here (a restart ends every membership, as does the
			// coordinator moving here): the member joins again.
			c.s.log.Info("offset commit for a group this node has no members of: the member joins again",
				"group", req.Group, "member", req.MemberID, "generation", req.Generation)
			return kerr.IllegalGeneration.Code
		}
		send()
		return 0
	}
	if code == 0 {
		code = accept(func() {
			for i := range commits {
				if tc := &commits[i]; len(tc.positions) > 0 {
					tc.call = c.s.seekOffsets(gr, tc.t.name, tc.positions)
				}
			}
		})
	}
	for ti, rt := range req.Topics {
		tc := &commits[ti]
		if code != 0 {
			for i := range tc.codes {
				tc.codes[i] = code
			}
		} else if tc.call != nil {
			var refused int16
			_, err := apiAnswer[streamapi.ConsumerInfo](tc.call)
			if apiCode(err) == streamapi.CodeConsumerMissing {
				// The group's first commit on the topic: its consumer is made,
				// then the commit is accepted again (a newer one may have come).
				if err = c.s.makeOffsetsConsumer(gr, tc.t.name); err == nil {
					if refused = accept(func() { tc.call = c.s.seekOffsets(gr, tc.t.name, tc.positions) }); refused == 0 {
						_, err = apiAnswer[streamapi.ConsumerInfo](tc.call)
					}
				}
			}
			if err != nil {
				c.s.log.Warn("offset commit", "group", req.Group, "topic", tc.t.name, "err", err)
				refused = offsetsErrorCode(err)
			}
			for _, i := range tc.at {
				tc.codes[i] = refused
			}
		}
		out := kmsg.NewOffsetCommitResponseTopic()
		out.Topic, out.TopicID = rt.Topic, rt.TopicID
		for i, p := range rt.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, tc.codes[i]
			out.Partitions = append(out.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, out)
	}
	return resp
}

// dedupPositions keeps the last position given for each partition.
func dedupPositions(ps []streamapi.SeekPosition) []streamapi.SeekPosition {
	last := map[int]int{}
	for i, p := range ps {
		last[p.Partition] = i
	}
	if len(last) == len(ps) {
		return ps
	}
	out := ps[:0:0]
	for i, p := range ps {
		if last[p.Partition] == i {
			out = append(out, p)
		}
	}
	return out
}

// fetchedTopic is one topic of an OffsetFetch answer.
type fetchedTopic struct {
	name  string
	id    [16]byte
	parts []fetchedPartition
}

type fetchedPartition struct {
	partition int32
	offset    int64
	code      int16
}

// fetchGroupOffsets answers one group of an OffsetFetch: the topics asked (by
// name, or by id when byID), or every topic with the group's offsets when topics
// is nil.
func (c *conn) fetchGroupOffsets(groupID string, topics []fetchedTopic, byID bool) ([]fetchedTopic, int16) {
	gr := c.group(groupID)
	if code := c.s.coordinatorCode(gr); code != 0 {
		return nil, code
	}
	if topics == nil {
		all, err := c.s.groupOffsets(gr)
		if err != nil {
			c.s.log.Warn("offset fetch", "group", groupID, "err", err)
			return nil, offsetsErrorCode(err)
		}
		for name, info := range all {
			ft := fetchedTopic{name: name}
			t, code, _ := c.s.lookup(c.acct, name, false)
			if code == 0 {
				ft.id = t.id
			}
			if c.perms != nil && (code != 0 || !c.allowed(t, needRead)) {
				continue // as Kafka: topics the user may not read are left out
			}
			for _, p := range info.Partitions {
				ft.parts = append(ft.parts, fetchedPartition{partition: int32(p.Partition), offset: int64(p.AckFloor)})
			}
			topics = append(topics, ft)
		}
		return topics, 0
	}
	for i := range topics {
		ft := &topics[i]
		name := ft.name
		if byID || c.perms != nil {
			var t *topic
			var code int16
			if byID {
				t, code = c.findIDFor(ft.id, needRead)
			} else if t, code, _ = c.findFor(name, false, needRead); code == kerr.UnknownTopicOrPartition.Code {
				code = 0 // no offsets, answered below
			}
			if code != 0 {
				for j := range ft.parts {
					ft.parts[j].offset, ft.parts[j].code = -1, code
				}
				continue
			}
			if t != nil {
				name = t.name
			}
		}
		info, err := c.s.fetchOffsets(gr, name)
		if err != nil {
			c.s.log.Warn("offset fetch", "group", groupID, "topic", name, "err", err)
		}
		for j := range ft.parts {
			p := &ft.parts[j]
			p.offset = -1
			switch {
			case err != nil:
				p.code = offsetsErrorCode(err)
			case info != nil && p.partition >= 0 && int(p.partition) < len(info.Partitions):
				p.offset = int64(info.Partitions[p.partition].AckFloor)
			}
		}
	}
	return topics, 0
}

func (c *conn) offsetFetch(req *kmsg.OffsetFetchRequest) *kmsg.OffsetFetchResponse {
	resp := kmsg.NewPtrOffsetFetchResponse()
	resp.Version = req.Version
	asked := func(name string, id [16]byte, parts []int32) fetchedTopic {
		ft := fetchedTopic{name: name, id: id}
		for _, p := range parts {
			ft.parts = append(ft.parts, fetchedPartition{partition: p})
		}
		return ft
	}
	if req.Version < 8 {
		var topics []fetchedTopic
		if req.Topics != nil {
			topics = []fetchedTopic{}
			for _, t := range req.Topics {
				topics = append(topics, asked(t.Topic, [16]byte{}, t.Partitions))
			}
		}
		got, code := c.fetchGroupOffsets(req.Group, topics, false)
		if code != 0 && req.Version < 2 {
			// No top-level error before v2: every partition carries it.
			got = topics
			for i := range got {
				for j := range got[i].parts {
					got[i].parts[j].offset, got[i].parts[j].code = -1, code
				}
			}
		}
		resp.ErrorCode = code
		for _, ft := range got {
			out := kmsg.NewOffsetFetchResponseTopic()
			out.Topic = ft.name
			for _, p := range ft.parts {
				rp := kmsg.NewOffsetFetchResponseTopicPartition()
				meta := ""
				rp.Partition, rp.Offset, rp.ErrorCode, rp.LeaderEpoch, rp.Metadata = p.partition, p.offset, p.code, -1, &meta
				out.Partitions = append(out.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, out)
		}
		return resp
	}
	for _, rg := range req.Groups {
		var topics []fetchedTopic
		if rg.Topics != nil {
			topics = []fetchedTopic{}
			for _, t := range rg.Topics {
				topics = append(topics, asked(t.Topic, t.TopicID, t.Partitions))
			}
		}
		got, code := c.fetchGroupOffsets(rg.Group, topics, req.Version >= 10)
		out := kmsg.NewOffsetFetchResponseGroup()
		out.Group, out.ErrorCode = rg.Group, code
		for _, ft := range got {
			ot := kmsg.NewOffsetFetchResponseGroupTopic()
			ot.Topic, ot.TopicID = ft.name, ft.id
			for _, p := range ft.parts {
				rp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
				meta := ""
				rp.Partition, rp.Offset, rp.ErrorCode, rp.LeaderEpoch, rp.Metadata = p.partition, p.offset, p.code, -1, &meta
				ot.Partitions = append(ot.Partitions, rp)
			}
			out.Topics = append(out.Topics, ot)
		}
		resp.Groups = append(resp.Groups, out)
	}
	return resp
}

// ---------------------------------------------------------------------------------
// DescribeGroups, ListGroups, DeleteGroups

func (c *conn) describeGroups(req *kmsg.DescribeGroupsRequest) *kmsg.DescribeGroupsResponse {
	resp := kmsg.NewPtrDescribeGroupsResponse()
	resp.Version = req.Version
	for _, id := range req.Groups {
		out := kmsg.NewDescribeGroupsResponseGroup()
		out.Group = id
		gr := c.group(id)
		if code := c.s.coordinatorCode(gr); code != 0 {
			out.ErrorCode = code
			resp.Groups = append(resp.Groups, out)
			continue
		}
		var desc group.Description
		known := false
		if d := c.s.groups.get(gr, false); d != nil {
			d.do(func(time.Time, *group.Group) { desc = d.g.Describe() })
			known = desc.State != group.Dead
		}
		if !known || desc.State == group.Empty {
			// Membership is in memory; offsets make an empty group.
			offsets, err := c.s.groupOffsets(gr)
			switch {
			case err != nil:
				out.ErrorCode = offsetsErrorCode(err)
			case len(offsets) > 0 || known:
				desc.State = group.Empty
				if desc.ProtocolType == "" {
					desc.ProtocolType = "consumer"
				}
			default:
				desc = group.Description{State: group.Dead}
			}
		}
		out.State, out.ProtocolType, out.Protocol = desc.State.String(), desc.ProtocolType, desc.Protocol
		for _, m := range desc.Members {
			om := kmsg.NewDescribeGroupsResponseGroupMember()
			om.MemberID, om.ClientID, om.ClientHost = m.ID, m.ClientID, m.ClientHost
			om.ProtocolMetadata, om.MemberAssignment = m.Metadata, m.Assignment
			if m.InstanceID != "" {
				inst := m.InstanceID
				om.InstanceID = &inst
			}
			out.Members = append(out.Members, om)
		}
		resp.Groups = append(resp.Groups, out)
	}
	return resp
}

func (c *conn) listGroups(req *kmsg.ListGroupsRequest) *kmsg.ListGroupsResponse {
	resp := kmsg.NewPtrListGroupsResponse()
	resp.Version = req.Version
	if len(req.TypesFilter) > 0 && !containsFold(req.TypesFilter, "classic") {
		return resp
	}
	type listed struct{ state, protocolType string }
	all := map[string]listed{}
	var order []string
	for _, d := range c.s.groups.list(c.acct) {
		if _, local, _ := c.s.coords.Coordinator(d.id.coordKey()); !local {
			continue
		}
		var st group.State
		var pt string
		d.do(func(_ time.Time, g *group.Group) { st, pt = g.State(), g.ProtocolType() })
		if st == group.Dead {
			continue
		}
		all[d.id.id] = listed{st.String(), pt}
		order = append(order, d.id.id)
	}
	committed, err := c.s.committedGroups(c.acct)
	if err != nil {
		c.s.log.Warn("list groups", "err", err)
		resp.ErrorCode = offsetsErrorCode(err)
	}
	for _, g := range committed {
		if _, ok := all[g]; ok {
			continue
		}
		if _, local, _ := c.s.coords.Coordinator(c.group(g).coordKey()); !local {
			continue
		}
		all[g] = listed{group.Empty.String(), "consumer"}
		order = append(order, g)
	}
	for _, id := range order {
		l := all[id]
		if len(req.StatesFilter) > 0 && !containsFold(req.StatesFilter, l.state) {
			continue
		}
		out := kmsg.NewListGroupsResponseGroup()
		out.Group, out.ProtocolType, out.GroupState, out.GroupType = id, l.protocolType, l.state, "classic"
		resp.Groups = append(resp.Groups, out)
	}
	return resp
}

func containsFold(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

func (c *conn) deleteGroups(req *kmsg.DeleteGroupsRequest) *kmsg.DeleteGroupsResponse {
	resp := kmsg.NewPtrDeleteGroupsResponse()
	resp.Version = req.Version
	for _, id := range req.Groups {
		out := kmsg.NewDeleteGroupsResponseGroup()
		out.Group = id
		out.ErrorCode = c.deleteGroup(id)
		resp.Groups = append(resp.Groups, out)
	}
	return resp
}

func (c *conn) deleteGroup(id string) int16 {
	gr := c.group(id)
	if code := c.s.coordinatorCode(gr); code != 0 {
		return code
	}
	if c.perms != nil {
		// Deleting a group deletes its offsets' consumer on every topic.
		byTopic, err := c.s.groupOffsets(gr)
		if err != nil {
			c.s.log.Warn("delete group", "group", id, "err", err)
			return offsetsErrorCode(err)
		}
		for topic := range byTopic {
			if !c.mayManage(streamapi.ConsumerDeleteSubject(topic, consumerName(id))) {
				return kerr.GroupAuthorizationFailed.Code
			}
		}
	}
	d := c.s.groups.get(gr, false)
	known := false
	if d != nil {
		var code int16
		d.do(func(_ time.Time, g *group.Group) { code = g.Delete() })
		if code == kerr.NonEmptyGroup.Code {
			return code
		}
		known = code == 0
		c.s.groups.forget(d)
	}
	had, err := c.s.deleteOffsets(gr)
	if err != nil {
		c.s.log.Warn("delete group", "group", id, "err", err)
		return offsetsErrorCode(err)
	}
	if !had && !known {
		return kerr.GroupIDNotFound.Code
	}
	c.s.log.Info("group deleted", "group", id, "account", acctAttr(c.acct))
	return 0
}

// offsetDelete removes a group's committed offsets in some partitions of some
// topics, when no member of the group subscribes to the topic
// (GROUP_SUBSCRIBED_TO_TOPIC otherwise, as Kafka). Every partition of a topic
// named: the group's consumer on the topic is deleted, and the group has no
// offsets there (-1). Some of them: the consumer's position in those goes back
// to the partition's start, which is how a partition the group never committed
// in reads (its start).
func (c *conn) offsetDelete(req *kmsg.OffsetDeleteRequest) *kmsg.OffsetDeleteResponse {
	resp := kmsg.NewPtrOffsetDeleteResponse()
	resp.Version = req.Version
	gr := c.group(req.Group)
	if code := c.s.coordinatorCode(gr); code != 0 {
		resp.ErrorCode = code
		return resp
	}
	var subs [][]byte
	if d := c.s.groups.get(gr, false); d != nil {
		d.do(func(_ time.Time, g *group.Group) {
			if g.ProtocolType() == "consumer" {
				subs = g.Subscriptions()
			}
		})
	}
	// The group's offsets on the topics named; on every topic only when it has
	// none on those and no members, to tell whether the group exists at all.
	byTopic := map[string]*streamapi.ConsumerInfo{}
	for _, rt := range req.Topics {
		if _, done := byTopic[rt.Topic]; done {
			continue
		}
		info, err := c.s.fetchOffsets(gr, rt.Topic)
		if err != nil {
			c.s.log.Warn("offset delete", "group", req.Group, "topic", rt.Topic, "err", err)
			resp.ErrorCode = offsetsErrorCode(err)
			return resp
		}
		byTopic[rt.Topic] = info
	}
	has := false
	for _, info := range byTopic {
		has = has || info != nil
	}
	if !has && len(subs) == 0 {
		all, err := c.s.groupOffsets(gr)
		if err != nil {
			c.s.log.Warn("offset delete", "group", req.Group, "err", err)
			resp.ErrorCode = offsetsErrorCode(err)
			return resp
		}
		if len(all) == 0 {
			resp.ErrorCode = kerr.GroupIDNotFound.Code
			return resp
		}
	}
	for _, rt := range req.Topics {
		out := kmsg.NewOffsetDeleteResponseTopic()
		out.Topic = rt.Topic
		code := c.deleteTopicOffsets(gr, rt, byTopic, subs)
		for _, p := range rt.Partitions {
			rp := kmsg.NewOffsetDeleteResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, code
			if code == 0 && (p.Partition < 0 || byTopic[rt.Topic] != nil && int(p.Partition) >= len(byTopic[rt.Topic].Partitions)) {
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			}
			out.Partitions = append(out.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, out)
	}
	return resp
}

// deleteTopicOffsets does offsetDelete's work on one topic and returns the code
// of all its partitions.
func (c *conn) deleteTopicOffsets(gr groupRef, rt kmsg.OffsetDeleteRequestTopic, byTopic map[string]*streamapi.ConsumerInfo, subs [][]byte) int16 {
	t, code, _ := c.findFor(rt.Topic, false, needRead)
	if code != 0 {
		return code
	}
	name := consumerName(gr.id)
	if !c.mayManage(streamapi.ConsumerDeleteSubject(t.name, name)) {
		return kerr.GroupAuthorizationFailed.Code
	}
	for _, b := range subs {
		var md kmsg.ConsumerMemberMetadata
		if md.ReadFrom(b) == nil && slices.Contains(md.Topics, t.name) {
			return kerr.GroupSubscribedToTopic.Code
		}
	}
	info := byTopic[t.name]
	if info == nil {
		return 0 // no offsets there: nothing to delete
	}
	all := map[int32]bool{}
	var positions []streamapi.SeekPosition
	for _, p := range rt.Partitions {
		if p.Partition >= 0 && int(p.Partition) < len(info.Partitions) && !all[p.Partition] {
			all[p.Partition] = true
			positions = append(positions, streamapi.SeekPosition{Partition: int(p.Partition), Next: 1})
		}
	}
	var err error
	switch {
	case len(positions) == 0:
		return 0
	case len(all) == len(info.Partitions):
		_, err = apiRequest[streamapi.Deleted](c.s.api, apiSubject(gr.acct, streamapi.ConsumerDeleteSubject(t.name, name)), nil)
		if apiCode(err) == streamapi.CodeConsumerMissing {
			err = nil
		}
	default:
		_, err = apiAnswer[streamapi.ConsumerInfo](c.s.seekOffsets(gr, t.name, positions))
	}
	if err != nil {
		c.s.log.Warn("offset delete", "group", gr.id, "topic", t.name, "err", err)
		return offsetsErrorCode(err)
	}
	c.s.log.Info("group offsets deleted", "group", gr.id, "account", acctAttr(gr.acct), "topic", t.name, "partitions", len(all))
	return 0
}
