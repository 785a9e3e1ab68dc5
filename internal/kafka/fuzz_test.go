package kafka

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tern-mq/tern/internal/auth"
	"github.com/tern-mq/tern/internal/auth/authtest"
	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/store"
	"github.com/tern-mq/tern/internal/stream"
)

// seedRequests are well-formed requests (frames without their size) of every API
// served, for the fuzz targets' corpus.
func seedRequests() [][]byte {
	f := kmsg.NewRequestFormatter(kmsg.FormatterClientID("seed"))
	frame := func(r kmsg.Request) []byte { return f.AppendRequest(nil, r, 7)[4:] }
	var out [][]byte
	av := kmsg.NewPtrApiVersionsRequest()
	av.Version = 3
	out = append(out, frame(av))
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 12
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr("fz")
	md.Topics, md.AllowAutoTopicCreation = append(md.Topics, mt), true
	out = append(out, frame(md))
	produce := func(codec, acks int16) []byte {
		pr := kmsg.NewPtrProduceRequest()
		pr.Version, pr.Acks, pr.TimeoutMillis = 9, acks, 1000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "fz"
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Records = seedBatch(codec)
		rt.Partitions = append(rt.Partitions, rp)
		pr.Topics = append(pr.Topics, rt)
		return frame(pr)
	}
	for _, codec := range []int16{0, 1, 2, 3, 4} {
		out = append(out, produce(codec, -1))
	}
	for _, acks := range []int16{0, 1, 2} { // 2: refused, INVALID_REQUIRED_ACKS
		out = append(out, produce(0, acks))
	}
	fr := kmsg.NewPtrFetchRequest()
	fr.Version, fr.MaxWaitMillis, fr.MinBytes, fr.MaxBytes, fr.SessionEpoch = 11, 0, 1, 1<<20, -1
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "fz"
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes = 1 << 20
	ft.Partitions = append(ft.Partitions, fp)
	fr.Topics = append(fr.Topics, ft)
	out = append(out, frame(fr))
	lo := kmsg.NewPtrListOffsetsRequest()
	lo.Version = 7
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = "fz"
	lp := kmsg.NewListOffsetsRequestTopicPartition()
	lp.Timestamp = -2
	lt.Partitions = append(lt.Partitions, lp)
	lo.Topics = append(lo.Topics, lt)
	out = append(out, frame(lo))
	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.Version = 5
	ctt := kmsg.NewCreateTopicsRequestTopic()
	ctt.Topic, ctt.NumPartitions, ctt.ReplicationFactor = "fz2", 2, 1
	ct.Topics = append(ct.Topics, ctt)
	out = append(out, frame(ct))
	cp := kmsg.NewPtrCreatePartitionsRequest()
	cp.Version = 3
	cpt := kmsg.NewCreatePartitionsRequestTopic()
	cpt.Topic, cpt.Count = "fz2", 3
	cp.Topics = append(cp.Topics, cpt)
	out = append(out, frame(cp))
	od := kmsg.NewPtrOffsetDeleteRequest()
	od.Group = "fzg"
	odt := kmsg.NewOffsetDeleteRequestTopic()
	odt.Topic = "fz"
	odt.Partitions = append(odt.Partitions, kmsg.NewOffsetDeleteRequestTopicPartition())
	od.Topics = append(od.Topics, odt)
	out = append(out, frame(od))
	ld := kmsg.NewPtrDescribeLogDirsRequest()
	ld.Version = 4
	out = append(out, frame(ld))
	ip := kmsg.NewPtrInitProducerIDRequest()
	ip.Version = 4
	out = append(out, frame(ip))
	dc := kmsg.NewPtrDescribeConfigsRequest()
	dc.Version = 4
	dr := kmsg.NewDescribeConfigsRequestResource()
	dr.ResourceType, dr.ResourceName = kmsg.ConfigResourceTypeTopic, "fz"
	dc.Resources = append(dc.Resources, dr)
	out = append(out, frame(dc))
	out = append(out, alterSeeds(frame)...)
	out = append(out, fetchSessionSeeds(frame)...)
	out = append(out, seedGroupRequests(frame)...)
	dt := kmsg.NewPtrDeleteTopicsRequest()
	dt.Version, dt.TopicNames = 4, []string{"fz2"}
	out = append(out, frame(dt))
	out = append(out, saslSeeds(frame)...)
	return out
}

// saslSeeds are SASL exchanges: a v1 handshake and SaslAuthenticate with PLAIN,
// a v0 handshake and its bare PLAIN token, an unsupported mechanism, a v1
// handshake and SCRAM's first message, and exchanges that fail.
func saslSeeds(frame func(kmsg.Request) []byte) [][]byte {
	var out [][]byte
	hs := func(version int16, mech string) []byte {
		r := kmsg.NewPtrSASLHandshakeRequest()
		r.Version, r.Mechanism = version, mech
		return frame(r)
	}
	sa := func(token string) []byte {
		r := kmsg.NewPtrSASLAuthenticateRequest()
		r.Version, r.SASLAuthBytes = 2, []byte(token)
		return frame(r)
	}
	out = append(out, hs(1, "PLAIN"), sa("\x00root\x00root-pw"))
	out = append(out, hs(0, "PLAIN"), []byte("\x00alice\x00alice-pw"))
	out = append(out, hs(1, "GSSAPI"))
	// Refusals: a PLAIN token without its NULs, one whose authzid is another
	// user, a wrong password; then SCRAM's first message and a final message
	// whose nonce and proof are not the server's.
	out = append(out, hs(1, "PLAIN"), sa("alice-pw"))
	out = append(out, hs(1, "PLAIN"), sa("root\x00alice\x00alice-pw"))
	out = append(out, hs(0, "PLAIN"), []byte("\x00alice\x00wrong"))
	out = append(out, hs(1, "SCRAM-SHA-256"), sa("n,,n=alice,r=fyko+d2lbbFgONRv9qkxdawL"),
		sa("c=biws,r=fyko+d2lbbFgONRv9qkxdawLHo+Vgk7qvUOKUwuWLIWg4l/9SraGMHEE,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="))
	return out
}

// fetchSessionSeeds open an incremental fetch session and use one, forgetting a
// partition.
func fetchSessionSeeds(frame func(kmsg.Request) []byte) [][]byte {
	open := kmsg.NewPtrFetchRequest()
	open.Version, open.MaxWaitMillis, open.MaxBytes, open.SessionEpoch = 12, 0, 1<<20, 0
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "fz"
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes = 1 << 20
	ft.Partitions = append(ft.Partitions, fp)
	open.Topics = append(open.Topics, ft)
	inc := kmsg.NewPtrFetchRequest()
	inc.Version, inc.MaxWaitMillis, inc.MaxBytes, inc.SessionID, inc.SessionEpoch = 12, 0, 1<<20, 1, 1
	fg := kmsg.NewFetchRequestForgottenTopic()
	fg.Topic, fg.Partitions = "fz", []int32{0}
	inc.ForgottenTopics = append(inc.ForgottenTopics, fg)
	return [][]byte{frame(open), frame(inc)}
}

// alterSeeds are requests that change topics: their configs and their records.
func alterSeeds(frame func(kmsg.Request) []byte) [][]byte {
	ac := kmsg.NewPtrAlterConfigsRequest()
	ac.Version = 2
	ar := kmsg.NewAlterConfigsRequestResource()
	ar.ResourceType, ar.ResourceName = kmsg.ConfigResourceTypeTopic, "fz"
	ar.Configs = []kmsg.AlterConfigsRequestResourceConfig{{Name: "retention.ms", Value: kmsg.StringPtr("60000")}}
	ac.Resources = append(ac.Resources, ar)
	ic := kmsg.NewPtrIncrementalAlterConfigsRequest()
	ic.Version = 1
	ir := kmsg.NewIncrementalAlterConfigsRequestResource()
	ir.ResourceType, ir.ResourceName = kmsg.ConfigResourceTypeTopic, "fz"
	ir.Configs = []kmsg.IncrementalAlterConfigsRequestResourceConfig{{Name: "retention.bytes", Op: kmsg.IncrementalAlterConfigOpSet,
		Value: kmsg.StringPtr("1048576")}, {Name: "retention.ms", Op: kmsg.IncrementalAlterConfigOpDelete}}
	ic.Resources = append(ic.Resources, ir)
	dr := kmsg.NewPtrDeleteRecordsRequest()
	dr.Version = 2
	drt := kmsg.NewDeleteRecordsRequestTopic()
	drt.Topic = "fz"
	drt.Partitions = []kmsg.DeleteRecordsRequestTopicPartition{{Partition: 0, Offset: 1}}
	dr.Topics = append(dr.Topics, drt)
	return [][]byte{frame(ac), frame(ic), frame(dr)}
}

// seedGroupRequests are the consumer group APIs' requests, in the forms clients
// send: FindCoordinator with one key and with several, a join without and with a
// member id, sync, heartbeat, commit, fetch of one group and of several, leave of
// several members, describe, list, delete.
func seedGroupRequests(frame func(kmsg.Request) []byte) [][]byte {
	var out [][]byte
	for _, v := range []int16{3, 4} {
		fc := kmsg.NewPtrFindCoordinatorRequest()
		fc.Version, fc.CoordinatorKey, fc.CoordinatorKeys = v, "fg", []string{"fg", "fh"}
		out = append(out, frame(fc))
	}
	for _, member := range []string{"", "seed-1"} {
		jg := kmsg.NewPtrJoinGroupRequest()
		jg.Version, jg.Group, jg.MemberID, jg.ProtocolType = 9, "fg", member, "consumer"
		jg.SessionTimeoutMillis, jg.RebalanceTimeoutMillis = 10_000, 10_000
		inst := "i1"
		jg.InstanceID = &inst
		p := kmsg.NewJoinGroupRequestProtocol()
		p.Name, p.Metadata = "range", []byte{0, 3, 0, 0, 0, 1, 0, 2, 'f', 'z', 0, 0, 0, 0}
		jg.Protocols = append(jg.Protocols, p)
		out = append(out, frame(jg))
	}
	sg := kmsg.NewPtrSyncGroupRequest()
	sg.Version, sg.Group, sg.MemberID, sg.Generation = 5, "fg", "seed-1", 1
	a := kmsg.NewSyncGroupRequestGroupAssignment()
	a.MemberID, a.MemberAssignment = "seed-1", []byte{0, 3, 0, 0, 0, 0}
	sg.GroupAssignment = append(sg.GroupAssignment, a)
	out = append(out, frame(sg))
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Version, hb.Group, hb.MemberID, hb.Generation = 4, "fg", "seed-1", 1
	out = append(out, frame(hb))
	oc := kmsg.NewPtrOffsetCommitRequest()
	oc.Version, oc.Group, oc.Generation = 9, "fg", -1
	ot := kmsg.NewOffsetCommitRequestTopic()
	ot.Topic = "fz"
	op := kmsg.NewOffsetCommitRequestTopicPartition()
	op.Offset = 1
	ot.Partitions = append(ot.Partitions, op)
	oc.Topics = append(oc.Topics, ot)
	out = append(out, frame(oc))
	of := kmsg.NewPtrOffsetFetchRequest()
	of.Version, of.Group = 7, "fg"
	ft := kmsg.NewOffsetFetchRequestTopic()
	ft.Topic, ft.Partitions = "fz", []int32{0}
	of.Topics = append(of.Topics, ft)
	out = append(out, frame(of))
	of8 := kmsg.NewPtrOffsetFetchRequest()
	of8.Version = 9
	for _, g := range []string{"fg", "fh"} {
		rg := kmsg.NewOffsetFetchRequestGroup()
		rg.Group = g
		of8.Groups = append(of8.Groups, rg)
	}
	out = append(out, frame(of8))
	lg := kmsg.NewPtrLeaveGroupRequest()
	lg.Version, lg.Group = 5, "fg"
	for _, id := range []string{"seed-1", "seed-2"} {
		m := kmsg.NewLeaveGroupRequestMember()
		m.MemberID = id
		lg.Members = append(lg.Members, m)
	}
	out = append(out, frame(lg))
	dg := kmsg.NewPtrDescribeGroupsRequest()
	dg.Version, dg.Groups = 5, []string{"fg", "fh"}
	out = append(out, frame(dg))
	lgr := kmsg.NewPtrListGroupsRequest()
	lgr.Version, lgr.StatesFilter = 5, []string{"Stable"}
	out = append(out, frame(lgr))
	del := kmsg.NewPtrDeleteGroupsRequest()
	del.Version, del.Groups = 2, []string{"fg"}
	out = append(out, frame(del))
	return out
}

// seedBatch is a record batch of two records compressed with codec.
func seedBatch(codec int16) []byte {
	var recs []byte
	for i, v := range []string{"one", "two"} {
		r := kmsg.Record{OffsetDelta: int32(i), Key: []byte("k"), Value: []byte(v),
			Headers: []kmsg.Header{{Key: "h", Value: []byte("v")}}}
		r.Length = recordLength(&r)
		recs = r.AppendTo(recs)
	}
	recs = compress(codec, recs)
	b := kmsg.RecordBatch{Magic: 2, Attributes: codec, LastOffsetDelta: 1, FirstTimestamp: 1, MaxTimestamp: 1,
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: 2, Records: recs}
	b.Length = int32(batchLenAfter + len(recs))
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[batchCRCAt:], crc32.Checksum(out[batchAttrsAt:], crc32c))
	return out
}

// TestWriteFuzzCorpus writes the seed requests into testdata/fuzz when
// TERN_WRITE_CORPUS is set.
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("TERN_WRITE_CORPUS") == "" {
		t.Skip("set TERN_WRITE_CORPUS=1 to write the fuzz seed corpus")
	}
	write := func(target string, seeds [][]byte) {
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, s := range seeds {
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s)
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	write("FuzzRequest", seedRequests())
	var batches [][]byte
	for _, c := range []int16{0, 1, 2, 3, 4} {
		batches = append(batches, seedBatch(c))
	}
	write("FuzzRecordBatch", batches)
}

// FuzzRequest feeds a request frame (what follows the size) to a connection of a
// server with real streams: it must answer, or close the connection, and never
// panic.
func FuzzRequest(f *testing.F) {
	for _, s := range seedRequests() {
		f.Add(s)
	}
	dir := f.TempDir()
	b := broker.New()
	m, err := stream.New(stream.Config{Dir: dir, Sync: store.SyncNever}, b, nil)
	if err != nil {
		f.Fatal(err)
	}
	if err := m.Start(); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(m.Close)
	a, err := auth.New(auth.Options{UsersFile: authtest.File(f), Anonymous: auth.AnonymousAll,
		FailureDelay: time.Nanosecond, MaxFailureDelay: time.Nanosecond})
	if err != nil {
		f.Fatal(err)
	}
	alice, err := a.Login(auth.Request{Username: authtest.Alice, Password: []byte(authtest.AlicePassword)})
	if err != nil {
		f.Fatal(err)
	}
	s, err := NewServer(Config{AutoCreate: true, MaxPayload: 1 << 20, Auth: a}, b, m, nil)
	if err != nil {
		f.Fatal(err)
	}
	s.maxWait = 0
	s.parkMax = time.Millisecond // a join waiting for others would hold the fuzzer
	f.Cleanup(func() { _ = s.Shutdown(time.Second) })
	pipe := func() net.Conn {
		client, srv := net.Pipe()
		go func() { _, _ = io.Copy(io.Discard, client) }()
		f.Cleanup(func() { client.Close(); srv.Close() })
		return srv
	}
	// c is anonymous (unrestricted, as the policy lets everyone in), ac is
	// alice's (restricted): every request goes to both. sc takes the SASL
	// exchanges, and starts again after each failure or login.
	c, ac, sc := newConn(s, 1, pipe(), false), newConn(s, 2, pipe(), false), newConn(s, 3, pipe(), false)
	ac.login(alice)
	f.Fuzz(func(t *testing.T, frame []byte) {
		if len(frame) > maxOtherRequest {
			return
		}
		if sc.sasl != nil || (len(frame) >= 2 && (frame[1] == saslHandshakeKey || frame[1] == saslAuthenticateKey) && frame[0] == 0) {
			if err := sc.handle(frame); err != nil || sc.authed {
				sc.authed, sc.sasl, sc.user, sc.perms, sc.rights = false, nil, nil, nil, nil
			}
			sc.q.Flush()
			return
		}
		for _, c := range []*conn{c, ac} {
			_ = c.handle(frame)
			c.q.Flush()
		}
	})
}

// FuzzRecordBatch decodes a partition's record data as Produce does: framing, CRC,
// decompression (bounded), records. It must refuse what is wrong, never panic.
func FuzzRecordBatch(f *testing.F) {
	for _, c := range []int16{0, 1, 2, 3, 4} {
		f.Add(seedBatch(c))
	}
	var rec kmsg.Record
	f.Fuzz(func(t *testing.T, data []byte) {
		for len(data) > 0 {
			batch, rest, err := nextBatch(data)
			if err != nil {
				return
			}
			data = rest
			body, err := decompress(&batch, nil, 1<<20)
			if err != nil {
				continue
			}
			if len(body) > 1<<20 {
				t.Fatalf("decompressed %d bytes past the limit", len(body))
			}
			_ = eachRecord(body, batch.NumRecords, &rec, func(int, *kmsg.Record) error { return nil })
		}
	})
}
