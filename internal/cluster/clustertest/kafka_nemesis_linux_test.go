package clustertest_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tern-mq/tern/internal/cluster/clustertest"
)

// TestKafkaNemesis is the nemesis of the Kafka API on a cluster. Each round starts
// 3 nodes (odd seeds) or 5 (even seeds) as TestNemesis does, each in a network
// namespace of its own with a Kafka listener, makes a topic of nemParts partitions
// replicated on every node through Kafka's admin API, and runs at once:
//
//   - franz-go's idempotent producer (acks=all, retrying without end), homed on
//     one node: its connections are made in that node's namespace, so a cut that
//     isolates the node isolates the producer too;
//   - a consumer group of two members homed on two other nodes, committing as it
//     goes, whose coordinator may be any node, and a third member that joins and
//     leaves every few seconds while the producer runs, so that the group
//     rebalances under the faults;
//
// while the nemesis injects TestNemesis's faults one after another (kill -9,
// SIGSTOP, cuts, splits). Then a fresh reader reads every partition from its start
// to its end and checks that every acknowledged record is there exactly once, at
// the partition and offset its acknowledgement gave, that a record whose produce
// failed is there at most once, that nothing else is, and that each partition
// holds its records in the order they were produced; that every position anyone
// read always held the same record (no read of a record later lost); that the
// group read every record and its committed offsets are the partitions' ends; and
// that no two nodes led one Raft group in one term.
//
// The suite runs two rounds of four faults; TERN_CLUSTER_SEEDS and
// TERN_NEMESIS_FAULTS set more, as for TestNemesis (make nemesis). Needs root
// (TERN_NO_NETNS=1 skips it).
func TestKafkaNemesis(t *testing.T) {
	skipWithoutNetns(t)
	for seed := uint64(1); seed <= twinSeeds(); seed++ {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) { kafkaNemesisRound(t, seed) })
	}
}

const (
	kNemTopic = "knem"
	// kNemMaxRecords bounds what the producer sends in a round; it stops when the
	// faults are over.
	kNemMaxRecords = 30000
)

// kPos is where a record is: its partition and offset.
type kPos struct {
	part   int32
	offset int64
}

// kafkaWorkload is what the producer, the group and the final reader saw.
type kafkaWorkload struct {
	t *testing.T

	mu        sync.Mutex
	produced  int              // records handed to the producer; -1 until it is done
	acked     map[string]kPos  // value → where its produce was acknowledged
	failed    map[string]error // value → why its produce failed (stored or not: unsure)
	at        map[kPos]string  // the record read at each position, by anyone
	clashes   []string         // positions read with two different records
	group     map[string]int   // how many times the group read each value
	groupEnd  map[int32]int64  // the next offset the group has to read in each partition
	committed map[int32]int64  // the group's committed offsets, as last fetched
	ends      map[int32]int64  // the partitions' ends once the producer is done
}

func kafkaNemesisRound(t *testing.T, seed uint64) {
	r := startNemesis(t, seed, func(o *clustertest.Options) { o.Kafka = true })
	c, nodes := r.c, len(r.c.Nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	waitCatalogue(c)
	admin := r.kafkaClient(0, "admin")
	adm := kadm.NewClient(admin)
	c.WaitFor("the topic made through the admin API", 30*time.Second, func() bool {
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		defer acancel()
		res, err := adm.CreateTopic(actx, nemParts, int16(nodes), nil, kNemTopic)
		if err == nil && res.Err != nil && !errors.Is(res.Err, kerr.TopicAlreadyExists) {
			err = res.Err
		}
		if err != nil {
			t.Logf("create topic: %v", err)
		}
		return err == nil
	})
	c.WaitFor("a leader for every partition", 30*time.Second, func() bool {
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		defer acancel()
		md, err := adm.Metadata(actx, kNemTopic)
		if err != nil {
			return false
		}
		td, ok := md.Topics[kNemTopic]
		if !ok || td.Err != nil || len(td.Partitions) != nemParts {
			return false
		}
		for _, p := range td.Partitions {
			if p.Err != nil || p.Leader < 0 {
				return false
			}
		}
		return true
	})
	r.whole.Store(int64(r.since()))

	w := &kafkaWorkload{t: t, produced: -1, acked: map[string]kPos{}, failed: map[string]error{},
		at: map[kPos]string{}, group: map[string]int{}, groupEnd: map[int32]int64{}}
	stopProducing, stopGroup := make(chan struct{}), make(chan struct{})
	var workers sync.WaitGroup
	defer func() {
		cancel()
		workers.Wait()
	}()
	workers.Add(1)
	go func() {
		defer workers.Done()
		w.produce(ctx, r.kafkaClient(1, "producer"), rand.New(rand.NewPCG(seed, 17)), stopProducing)
	}()
	member := []kgo.Opt{kgo.ConsumerGroup("knem-group"), kgo.ConsumeTopics(kNemTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.AutoCommitInterval(500 * time.Millisecond),
		kgo.SessionTimeout(10 * time.Second), kgo.HeartbeatInterval(time.Second)}
	for i, home := range []int{2, 0} {
		workers.Add(1)
		go func() {
			defer workers.Done()
			w.consumeGroup(ctx, stopGroup, r.kafkaClient(home, fmt.Sprintf("member%d", i+1), member...))
		}()
	}
	workers.Add(1)
	go func() {
		defer workers.Done()
		w.churn(ctx, r, rand.New(rand.NewPCG(seed, 29)), stopProducing, member)
	}()

	r.injectFaults(seed, w.progress)
	time.Sleep(500 * time.Millisecond) // a little more traffic on the healed cluster
	close(stopProducing)

	finished := make(chan struct{})
	go func() { workers.Wait(); close(finished) }()
	deadline := time.After(90 * time.Second)
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for done, groupStopped := false, false; !done; {
		select {
		case <-finished:
			done = true
		case <-tick.C:
			if w.producerDone() && !w.endsKnown() {
				w.setEnds(ctx, adm)
			}
			if !groupStopped && w.groupDone() && w.committedEnds(ctx, adm) {
				groupStopped = true
				close(stopGroup)
			}
		case <-deadline:
			t.Fatalf("90 s after the last fault: %s; %s; the group stopped: %v", w.progress(), w.positions(), groupStopped)
		}
	}
	r.logf("the workload is done: %s", w.progress())
	w.check(ctx, r, adm)
	r.checkLeaders()
}

// kafkaClient is a franz-go client of every node's Kafka listener whose
// connections are made in node home's namespace, closed when the test ends.
// Its timeouts are short, so that a request to a node paused or cut off is given
// up and sent again within a fault's length.
func (r *nemesis) kafkaClient(home int, role string, opts ...kgo.Opt) *kgo.Client {
	cl := r.newKafkaClient(home, role, opts...)
	r.t.Cleanup(cl.Close)
	return cl
}

// newKafkaClient is kafkaClient's client, for its caller to close.
func (r *nemesis) newKafkaClient(home int, role string, opts ...kgo.Opt) *kgo.Client {
	r.t.Helper()
	var seeds []string
	for _, n := range r.c.Nodes {
		seeds = append(seeds, net.JoinHostPort(n.Host, strconv.Itoa(n.KafkaPort)))
	}
	n := r.c.Nodes[home]
	dial := func(ctx context.Context, network, host string) (net.Conn, error) {
		var conn net.Conn
		err := n.In(func() error {
			var err error
			conn, err = (&net.Dialer{Timeout: time.Second}).DialContext(ctx, network, host)
			return err
		})
		return conn, err
	}
	base := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.Dialer(dial), kgo.ClientID("nemesis-" + role + "@" + n.Name),
		kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }),
		kgo.RequestTimeoutOverhead(2 * time.Second), kgo.ProduceRequestTimeout(3 * time.Second),
		kgo.MetadataMinAge(250 * time.Millisecond), kgo.FetchMaxWait(500 * time.Millisecond)}
	cl, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		r.t.Fatal(err)
	}
	return cl
}

// produce sends v0, v1, … until stopped, keyed over 8 keys, each record retried
// by the client until it is acknowledged or its produce fails for good.
func (w *kafkaWorkload) produce(ctx context.Context, cl *kgo.Client, pace *rand.Rand, stop <-chan struct{}) {
	var pending sync.WaitGroup
	n := 0
	defer func() {
		// Every record is acknowledged or failed before the producer says it is
		// done; those still buffered a minute on are failed.
		fctx, fcancel := context.WithTimeout(ctx, time.Minute)
		if err := cl.Flush(fctx); err != nil {
			w.t.Logf("flush: %v", err)
			actx, acancel := context.WithTimeout(context.Background(), 10*time.Second)
			cl.AbortBufferedRecords(actx)
			acancel()
		}
		fcancel()
		pending.Wait()
		w.mu.Lock()
		w.produced = n
		w.mu.Unlock()
	}()
	for ; n < kNemMaxRecords; n++ {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		default:
		}
		v := fmt.Sprintf("v%d", n)
		pending.Add(1)
		cl.Produce(ctx, &kgo.Record{Topic: kNemTopic, Key: fmt.Appendf(nil, "k%d", n%8), Value: []byte(v)},
			func(rec *kgo.Record, err error) {
				defer pending.Done()
				w.mu.Lock()
				defer w.mu.Unlock()
				if err != nil {
					w.failed[v] = err
					return
				}
				w.acked[v] = kPos{rec.Partition, rec.Offset}
			})
		time.Sleep(time.Duration(pace.IntN(3)) * time.Millisecond)
	}
}

// consumeGroup reads as a member of the group until stopped; once the group has
// read every partition to its end, it commits what it read after each poll.
func (w *kafkaWorkload) consumeGroup(ctx context.Context, stop <-chan struct{}, cl *kgo.Client) {
	for ctx.Err() == nil {
		select {
		case <-stop:
			return
		default:
		}
		fctx, fcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := cl.PollFetches(fctx)
		fcancel()
		w.groupRead(fs)
		if w.groupDone() {
			cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
			if err := cl.CommitUncommittedOffsets(cctx); err != nil {
				w.t.Logf("commit: %v", err)
			}
			ccancel()
		}
	}
}

// groupRead notes the records a member of the group polled.
func (w *kafkaWorkload) groupRead(fs kgo.Fetches) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fs.EachRecord(func(rec *kgo.Record) {
		w.read(kPos{rec.Partition, rec.Offset}, string(rec.Value), "the group")
		w.group[string(rec.Value)]++
		w.groupEnd[rec.Partition] = max(w.groupEnd[rec.Partition], rec.Offset+1)
	})
}

// churn is a third member of the group, homed on a node chosen by the seed, that
// joins, reads for one to three seconds, leaves (closing its client) and comes
// back a second or so later, until the producer stops: each coming and going is
// a rebalance under the faults, and the partitions it read move to the others
// from the offsets committed.
func (w *kafkaWorkload) churn(ctx context.Context, r *nemesis, rng *rand.Rand, stop <-chan struct{}, opts []kgo.Opt) {
	home := rng.IntN(len(r.c.Nodes))
	for round := 1; ; round++ {
		cl := r.newKafkaClient(home, fmt.Sprintf("member3-%d", round), opts...)
		stay := time.Now().Add(time.Second + time.Duration(rng.IntN(2000))*time.Millisecond)
		for time.Now().Before(stay) && ctx.Err() == nil {
			fctx, fcancel := context.WithTimeout(ctx, 300*time.Millisecond)
			fs := cl.PollFetches(fctx)
			fcancel()
			w.groupRead(fs)
		}
		cl.Close()
		select {
		case <-stop:
			r.logf("the third member joined and left the group %d times", round)
			return
		case <-ctx.Done():
			return
		case <-time.After(500*time.Millisecond + time.Duration(rng.IntN(1000))*time.Millisecond):
		}
	}
}

// committedEnds reports whether the group's committed offsets are the
// partitions' ends.
func (w *kafkaWorkload) committedEnds(ctx context.Context, adm *kadm.Client) bool {
	fctx, fcancel := context.WithTimeout(ctx, 2*time.Second)
	defer fcancel()
	committed, err := adm.FetchOffsets(fctx, "knem-group")
	if err != nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.committed = map[int32]int64{}
	committed.Each(func(o kadm.OffsetResponse) {
		if o.Topic == kNemTopic && o.Err == nil {
			w.committed[o.Partition] = o.At
		}
	})
	for p, end := range w.ends {
		if o, ok := w.committed[p]; !ok || o != end {
			return false
		}
	}
	return true
}

// read notes that value was read at pos, and a clash with what was read there
// before. w.mu is held.
func (w *kafkaWorkload) read(pos kPos, value, by string) {
	if was, ok := w.at[pos]; ok && was != value {
		w.clashes = append(w.clashes, fmt.Sprintf("%s read %s at %d/%d, where %s was read before", by, value,
			pos.part, pos.offset, was))
		return
	}
	w.at[pos] = value
}

func (w *kafkaWorkload) producerDone() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.produced >= 0
}

// setEnds takes the partitions' ends once the producer is done: what the group
// has to read.
func (w *kafkaWorkload) setEnds(ctx context.Context, adm *kadm.Client) {
	lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
	defer lcancel()
	ends, err := adm.ListEndOffsets(lctx, kNemTopic)
	if err != nil || ends.Error() != nil {
		return // tried again a second later
	}
	got := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { got[o.Partition] = o.Offset })
	if len(got) != nemParts {
		return
	}
	w.mu.Lock()
	w.ends = got
	w.mu.Unlock()
}

func (w *kafkaWorkload) endsKnown() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ends != nil
}

func (w *kafkaWorkload) groupDone() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ends == nil {
		return false
	}
	for p, end := range w.ends {
		if w.groupEnd[p] < end {
			return false
		}
	}
	return true
}

func (w *kafkaWorkload) progress() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprintf("%d records acknowledged, %d failed, %d read by the group", len(w.acked), len(w.failed),
		len(w.group))
}

// positions is what progress leaves out: the partitions' ends and how far the
// group read.
func (w *kafkaWorkload) positions() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprintf("the partitions' ends %v, the group read to %v and last committed %v", w.ends, w.groupEnd, w.committed)
}

// check reads every partition from its start to its end and checks the round.
func (w *kafkaWorkload) check(ctx context.Context, r *nemesis, adm *kadm.Client) {
	t := w.t
	w.mu.Lock()
	ends := w.ends
	w.mu.Unlock()
	if ends == nil {
		t.Fatal("the partitions' ends were never listed")
	}
	offsets := map[string]map[int32]kgo.Offset{kNemTopic: {}}
	for p := range ends {
		offsets[kNemTopic][p] = kgo.NewOffset().AtStart()
	}
	reader := r.kafkaClient(0, "reader", kgo.ConsumePartitions(offsets))
	stored := map[int32][]string{} // each partition's values, in offset order
	where := map[string][]kPos{}
	next := map[int32]int64{}
	for deadline := time.Now().Add(time.Minute); ; {
		all := true
		for p, end := range ends {
			all = all && next[p] >= end
		}
		if all {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("reading the partitions back: at %v of %v after a minute", next, ends)
		}
		fctx, fcancel := context.WithTimeout(ctx, 2*time.Second)
		fs := reader.PollFetches(fctx)
		fcancel()
		w.mu.Lock()
		fs.EachRecord(func(rec *kgo.Record) {
			if rec.Offset >= ends[rec.Partition] {
				return
			}
			pos := kPos{rec.Partition, rec.Offset}
			w.read(pos, string(rec.Value), "the reader")
			stored[rec.Partition] = append(stored[rec.Partition], string(rec.Value))
			where[string(rec.Value)] = append(where[string(rec.Value)], pos)
			next[rec.Partition] = rec.Offset + 1
		})
		w.mu.Unlock()
	}

	w.mu.Lock()
	defer w.mu.Unlock()
	if err := checkKafkaStored(w.produced, w.acked, w.failed, stored, where); err != nil {
		t.Error(err)
	}
	for _, c := range w.clashes {
		t.Error(c)
	}
	for v := range w.acked {
		if w.group[v] == 0 {
			t.Errorf("the group never read %s", v)
		}
	}
	r.logf("%d records produced: %d acknowledged, %d failed; stored %d, %d, %d", w.produced, len(w.acked),
		len(w.failed), len(stored[0]), len(stored[1]), len(stored[2]))
}

// checkKafkaStored checks what a reader found in the partitions against what the
// producer was told: each acknowledged value stored once, where its
// acknowledgement said; a failed one at most once; no value the producer did not
// send; each partition's values in the order they were produced (v<n>, n rising).
func checkKafkaStored(produced int, acked map[string]kPos, failed map[string]error, stored map[int32][]string,
	where map[string][]kPos) error {
	var errs []error
	for v, pos := range acked {
		if got := where[v]; len(got) != 1 || got[0] != pos {
			errs = append(errs, fmt.Errorf("%s acknowledged at %d/%d, stored at %v", v, pos.part, pos.offset, got))
		}
	}
	for v, err := range failed {
		if got := where[v]; len(got) > 1 {
			errs = append(errs, fmt.Errorf("%s (failed: %v) stored %d times, at %v", v, err, len(got), got))
		}
	}
	parts := make([]int32, 0, len(stored))
	for p := range stored {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	var around []error // what is stored near each partition's first record out of order
	for _, p := range parts {
		last := -1
		for i, v := range stored[p] {
			n, err := strconv.Atoi(strings.TrimPrefix(v, "v"))
			if err != nil || !strings.HasPrefix(v, "v") || n >= produced {
				errs = append(errs, fmt.Errorf("partition %d holds %q, which was never produced", p, v))
				continue
			}
			if _, ok := acked[v]; !ok {
				if _, ok := failed[v]; !ok {
					errs = append(errs, fmt.Errorf("partition %d holds %s, neither acknowledged nor failed", p, v))
				}
			}
			if n <= last {
				errs = append(errs, fmt.Errorf("partition %d holds %s after v%d", p, v, last))
				if len(around) == 0 || !strings.HasPrefix(around[len(around)-1].Error(), fmt.Sprintf("partition %d ", p)) {
					from := max(0, i-20)
					around = append(around, fmt.Errorf("partition %d from offset %d: %v", p, from, stored[p][from:min(len(stored[p]), i+10)]))
				}
			}
			last = max(last, n)
		}
	}
	if len(errs) > 10 {
		errs = append(errs[:10], fmt.Errorf("and %d more", len(errs)-10))
	}
	return errors.Join(append(errs, around...)...)
}

// TestKafkaStoredCheck: checkKafkaStored passes a good history and fails each kind
// of bad one.
func TestKafkaStoredCheck(t *testing.T) {
	type history struct {
		produced int
		acked    map[string]kPos
		failed   map[string]error
		stored   map[int32][]string
	}
	good := func() history {
		return history{4, map[string]kPos{"v0": {0, 0}, "v1": {1, 0}, "v2": {0, 1}},
			map[string]error{"v3": errors.New("timed out")},
			map[int32][]string{0: {"v0", "v2"}, 1: {"v1"}}}
	}
	run := func(h history) error {
		where := map[string][]kPos{}
		for p, vs := range h.stored {
			for i, v := range vs {
				where[v] = append(where[v], kPos{p, int64(i)})
			}
		}
		return checkKafkaStored(h.produced, h.acked, h.failed, h.stored, where)
	}
	if err := run(good()); err != nil {
		t.Fatalf("a good history: %v", err)
	}
	failedStored := good()
	failedStored.stored[1] = append(failedStored.stored[1], "v3")
	if err := run(failedStored); err != nil {
		t.Fatalf("a failed record stored once: %v", err)
	}
	for name, change := range map[string]func(h *history){
		"lost":      func(h *history) { h.stored[0] = h.stored[0][:1] },
		"twice":     func(h *history) { h.stored[1] = append(h.stored[1], "v1") },
		"elsewhere": func(h *history) { h.stored[0] = []string{"v2", "v0"} },
		"reordered": func(h *history) {
			h.acked["v0"], h.acked["v2"] = kPos{0, 1}, kPos{0, 0}
			h.stored[0] = []string{"v2", "v0"}
		},
		"failed twice":     func(h *history) { h.stored[1] = append(h.stored[1], "v3", "v3") },
		"never produced":   func(h *history) { h.stored[1] = append(h.stored[1], "v9") },
		"not a value":      func(h *history) { h.stored[1] = append(h.stored[1], "x") },
		"empty":            func(h *history) { h.stored[1] = append(h.stored[1], "") },
		"neither acked":    func(h *history) { delete(h.failed, "v3"); h.stored[1] = append(h.stored[1], "v3") },
		"other partition":  func(h *history) { h.stored = map[int32][]string{0: {"v0", "v2"}, 2: {"v1"}} },
		"acked not stored": func(h *history) { h.acked["v3"] = kPos{1, 1}; delete(h.failed, "v3") },
	} {
		h := good()
		change(&h)
		if err := run(h); err == nil {
			t.Errorf("%s: passed the check", name)
		}
	}
}
