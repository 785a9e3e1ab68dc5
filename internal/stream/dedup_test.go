package stream

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/tern-mq/tern/internal/header"
	"github.com/tern-mq/tern/internal/streamapi"
)

// TestDedupWindowMatchesASet drives the window with seeded random ids — numbered
// ones in order, out of order and with gaps, across partitions, and plain ones —
// in batches sharing a time, and checks every answer against the plain set of
// (id, time) it stands for.
func TestDedupWindowMatchesASet(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 0))
			const window = 10 * time.Second
			d := newDedupWindow(window)
			type stored struct {
				part int
				seq  uint64
				at   int64
			}
			ref := map[string]stored{}
			alive := func(id string, now int64) (stored, bool) {
				s, ok := ref[id]
				return s, ok && s.at >= now-int64(window)
			}
			now := int64(1_000_000_000)
			next := map[string]uint64{}
			seqs := []uint64{0, 0, 0}
			prefixes := []string{"kafka:7:0:0:", "kafka:7:0:1:", "order-", ""}
			var recent []string
			for step := 0; step < 20000; step++ {
				if r.IntN(4) == 0 { // ids added between are a batch of one time
					now += int64(r.IntN(int(20 * time.Millisecond)))
				}
				var id string
				switch k := r.IntN(10); {
				case k < 6: // the producer's next number, now and then skipping some
					p := prefixes[r.IntN(len(prefixes))]
					next[p] += 1 + uint64(r.IntN(2)*r.IntN(3))
					id = p + fmt.Sprint(next[p])
				case k < 8: // an earlier number again, or one never used
					p := prefixes[r.IntN(len(prefixes))]
					id = p + fmt.Sprint(r.Uint64N(next[p]+2))
				case k < 9:
					id = fmt.Sprintf("plain-%x", r.IntN(500))
				default:
					id = fmt.Sprintf("kafka:7:0:0:%02d", r.IntN(20)) // leading zeros: not numbered
				}
				want, wantDup := alive(id, now)
				part, seq, dup := d.lookup(parseMsgID(id), now)
				if dup != wantDup || (dup && (part != want.part || seq != want.seq)) {
					t.Fatalf("step %d: lookup(%q) = %d/%d dup %v, want %d/%d dup %v", step, id, part, seq, dup, want.part, want.seq, wantDup)
				}
				if dup {
					continue
				}
				p := r.IntN(2)
				if r.IntN(50) == 0 {
					seqs[p] += 3 // messages without ids between
				}
				seqs[p]++
				d.add(parseMsgID(id), p, seqs[p], now)
				ref[id] = stored{p, seqs[p], now}
				recent = append(recent, id)
				if len(recent) > 4 {
					recent = recent[1:]
				}
				if r.IntN(200) == 0 {
					// A failed commit takes back what it added.
					for i := len(recent) - 1; i >= 0; i-- {
						d.remove(parseMsgID(recent[i]))
						delete(ref, recent[i])
					}
					recent = recent[:0]
				}
			}
		})
	}
}

// TestDedupWindowKeepsRunsSmall checks that a numbering producer costs a run per
// batch, not a map entry per id, and that memory follows the window.
func TestDedupWindowKeepsRunsSmall(t *testing.T) {
	d := newDedupWindow(time.Second)
	now := int64(0)
	for i := uint64(0); i < 100_000; i++ {
		now += int64(50 * time.Microsecond)
		id := fmt.Sprintf("kafka:1:0:0:%d", i)
		if _, _, dup := d.lookup(parseMsgID(id), now); dup {
			t.Fatalf("%s: duplicate", id)
		}
		d.add(parseMsgID(id), 0, i+1, now)
	}
	if len(d.ids) != 0 {
		t.Fatalf("%d map entries, want 0", len(d.ids))
	}
	l := d.numbered["kafka:1:0:0:"]
	if len(l.runs) != 1 {
		t.Fatalf("%d runs, want 1", len(l.runs))
	}
	// The ids of the last second, both ends included.
	if got := d.len(); got != 20_001 {
		t.Fatalf("%d ids kept, want the window's 20001", got)
	}
	// Every id here has a time of its own: a span each.
	if n := len(l.spans) - l.spanHead; n != 20_001 || cap(l.spans) > 4*20_001 {
		t.Fatalf("time spans: %d kept, capacity %d", n, cap(l.spans))
	}
	if _, seq, dup := d.lookup(parseMsgID("kafka:1:0:0:99990"), now); !dup || seq != 99991 {
		t.Fatalf("lookup of a stored id: seq %d dup %v", seq, dup)
	}
}

// TestDedupWindowSpansBatches checks that the ids of a batch, added at one time,
// keep one time between them, and expire together once the window passed them.
func TestDedupWindowSpansBatches(t *testing.T) {
	d := newDedupWindow(time.Second)
	const batches, each = 300, 1000
	now := int64(0)
	for b := 0; b < batches; b++ {
		now += int64(10 * time.Millisecond)
		for i := 0; i < each; i++ {
			n := uint64(b*each + i)
			d.add(parseMsgID(fmt.Sprintf("kafka:7:0:0:%d", n)), 0, n+1, now)
		}
	}
	l := d.numbered["kafka:7:0:0:"]
	if len(l.spans) != batches || len(l.runs) != 1 {
		t.Fatalf("%d time spans and %d runs for %d batches, want a span a batch and one run", len(l.spans), len(l.runs), batches)
	}
	if _, _, dup := d.lookup(parseMsgID("kafka:7:0:0:299999"), now); !dup {
		t.Fatal("an id of the last batch is gone")
	}
	// Batch b was added at (b+1)*10 ms: a window ending at cut+1 s keeps the
	// batches from the 202nd (b = 201) on.
	cut := int64(202 * 10 * time.Millisecond)
	if _, _, dup := d.lookup(parseMsgID("kafka:7:0:0:200999"), cut+int64(time.Second)); dup {
		t.Fatal("an id of a batch older than the window is still kept")
	}
	if _, seq, dup := d.lookup(parseMsgID("kafka:7:0:0:201000"), cut+int64(time.Second)); !dup || seq != 201001 {
		t.Fatalf("the first id of the oldest batch in the window: seq %d dup %v", seq, dup)
	}
	if got := d.len(); got != (batches-201)*each {
		t.Fatalf("%d ids kept, want %d", got, (batches-201)*each)
	}
	if n := len(l.spans) - l.spanHead; n != batches-201 {
		t.Fatalf("%d spans kept, want %d", n, batches-201)
	}
}

func BenchmarkDedupNumbered(b *testing.B) {
	// A million ids a second: the window keeps a million. Each at a time of its
	// own, or in batches of 1,000 sharing one, as a replicated entry's do.
	for _, batch := range []uint64{1, 1000} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			d := newDedupWindow(time.Second)
			const prefix = "kafka:1234567:0:0:"
			buf := []byte(prefix)
			b.ReportAllocs()
			now := int64(0)
			for i := uint64(0); b.Loop(); i++ {
				if i%batch == 0 {
					now += int64(batch) * 1000
				}
				buf = strconv.AppendUint(buf[:len(prefix)], i, 10)
				id := parseMsgID(unsafe.String(unsafe.SliceData(buf), len(buf))) // as a header's id points into its message
				if _, _, dup := d.lookup(id, now); !dup {
					d.add(id, 0, i+1, now)
				}
			}
		})
	}
}

func BenchmarkDedupPlain(b *testing.B) {
	d := newDedupWindow(time.Second)
	buf := []byte("order-")
	b.ReportAllocs()
	now := int64(0)
	for i := uint64(0); b.Loop(); i++ {
		now += 1000
		buf = strconv.AppendUint(buf[:6], i, 16)
		buf = append(buf, 'x') // not numbered
		id := parseMsgID(unsafe.String(unsafe.SliceData(buf), len(buf)))
		if _, _, dup := d.lookup(id, now); !dup {
			d.add(id, 0, i+1, now)
		}
	}
}

// pubIDs answers as header Lookups of the message id and the expected last id do:
// the first of each, an empty id being none.
func TestPubIDsAsLookups(t *testing.T) {
	blocks := [][][2]string{
		nil,
		{{"a", "1"}},
		{{streamapi.HeaderMsgID, "x"}},
		{{streamapi.HeaderMsgID, ""}, {streamapi.HeaderMsgID, "y"}},
		{{"k", "v"}, {streamapi.HeaderExpectedLastMsgID, "e1"}, {streamapi.HeaderMsgID, "m1"}, {streamapi.HeaderExpectedLastMsgID, "e2"}},
		{{streamapi.HeaderExpectedLastMsgID, ""}},
		{{streamapi.HeaderMsgID, "m1"}, {streamapi.HeaderMsgID, "m2"}, {streamapi.HeaderExpectedLastMsgID, "e"}},
	}
	for _, pairs := range blocks {
		var h []byte
		for _, p := range pairs {
			h = header.Append(h, p[0], p[1])
		}
		id, exp, hasExp := pubIDs(header.Block(h))
		wantID, _ := header.Block(h).Lookup(streamapi.HeaderMsgID)
		wantExp, wantHas := header.Block(h).Lookup(streamapi.HeaderExpectedLastMsgID)
		if id != wantID || exp != wantExp || hasExp != wantHas {
			t.Errorf("%v: pubIDs = %q, %q, %v; Lookups %q, %q, %v", pairs, id, exp, hasExp, wantID, wantExp, wantHas)
		}
	}
}
