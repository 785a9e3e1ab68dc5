package clustertest_test

// The checks the nemesis (nemesis_linux_test.go) makes of what it saw, kept apart
// from the harness so that each can be tried on histories made up to break it
// (the Test…Check tests below): a check that cannot fail checks nothing.

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// partSeq is where a message is stored: its partition and its sequence there.
type partSeq struct {
	part int
	seq  uint64
}

// checkStored checks the producer's acknowledgements against each other and
// against what the consumer was given: ids n-0 … n-(total-1) were published in
// that order, one at a time, each retried under its id until acknowledged, so each
// must be acknowledged at one position, the ids of a partition at its sequences
// 1, 2, … in publishing order (none lost, none stored twice), and every partition
// used; and whatever was delivered at a position (got) must be the id acknowledged
// there.
func checkStored(published map[string]partSeq, total, parts int, got map[partSeq]string) error {
	if len(published) != total {
		return fmt.Errorf("%d of %d publishes acknowledged", len(published), total)
	}
	bySeq := map[partSeq]string{}
	for id, at := range published {
		if other, ok := bySeq[at]; ok {
			return fmt.Errorf("%v acknowledged for %s and for %s", at, id, other)
		}
		bySeq[at] = id
	}
	next := make([]uint64, parts)
	for i := range total {
		at, ok := published[fmt.Sprintf("n-%d", i)]
		if !ok {
			return fmt.Errorf("n-%d was never acknowledged", i)
		}
		if at.part < 0 || at.part >= parts {
			return fmt.Errorf("n-%d acknowledged in partition %d of %d", i, at.part, parts)
		}
		next[at.part]++
		if at.seq != next[at.part] {
			return fmt.Errorf("n-%d acknowledged at sequence %d of partition %d, want %d (stored out of order or twice)",
				i, at.seq, at.part, next[at.part])
		}
	}
	for p, n := range next {
		if n == 0 {
			return fmt.Errorf("partition %d got none of the %d messages: the keys do not spread", p, total)
		}
	}
	for _, at := range slices.SortedFunc(maps.Keys(got), comparePartSeq) {
		if want, ok := bySeq[at]; !ok {
			return fmt.Errorf("%q delivered from %v, where no publish was acknowledged", got[at], at)
		} else if got[at] != want {
			return fmt.Errorf("%q delivered from %v, where %q was acknowledged", got[at], at, want)
		}
	}
	return nil
}

func comparePartSeq(a, b partSeq) int {
	if c := cmp.Compare(a.part, b.part); c != 0 {
		return c
	}
	return cmp.Compare(a.seq, b.seq)
}

// ackSample is one reading of the consumer's ack floors (ConsumerInfo), times
// from the start of the round.
type ackSample struct {
	call, ret time.Duration
	floors    []uint64 // by partition
	// quiet: no fault was under way from quietAfter before the call to the
	// answer, so the answer came from the consumer's one leader.
	quiet bool
}

// checkAckFloors checks that the consumer's acknowledgements never went backwards.
// An ack is confirmed (AckSync returns) once it is committed in the consumer's
// Raft group, and a leader starts the consumer from everything committed: so in
// a reading, the message just above each partition's ack floor — the first one
// the consumer is still waiting on — must not be one whose ack was confirmed
// before the reading was asked for. confirmed holds when each message's first
// confirmation came back.
//
// Only quiet readings are held to it. During a fault, the node answering may be a
// leader cut off or paused that has not yet learnt that another replaced it, and
// answers from what it had. A floor may also fall legitimately from one quiet
// reading to the next over acks that were never confirmed: a leader counts an ack
// as soon as it takes it in, and one that then lost its place before committing
// it takes the ack with it. A floor that falls below a confirmed ack is a lost ack.
// checkAckFloors returns how many such legitimate falls it saw.
func checkAckFloors(samples []ackSample, confirmed map[partSeq]time.Duration) (falls int, err error) {
	var last []uint64 // the previous quiet reading's floors
	quiet := 0
	for _, s := range samples {
		if !s.quiet {
			continue
		}
		quiet++
		for p, floor := range s.floors {
			above := partSeq{p, floor + 1}
			if at, ok := confirmed[above]; ok && at < s.call {
				return falls, fmt.Errorf("a reading asked for at %v shows partition %d's ack floor at %d, but the ack of %v was confirmed at %v (earlier quiet floors %v)",
					s.call.Round(time.Millisecond), p, floor, above, at.Round(time.Millisecond), last)
			}
			if last != nil && p < len(last) && floor < last[p] {
				falls++
			}
		}
		last = s.floors
	}
	if quiet < 3 {
		return falls, fmt.Errorf("only %d of %d readings of the ack floors taken while the cluster was quiet: the check has nothing to check", quiet, len(samples))
	}
	return falls, nil
}

// TestAckFloorCheck: the check refuses a quiet reading whose floor is below an ack
// confirmed before it, and lets a floor fall over an ack that was not confirmed
// (or not yet) and readings taken during a fault say anything.
func TestAckFloorCheck(t *testing.T) {
	ms := time.Millisecond
	quiet := func(call time.Duration, floors ...uint64) ackSample {
		return ackSample{call: call, ret: call + ms, floors: floors, quiet: true}
	}
	confirmed := map[partSeq]time.Duration{{0, 1}: 10 * ms, {0, 2}: 20 * ms, {1, 1}: 15 * ms, {0, 4}: 50 * ms}
	ok := []ackSample{
		quiet(5*ms, 0, 0),
		quiet(30*ms, 3, 1), // 3 acked in partition 0, its ack not confirmed (yet)
		{call: 35 * ms, ret: 36 * ms, floors: []uint64{0, 0}}, // during a fault: not held to anything
		quiet(40*ms, 2, 1), // 3's ack is lost: legitimate, it was never confirmed
		quiet(45*ms, 3, 1), // 4 confirmed at 50 ms, after this call
	}
	falls, err := checkAckFloors(ok, confirmed)
	if err != nil || falls != 1 {
		t.Fatalf("a floor falling over an unconfirmed ack: %d falls, %v", falls, err)
	}
	lost := append(slices.Clone(ok), quiet(60*ms, 3, 1)) // 4 confirmed at 50 ms, still waited on at 60
	if _, err := checkAckFloors(lost, confirmed); err == nil || !strings.Contains(err.Error(), "ack of {0 4} was confirmed") {
		t.Fatalf("a floor below a confirmed ack: %v", err)
	}
	below := append(slices.Clone(ok), quiet(60*ms, 1, 1)) // 2 confirmed at 20 ms, waited on at 60
	if _, err := checkAckFloors(below, confirmed); err == nil {
		t.Fatal("a floor fallen below a confirmed ack passed the check")
	}
	if _, err := checkAckFloors([]ackSample{{floors: []uint64{0}}}, confirmed); err == nil {
		t.Fatal("readings without a quiet one passed the check")
	}
}

// TestStoredCheck: the check refuses a lost, doubled or reordered message and a
// delivery that is not what was acknowledged at its position.
func TestStoredCheck(t *testing.T) {
	good := map[string]partSeq{"n-0": {0, 1}, "n-1": {1, 1}, "n-2": {0, 2}}
	got := map[partSeq]string{{0, 1}: "n-0", {1, 1}: "n-1", {0, 2}: "n-2"}
	if err := checkStored(good, 3, 2, got); err != nil {
		t.Fatalf("a good history: %v", err)
	}
	for name, c := range map[string]struct {
		published map[string]partSeq
		total     int
		got       map[partSeq]string
	}{
		"lost":      {map[string]partSeq{"n-0": {0, 1}, "n-1": {1, 1}}, 3, nil},
		"twice":     {map[string]partSeq{"n-0": {0, 1}, "n-1": {1, 1}, "n-2": {0, 1}}, 3, nil},
		"reordered": {map[string]partSeq{"n-0": {0, 2}, "n-1": {1, 1}, "n-2": {0, 1}}, 3, nil},
		"a gap":     {map[string]partSeq{"n-0": {0, 1}, "n-1": {1, 1}, "n-2": {0, 3}}, 3, nil},
		"one part":  {map[string]partSeq{"n-0": {0, 1}, "n-1": {0, 2}}, 2, nil},
		"other msg": {good, 3, map[partSeq]string{{0, 2}: "n-0"}},
		"ghost":     {good, 3, map[partSeq]string{{1, 2}: "n-3"}},
	} {
		if err := checkStored(c.published, c.total, 2, c.got); err == nil {
			t.Errorf("%s: passed the check", name)
		}
	}
}

// leadingLine is what a node logs for each group and term it leads.
var leadingLine = regexp.MustCompile(`msg="leading group" group=(\d+) term=(\d+)`)

// oneLeaderPerTerm checks, from every node's log (by node name), that no two nodes
// led one group in one term: only a leader accepts writes, so two in a term could
// both have had writes committed.
func oneLeaderPerTerm(outputs map[string]string) error {
	type groupTerm struct{ group, term string }
	leader := map[groupTerm]string{}
	for _, node := range slices.Sorted(maps.Keys(outputs)) {
		for _, m := range leadingLine.FindAllStringSubmatch(outputs[node], -1) {
			gt := groupTerm{m[1], m[2]}
			if other, ok := leader[gt]; ok && other != node {
				return fmt.Errorf("group %s had two leaders in term %s: %s and %s", gt.group, gt.term, other, node)
			}
			leader[gt] = node
		}
	}
	if len(leader) == 0 {
		return errors.New("no node logged leading a group: the check has nothing to check")
	}
	return nil
}

// TestOneLeaderPerTermCheck: the check finds two leaders of a group in one term, and
// lets one node lead many terms and many groups.
func TestOneLeaderPerTermCheck(t *testing.T) {
	line := func(group, term int) string {
		return fmt.Sprintf("time=x level=INFO msg=\"leading group\" group=%d term=%d\n", group, term)
	}
	ok := map[string]string{"n1": line(1, 2) + line(16, 2) + line(1, 7), "n2": line(1, 3) + line(16, 3)}
	if err := oneLeaderPerTerm(ok); err != nil {
		t.Fatalf("one leader per term: %v", err)
	}
	two := map[string]string{"n1": line(1, 2) + line(16, 4), "n2": line(16, 3), "n3": line(16, 4)}
	if err := oneLeaderPerTerm(two); err == nil || !strings.Contains(err.Error(), "group 16 had two leaders in term 4") {
		t.Fatalf("two leaders of group 16 in term 4: %v", err)
	}
	if err := oneLeaderPerTerm(map[string]string{"n1": "nothing"}); err == nil {
		t.Fatal("no leadership logged at all passed the check")
	}
}

// catalogueHistory records the stream catalogue operations the nemesis's clients
// make (create, delete and list streams; the meta group's operations), for
// porcupine.
type catalogueHistory struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
}

// catalogueNames are the streams the history's clients create and delete.
var catalogueNames = []string{"CAT0", "CAT1", "CAT2"}

// catIn is an operation on one stream's existence: create, delete, or read (from
// a list).
type catIn struct {
	op   string // "create", "delete", "read"
	name string
}

// catOut is its outcome: ok (created; deleted; listed), notFound (a delete of a
// stream that was not there), unknown (no answer: it may or may not have
// happened); present is what a read saw.
type catOut struct {
	ok, notFound, unknown, present bool
}

// forever is the return time of an operation without an answer: it may take
// effect at any time after its call.
const forever = int64(1) << 62

func (h *catalogueHistory) now() int64 { return int64(time.Since(h.start)) }

func (h *catalogueHistory) add(client int, in catIn, out catOut, call, ret int64) {
	h.mu.Lock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret})
	h.mu.Unlock()
}

// catalogueModel: each stream name is a register of its existence, checked on its
// own (a list is a read of each).
var catalogueModel = porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		for _, op := range history {
			name := op.Input.(catIn).name
			by[name] = append(by[name], op)
		}
		var out [][]porcupine.Operation
		for _, name := range catalogueNames {
			if len(by[name]) > 0 {
				out = append(out, by[name])
			}
		}
		return out
	},
	Init: func() []interface{} { return []interface{}{false} },
	Step: func(state, input, output interface{}) []interface{} {
		exists, in, out := state.(bool), input.(catIn), output.(catOut)
		switch in.op {
		case "create":
			if out.unknown {
				return []interface{}{exists, true}
			}
			return []interface{}{true}
		case "delete":
			switch {
			case out.unknown:
				return []interface{}{exists, false}
			case out.notFound && exists, out.ok && !exists:
				return nil
			}
			return []interface{}{false}
		default:
			if out.present != exists {
				return nil
			}
			return []interface{}{exists}
		}
	},
	DescribeOperation: func(input, output interface{}) string {
		return fmt.Sprintf("%s(%s) -> %+v", input.(catIn).op, input.(catIn).name, output.(catOut))
	},
}

// check fails t unless the history is linearizable. A search that runs out of
// time (limit) is logged, not failed: it proved nothing either way.
func (h *catalogueHistory) check(t *testing.T, limit time.Duration) {
	h.mu.Lock()
	ops := slices.Clone(h.ops)
	h.mu.Unlock()
	if len(ops) < 30 {
		t.Errorf("only %d catalogue operations recorded", len(ops))
		return
	}
	began := time.Now()
	res, info := porcupine.CheckOperationsVerbose(catalogueModel.ToModel(), ops, limit)
	took := time.Since(began).Round(time.Millisecond)
	switch res {
	case porcupine.Ok:
		t.Logf("catalogue history of %d operations is linearizable (checked in %v)", len(ops), took)
	case porcupine.Illegal:
		// Kept after the test (t.TempDir would not be): the visualisation and the
		// whole history, to look at the failure.
		dir, err := os.MkdirTemp("", "tern-nemesis-")
		if err == nil {
			_ = porcupine.VisualizePath(catalogueModel.ToModel(), info, filepath.Join(dir, "catalogue.html"))
			var all strings.Builder
			for _, op := range slices.SortedFunc(slices.Values(ops), byCall) {
				all.WriteString(describeOp(op) + "\n")
			}
			_ = os.WriteFile(filepath.Join(dir, "catalogue.txt"), []byte(all.String()), 0o644)
		}
		t.Errorf("the catalogue history of %d operations is not linearizable (%s):\n%s", len(ops), dir, explainIllegal(ops))
	default:
		t.Logf("catalogue history of %d operations: the linearizability check timed out after %v", len(ops), took)
	}
}

func byCall(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) }

// describeOp is one operation of a catalogue history, times in milliseconds from
// the start of the round.
func describeOp(op porcupine.Operation) string {
	ret := "never"
	if op.Return != forever {
		ret = fmt.Sprintf("%.1f", float64(op.Return)/1e6)
	}
	return fmt.Sprintf("client %d [%.1f, %s ms] %s", op.ClientId, float64(op.Call)/1e6, ret,
		catalogueModel.DescribeOperation(op.Input, op.Output))
}

// explainIllegal says where a catalogue history that is not linearizable goes
// wrong: for each stream name whose operations are not, the end of the longest
// order of them porcupine found, and the operations it could not go on with.
func explainIllegal(ops []porcupine.Operation) string {
	var out strings.Builder
	for _, name := range catalogueNames {
		var of []porcupine.Operation
		for _, op := range ops {
			if op.Input.(catIn).name == name {
				of = append(of, op)
			}
		}
		res, info := porcupine.CheckOperationsVerbose(catalogueModel.ToModel(), of, 10*time.Second)
		if res != porcupine.Illegal {
			continue
		}
		var longest []porcupine.Operation
		for _, part := range info.PartialLinearizationsOperations() {
			for _, l := range part {
				if len(l) > len(longest) {
					longest = l
				}
			}
		}
		left := map[porcupine.Operation]int{}
		for _, op := range of {
			left[op]++
		}
		for _, op := range longest {
			left[op]--
		}
		fmt.Fprintf(&out, "%s: %d operations, at most %d of them in a legal order, which ends:\n", name, len(of), len(longest))
		for _, op := range longest[max(0, len(longest)-8):] {
			fmt.Fprintf(&out, "    %s\n", describeOp(op))
		}
		out.WriteString("  and cannot go on with the first of the others:\n")
		n := 0
		for _, op := range slices.SortedFunc(slices.Values(of), byCall) {
			if left[op] > 0 && n < 8 {
				left[op]--
				n++
				fmt.Fprintf(&out, "    %s\n", describeOp(op))
			}
		}
	}
	return out.String()
}

// TestCatalogueModelRejectsStaleRead: the checker the nemesis relies on refuses a
// list that misses a stream whose create was acknowledged before the list began,
// and accepts one that overlaps the create.
func TestCatalogueModelRejectsStaleRead(t *testing.T) {
	m := catalogueModel.ToModel()
	created := porcupine.Operation{ClientId: 0, Input: catIn{"create", "CAT0"}, Output: catOut{ok: true}, Call: 0, Return: 10}
	stale := porcupine.Operation{ClientId: 1, Input: catIn{"read", "CAT0"}, Output: catOut{ok: true}, Call: 20, Return: 30}
	if porcupine.CheckOperations(m, []porcupine.Operation{created, stale}) {
		t.Fatal("a read after an acknowledged create that misses the stream passed the check")
	}
	if why := explainIllegal([]porcupine.Operation{created, stale}); !strings.Contains(why, "cannot go on with the first of the others:\n    client 1 [0.0, 0.0 ms] read(CAT0)") {
		t.Fatalf("the explanation of the stale read: %s", why)
	}
	overlapping := stale
	overlapping.Call = 5
	if !porcupine.CheckOperations(m, []porcupine.Operation{created, overlapping}) {
		t.Fatal("a read concurrent with the create that misses the stream failed the check")
	}
	unknownDelete := porcupine.Operation{ClientId: 2, Input: catIn{"delete", "CAT0"}, Output: catOut{unknown: true}, Call: 12, Return: forever}
	if !porcupine.CheckOperations(m, []porcupine.Operation{created, unknownDelete, stale}) {
		t.Fatal("a delete without an answer, concurrent with the read, failed the check")
	}
}
