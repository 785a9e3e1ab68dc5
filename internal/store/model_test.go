package store

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"
)

// model is the obvious in-memory log the real one must agree with.
type model struct {
	live     map[uint64]msg
	last     uint64
	lastTime int64
	// looseTime: after a truncation or reset, LastTime is whatever record the
	// log still has (or 0); the next commit makes it exact again.
	looseTime bool
}

func (m *model) size(x msg) uint64 {
	return uint64(recordSize(len(x.subject), len(x.header), len(x.payload)))
}

func (m *model) seqs() []uint64 {
	var s []uint64
	for q := range m.live {
		s = append(s, q)
	}
	slices.Sort(s)
	return s
}

func (m *model) bytes() uint64 {
	var n uint64
	for _, x := range m.live {
		n += m.size(x)
	}
	return n
}

func (m *model) removeOldest() {
	s := m.seqs()
	delete(m.live, s[0])
}

func checkModel(t *testing.T, l *Log, m *model, step int) {
	t.Helper()
	st := l.State()
	seqs := m.seqs()
	first := m.last + 1
	if len(seqs) > 0 {
		first = seqs[0]
	}
	want := State{Msgs: uint64(len(seqs)), Bytes: m.bytes(), FirstSeq: first, LastSeq: m.last, LastTime: m.lastTime}
	if len(seqs) > 0 {
		want.FirstTime = m.live[first].ts
		want.Deleted = m.last - first + 1 - uint64(len(seqs))
	}
	want.Segments = st.Segments
	if fb, files := l.FileBytes(), segmentBytes(t, l); fb != files {
		t.Fatalf("step %d: FileBytes %d, the segment files hold %d", step, fb, files)
	}
	if m.looseTime {
		want.LastTime = st.LastTime
	}
	if len(seqs) == 0 && st.LastTime == 0 {
		want.LastTime = 0 // not kept across a restart once the log is empty
	}
	if st != want {
		t.Fatalf("step %d: State = %+v\nwant %+v", step, st, want)
	}
	got := readAll(t, l, 0)
	if !slices.Equal(seqsOf(got), seqs) {
		t.Fatalf("step %d: reader seqs = %v\nwant %v", step, seqsOf(got), seqs)
	}
	for _, r := range got {
		x := m.live[r.Seq]
		if string(r.Subject) != x.subject || !bytes.Equal(r.Payload, x.payload) || !bytes.Equal(r.Header, x.header) || r.Time != x.ts {
			t.Fatalf("step %d: seq %d differs", step, r.Seq)
		}
	}
	// Random reads, live and dead.
	var buf []byte
	for q := first - min(first, 3); q <= m.last+2; q++ {
		r, b, err := l.Read(q, buf)
		buf = b
		if x, ok := m.live[q]; ok {
			if err != nil || r.Seq != q || !bytes.Equal(r.Payload, x.payload) {
				t.Fatalf("step %d: Read(%d) = %v, %v", step, q, r.Seq, err)
			}
		} else if !isNotFound(err) {
			t.Fatalf("step %d: Read(%d) of a dead seq: %v", step, q, err)
		}
	}
	ws := map[string]subjCount{}
	for _, q := range seqs {
		x := m.live[q]
		c := ws[x.subject]
		c.msgs++
		c.last = q
		ws[x.subject] = c
	}
	if gs := subjects(l); fmt.Sprint(gs) != fmt.Sprint(ws) {
		t.Fatalf("step %d: subjects = %v\nwant %v", step, gs, ws)
	}
	// SeqForTime against brute force (times are increasing here).
	for _, q := range seqs[:min(len(seqs), 3)] {
		ts := m.live[q].ts
		want := q
		for _, p := range seqs {
			if m.live[p].ts >= ts {
				want = p
				break
			}
		}
		if got := l.SeqForTime(ts); got != want {
			t.Fatalf("step %d: SeqForTime(%d) = %d, want %d", step, ts, got, want)
		}
	}
}

func TestRandomOpsAgainstModel(t *testing.T) {
	cases := []struct {
		name    string
		maxMsgs uint64
		maxB    int64
		age     time.Duration
		discard Discard
	}{
		{name: "unlimited"},
		{name: "maxmsgs-old", maxMsgs: 40},
		{name: "maxbytes-old", maxB: 6000},
		{name: "maxmsgs-new", maxMsgs: 40, discard: DiscardNew},
		{name: "maxbytes-new", maxB: 6000, discard: DiscardNew},
		{name: "age", age: 50 * time.Millisecond},
	}
	seeds := 1
	if n, err := strconv.Atoi(os.Getenv("TERN_STORE_SEEDS")); err == nil {
		seeds = n // soak: TERN_STORE_SEEDS=200 go test -run RandomOps
	}
	for seed := 0; seed < seeds; seed++ {
		for ci, tc := range cases {
			for _, compress := range []Compression{CompressNone, CompressS2} {
				runModel(t, seed, ci, tc.name, tc.maxMsgs, tc.maxB, tc.age, tc.discard, compress)
			}
		}
	}
}

// runModel runs one seeded case of TestRandomOpsAgainstModel. A compressed log
// gets payloads that compress (runs and a small alphabet), so that its commits
// become blocks, with incompressible ones now and then written as they are.
func runModel(t *testing.T, seed, ci int, name string, maxMsgs uint64, maxB int64, age time.Duration, discard Discard, compress Compression) {
	tc := struct {
		maxMsgs uint64
		maxB    int64
		age     time.Duration
		discard Discard
	}{maxMsgs, maxB, age, discard}
	{
		{
			t.Run(fmt.Sprintf("%s/%s/%d", name, compress, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(ci), uint64(seed)))
				clk := newClock()
				cfg := testConfig(t)
				cfg.SegmentBytes = 1500
				cfg.IndexEvery = 200
				cfg.MaxMsgs, cfg.MaxBytes, cfg.MaxAge, cfg.Discard = tc.maxMsgs, tc.maxB, tc.age, tc.discard
				cfg.Now = clk.Now
				cfg.Compression = compress
				l, _ := mustOpen(t, cfg)
				blocks := 0
				m := &model{live: map[uint64]msg{}}
				subjects := []string{"a", "b.c", "d.e.f", "g"}
				for step := 0; step < 600; step++ {
					clk.Add(time.Millisecond)
					switch op := rng.IntN(100); {
					case op < 45: // append a batch, commit or roll back
						n := 1 + rng.IntN(8)
						var pend []msg
						full := false
						for i := 0; i < n; i++ {
							x := msg{subject: subjects[rng.IntN(len(subjects))], payload: make([]byte, rng.IntN(120))}
							if rng.IntN(3) == 0 {
								x.header = []byte("h:1")
							}
							for j := range x.payload {
								x.payload[j] = byte(rng.Uint32())
								if compress == CompressS2 && rng.IntN(8) > 0 {
									x.payload[j] = 'a' + byte(j/16%3)
								}
							}
							x.ts = clk.Now().UnixNano()
							seq, err := l.Append([]byte(x.subject), x.header, x.payload, 0)
							if errors.Is(err, ErrFull) {
								full = true
								if tc.discard != DiscardNew {
									t.Fatalf("ErrFull with DiscardOld")
								}
								var pb uint64
								for _, p := range pend {
									pb += m.size(p)
								}
								if !(tc.maxMsgs > 0 && uint64(len(m.live)+len(pend))+1 > tc.maxMsgs) &&
									!(tc.maxB > 0 && m.bytes()+pb+m.size(x) > uint64(tc.maxB)) {
									t.Fatalf("step %d: unexpected ErrFull", step)
								}
								break
							}
							if err != nil {
								t.Fatal(err)
							}
							if want := m.last + uint64(len(pend)) + 1; seq != want {
								t.Fatalf("step %d: Append seq %d, want %d", step, seq, want)
							}
							x.seq = seq
							pend = append(pend, x)
						}
						_ = full
						if rng.IntN(6) == 0 {
							l.Rollback()
							break
						}
						if err := l.Commit(); err != nil {
							t.Fatal(err)
						}
						blocks += countBlocks(t, l)
						for _, x := range pend {
							m.live[x.seq] = x
							m.last = x.seq
							m.lastTime = x.ts
							m.looseTime = false
						}
						if tc.discard == DiscardOld {
							for (tc.maxMsgs > 0 && uint64(len(m.live)) > tc.maxMsgs) || (tc.maxB > 0 && m.bytes() > uint64(tc.maxB)) {
								m.removeOldest()
							}
						}
					case op < 70: // delete, mostly near the front
						if len(m.live) == 0 {
							break
						}
						s := m.seqs()
						q := s[min(rng.IntN(len(s)), rng.IntN(len(s)))]
						if rng.IntN(10) == 0 {
							q = m.last + 5
						}
						err := l.Delete(q)
						if _, ok := m.live[q]; ok {
							if err != nil {
								t.Fatalf("step %d: Delete(%d): %v", step, q, err)
							}
							delete(m.live, q)
						} else if !isNotFound(err) {
							t.Fatalf("step %d: Delete(%d) absent: %v", step, q, err)
						}
						if err := l.Delete(q); !isNotFound(err) {
							t.Fatalf("step %d: second Delete(%d): %v", step, q, err)
						}
					case op < 76: // purge
						var upTo uint64
						if rng.IntN(4) > 0 {
							upTo = m.last + 1 - uint64(rng.IntN(int(m.last)+1))/2
						}
						sub := ""
						if rng.IntN(2) == 0 {
							sub = subjects[rng.IntN(len(subjects))]
						}
						n, err := l.Purge(upTo, sub)
						if err != nil {
							t.Fatal(err)
						}
						var want uint64
						for q, x := range m.live {
							if (upTo == 0 || q < upTo) && (sub == "" || x.subject == sub) {
								delete(m.live, q)
								want++
							}
						}
						if n != want {
							t.Fatalf("step %d: Purge(%d, %q) = %d, want %d", step, upTo, sub, n, want)
						}
					case op < 84: // expire
						n, err := l.ExpireOld()
						if err != nil {
							t.Fatal(err)
						}
						var want uint64
						if tc.age > 0 {
							cut := clk.Now().Add(-tc.age).UnixNano()
							for q, x := range m.live {
								if x.ts < cut {
									delete(m.live, q)
									want++
								}
							}
						}
						if n != want {
							t.Fatalf("step %d: ExpireOld = %d, want %d", step, n, want)
						}
					case op < 87: // cut a suffix, as a replication log replacing conflicting entries
						first := m.last + 1
						if s := m.seqs(); len(s) > 0 {
							first = s[0]
						}
						seq := first - 1 + uint64(rng.IntN(int(m.last-first+2)+2))
						err := l.TruncateAfter(seq)
						if errors.Is(err, ErrCutInBlock) && compress == CompressS2 {
							break // a compressed log is cut between blocks only
						}
						if err != nil {
							t.Fatalf("step %d: TruncateAfter(%d): %v", step, seq, err)
						}
						if seq < m.last {
							for q := range m.live {
								if q > seq {
									delete(m.live, q)
								}
							}
							m.last = seq
							m.looseTime = true
						}
						if first > 1 && rng.IntN(3) == 0 {
							if err := l.TruncateAfter(first - 2); err == nil {
								t.Fatalf("step %d: TruncateAfter(%d) below FirstSeq %d accepted", step, first-2, first)
							}
						}
					case op < 88: // start again elsewhere, as after a snapshot install
						next := 1 + uint64(rng.IntN(int(m.last)+10))
						if err := l.Reset(next); err != nil {
							t.Fatalf("step %d: Reset(%d): %v", step, next, err)
						}
						clear(m.live)
						m.last = next - 1
						m.looseTime = true
					case op < 90:
						var rep Report
						l, rep = reopen(t, l)
						if len(rep.Corrupt) > 0 || rep.TruncatedBytes > 0 {
							t.Fatalf("step %d: clean reopen reported %+v", step, rep)
						}
					default:
						checkModel(t, l, m, step)
					}
				}
				checkModel(t, l, m, -1)
				l, _ = reopen(t, l)
				checkModel(t, l, m, -2)
				if compress == CompressS2 && blocks == 0 {
					t.Fatalf("no commit of a compressed log made a block")
				}
				if compress == CompressNone && blocks > 0 {
					t.Fatalf("an uncompressed log made %d blocks", blocks)
				}
			})
		}
	}
}

// countBlocks counts the compressed blocks in the log's segment files.
func countBlocks(t *testing.T, l *Log) int {
	t.Helper()
	n := 0
	for _, s := range l.segs {
		if s.removed {
			continue
		}
		b, err := os.ReadFile(s.logPath)
		if err != nil {
			t.Fatal(err)
		}
		for len(b) >= recHdrSize {
			k, err := peekRecord(b)
			if err != nil || k > len(b) {
				break
			}
			if recFlags(b)&flagBlock != 0 {
				n++
			}
			b = b[k:]
		}
	}
	return n
}
