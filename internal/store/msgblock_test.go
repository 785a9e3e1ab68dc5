package store

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/klauspost/compress/s2"
)

// messageBlock makes the inner bytes and the S2 block of msgs, as a replicated
// stream's leader does.
func messageBlock(msgs []msg) (inner, block []byte) {
	for _, x := range msgs {
		inner = AppendBlockMessage(inner, []byte(x.subject), x.header, x.payload)
	}
	return inner, s2.Encode(nil, inner)
}

// blockMsgs is n messages from seq on, all of time ts, with subjects in runs.
func blockMsgs(seq uint64, ts int64, n, size int) []msg {
	out := make([]msg, n)
	for i := range out {
		q := seq + uint64(i)
		var hdr []byte
		if i%3 == 0 {
			hdr = []byte("\x02id\x03abc")
		}
		out[i] = msg{seq: q, ts: ts, subject: fmt.Sprintf("metrics.%d", i/7%3), header: hdr, payload: compressible(q, size+i%5)}
	}
	return out
}

// checkMsgs reads want back (checkReads) and checks the log's counts and
// subjects against it.
func checkMsgs(t *testing.T, l *Log, want []msg) {
	t.Helper()
	checkReads(t, l, want)
	var bytesWant uint64
	subjects := map[string][2]uint64{}
	for _, x := range want {
		bytesWant += uint64(recordSize(len(x.subject), len(x.header), len(x.payload)))
		s := subjects[x.subject]
		subjects[x.subject] = [2]uint64{s[0] + 1, x.seq}
	}
	st := l.State()
	if st.Msgs != uint64(len(want)) || st.Bytes != bytesWant {
		t.Fatalf("state %d messages, %d bytes; want %d, %d", st.Msgs, st.Bytes, len(want), bytesWant)
	}
	if len(want) > 0 && (st.FirstTime != want[0].ts || st.LastTime != want[len(want)-1].ts) {
		t.Fatalf("state times %d..%d, want %d..%d", st.FirstTime, st.LastTime, want[0].ts, want[len(want)-1].ts)
	}
	seen := 0
	l.ForEachSubject(func(subject string, msgs, last uint64) bool {
		seen++
		if w := subjects[subject]; w[0] != msgs || w[1] != last {
			t.Errorf("subject %q: %d messages, last %d; want %d, %d", subject, msgs, last, w[0], w[1])
		}
		return true
	})
	if seen != len(subjects) {
		t.Fatalf("%d subjects, want %d", seen, len(subjects))
	}
}

// TestAppendBlock: messages appended as blocks the caller compressed read back
// like appended records, beside records and packed blocks in the same commits,
// across segments, after a reopen, and with deletions, time seeks and cuts.
func TestAppendBlock(t *testing.T) {
	for _, comp := range []Compression{CompressS2, CompressNone} {
		t.Run(comp.String(), func(t *testing.T) {
			clk := newClock()
			cfg := testConfig(t)
			cfg.Now = clk.Now
			cfg.Compression = comp
			cfg.SegmentBytes = 6 << 10
			l, _ := mustOpen(t, cfg)
			var want []msg
			blockEnds := map[uint64]bool{}
			for round := 0; round < 12; round++ {
				for k := 0; k < 1+round%3; k++ {
					clk.Add(time.Millisecond)
					seq := uint64(len(want) + 1)
					x := msg{seq: seq, ts: clk.Now().UnixNano(), subject: "metrics.1", payload: compressible(seq, 200)}
					if got, err := l.Append([]byte(x.subject), nil, x.payload, 0); err != nil || got != seq {
						t.Fatalf("Append: %d, %v", got, err)
					}
					want = append(want, x)
				}
				for k := 0; k < 1+round%2; k++ {
					clk.Add(time.Millisecond)
					msgs := blockMsgs(uint64(len(want)+1), clk.Now().UnixNano(), 20+round*7, 300)
					inner, block := messageBlock(msgs)
					if err := l.RoomFor(inner, block); err != nil {
						t.Fatal(err)
					}
					got, err := l.AppendBlock(0, inner, block)
					if err != nil || got != msgs[0].seq {
						t.Fatalf("AppendBlock: %d, %v; want %d", got, err, msgs[0].seq)
					}
					want = append(want, msgs...)
					blockEnds[msgs[len(msgs)-1].seq] = true
				}
				if err := l.Commit(); err != nil {
					t.Fatal(err)
				}
			}
			if l.State().Segments < 3 {
				t.Fatalf("%d segments: the test means to cross segments", l.State().Segments)
			}
			checkMsgs(t, l, want)
			l, rep := reopen(t, l)
			if len(rep.Corrupt) != 0 || rep.TruncatedBytes != 0 {
				t.Fatalf("reopen: %+v", rep)
			}
			checkMsgs(t, l, want)

			// A time seek lands on a block's first message: they share its time.
			for _, x := range want {
				if got := l.SeqForTime(x.ts); got > x.seq || want[got-1].ts != x.ts {
					t.Fatalf("SeqForTime(%d) = %d, for message %d", x.ts, got, x.seq)
				}
			}

			// Deleting messages inside a block.
			mid := want[len(want)/2]
			if err := l.Delete(mid.seq); err != nil {
				t.Fatal(err)
			}
			want = append(want[:len(want)/2:len(want)/2], want[len(want)/2+1:]...)
			checkMsgs(t, l, want)

			// Cuts only between blocks.
			var cut, inside uint64
			for q := uint64(len(want)) / 3; cut == 0 || inside == 0; q++ {
				if blockEnds[q] && cut == 0 {
					cut = q
				} else if blockEnds[q+1] && inside == 0 {
					inside = q
				}
			}
			if err := l.TruncateAfter(inside); !errors.Is(err, ErrCutInBlock) {
				t.Fatalf("cut at %d, inside a block: %v", inside, err)
			}
			if err := l.TruncateAfter(cut); err != nil {
				t.Fatal(err)
			}
			for len(want) > 0 && want[len(want)-1].seq > cut {
				want = want[:len(want)-1]
			}
			checkMsgs(t, l, want)
			l, _ = reopen(t, l)
			checkMsgs(t, l, want)
		})
	}
}

// TestAppendBlockRefusals: RoomFor and AppendBlock refuse alike what the
// limits or the bytes forbid, and a refusal leaves the batch as it was.
func TestAppendBlockRefusals(t *testing.T) {
	cfg := testConfig(t)
	cfg.Compression = CompressS2
	cfg.SegmentBytes = 8 << 10
	cfg.MaxMsgs = 30
	cfg.Discard = DiscardNew
	l, _ := mustOpen(t, cfg)
	msgs := blockMsgs(1, 1, 20, 100)
	inner, block := messageBlock(msgs)
	cases := []struct {
		name         string
		inner, block []byte
		want         error
	}{
		{"a message cut short", inner[:len(inner)-1], s2.Encode(nil, inner[:len(inner)-1]), ErrBadBlock},
		{"a block of other bytes", inner, s2.Encode(nil, inner[1:]), ErrBadBlock},
		{"no messages", nil, s2.Encode(nil, nil), ErrBadBlock},
		{"a message over the segment size", AppendBlockMessage(nil, []byte("s"), nil, make([]byte, 9<<10)), s2.Encode(nil, AppendBlockMessage(nil, []byte("s"), nil, make([]byte, 9<<10))), ErrTooLarge},
	}
	for _, c := range cases {
		if err := l.RoomFor(c.inner, c.block); !errors.Is(err, c.want) {
			t.Fatalf("%s: RoomFor %v, want %v", c.name, err, c.want)
		}
		if _, err := l.AppendBlock(0, c.inner, c.block); !errors.Is(err, c.want) {
			t.Fatalf("%s: AppendBlock %v, want %v", c.name, err, c.want)
		}
	}
	if _, err := l.AppendBlock(5, inner, block); err != nil {
		t.Fatal(err)
	}
	// 20 pending and 20 more would pass MaxMsgs.
	if err := l.RoomFor(inner, block); !errors.Is(err, ErrFull) {
		t.Fatalf("over MaxMsgs: %v", err)
	}
	if _, err := l.AppendBlock(5, inner, block); !errors.Is(err, ErrFull) {
		t.Fatalf("over MaxMsgs: %v", err)
	}
	if err := l.Commit(); err != nil {
		t.Fatal(err)
	}
	for i := range msgs {
		msgs[i].ts = 5
	}
	checkMsgs(t, l, msgs)

	// RoomFor's walk holds until the next commit only: the same slices,
	// changed since, are walked again.
	small := blockMsgs(21, 5, 2, 10)
	inner, block = messageBlock(small)
	if err := l.RoomFor(inner, block); err != nil {
		t.Fatal(err)
	}
	if err := l.Commit(); err != nil {
		t.Fatal(err)
	}
	inner[0] = 0xff // a subject length past the end
	if _, err := l.AppendBlock(5, inner, block); !errors.Is(err, ErrBadBlock) {
		t.Fatalf("a block changed after RoomFor and a commit: %v", err)
	}
}

// TestMessageBlockDamage: a flipped byte in a message block's compressed bytes
// is reported as damage of exactly its messages when the log is opened again.
func TestMessageBlockDamage(t *testing.T) {
	l, _, _ := openCompressed(t)
	before := blockMsgs(1, 10, 30, 200)
	inner, block := messageBlock(before)
	if _, err := l.AppendBlock(10, inner, block); err != nil {
		t.Fatal(err)
	}
	hit := blockMsgs(31, 20, 40, 200)
	inner, block = messageBlock(hit)
	if _, err := l.AppendBlock(20, inner, block); err != nil {
		t.Fatal(err)
	}
	after := blockMsgs(71, 30, 10, 200)
	inner, block = messageBlock(after)
	if _, err := l.AppendBlock(30, inner, block); err != nil {
		t.Fatal(err)
	}
	if err := l.Commit(); err != nil {
		t.Fatal(err)
	}
	offs, lens := blockSpans(t, l.segs[0].logPath)
	if len(offs) != 3 {
		t.Fatalf("%d blocks on disk, want 3", len(offs))
	}
	flipByte(t, l.segs[0].logPath, int64(offs[1]+lens[1]/2))
	l, rep := reopen(t, l)
	if len(rep.Corrupt) != 1 || rep.Corrupt[0].FirstSeq != 31 || rep.Corrupt[0].LastSeq != 70 {
		t.Fatalf("reopen: %+v", rep.Corrupt)
	}
	r := l.NewReader(0)
	var got []uint64
	damaged := 0
	for {
		rec, err := r.Next()
		if errors.Is(err, ErrCorrupt) {
			damaged++
			continue
		}
		if err != nil {
			break
		}
		got = append(got, rec.Seq)
	}
	r.Close()
	if damaged != 1 || len(got) != len(before)+len(after) || got[len(before)] != 71 {
		t.Fatalf("read %d records and %d damaged ranges around the damage", len(got), damaged)
	}
	if _, _, err := l.Read(40, nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Read in the damaged block: %v", err)
	}
}
