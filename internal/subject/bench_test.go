package subject

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
)

// benchSublist holds a thousand subscriptions shaped like a sensor fleet's: one
// literal per device, some wildcards and a few queue groups.
func benchSublist(b *testing.B) *Sublist[int] {
	b.Helper()
	s := NewSublist[int]()
	for i := range 1000 {
		if err := s.Insert(fmt.Sprintf("sensors.k%d.temp", i), "", i); err != nil {
			b.Fatal(err)
		}
	}
	for i, f := range []string{"sensors.*.temp", "sensors.>", "*.k1.*", ">"} {
		if err := s.Insert(f, "", -i); err != nil {
			b.Fatal(err)
		}
		if err := s.Insert(f, fmt.Sprintf("g%d", i%2), 10_000+i); err != nil {
			b.Fatal(err)
		}
	}
	return s
}

func BenchmarkMatchCached(b *testing.B) {
	s := benchSublist(b)
	subj := []byte("sensors.k1.temp")
	s.Match(subj)
	b.ReportAllocs()
	for b.Loop() {
		s.Match(subj)
	}
}

// BenchmarkMatchMemo is BenchmarkMatchCached for a publisher sending runs of one
// subject through its Memo.
func BenchmarkMatchMemo(b *testing.B) {
	s := benchSublist(b)
	subj := []byte("sensors.k1.temp")
	var m Memo[int]
	s.MatchMemo(&m, subj)
	b.ReportAllocs()
	for b.Loop() {
		s.MatchMemo(&m, subj)
	}
}

// BenchmarkMatchCachedParallel publishes from every P, each to its own few subjects.
func BenchmarkMatchCachedParallel(b *testing.B) {
	s := benchSublist(b)
	subjects := make([][]byte, 256)
	for i := range subjects {
		subjects[i] = fmt.Appendf(nil, "sensors.k%d.temp", i)
		s.Match(subjects[i])
	}
	var next atomic.Uint32
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		base := int(next.Add(17))
		for i := 0; pb.Next(); i++ {
			s.Match(subjects[(base+i%4)%len(subjects)])
		}
	})
}

// BenchmarkMatchMiss cycles through far more subjects than the cache holds, so
// nearly every Match walks the trie, allocates a result and evicts.
func BenchmarkMatchMiss(b *testing.B) {
	s := benchSublist(b)
	subjects := make([][]byte, 16*cacheSize)
	for i := range subjects {
		subjects[i] = fmt.Appendf(nil, "sensors.k%d.temp", i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		s.Match(subjects[i%len(subjects)])
		i++
	}
}

// BenchmarkMatchUniqueReplies matches subjects each seen once, as a stream's
// acknowledgements to a client's per-publish reply subjects are: one inbox
// wildcard subscription beside a fleet's literal ones.
func BenchmarkMatchUniqueReplies(b *testing.B) {
	s := NewSublist[int]()
	for i := range 1000 {
		if err := s.Insert(fmt.Sprintf("sensors.k%d.temp", i), "", i); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Insert("_INBOX.Qx7pKm2.*", "", 5); err != nil {
		b.Fatal(err)
	}
	subj := []byte("_INBOX.Qx7pKm2.")
	n := len(subj)
	b.ReportAllocs()
	i := uint64(0)
	for b.Loop() {
		subj = strconv.AppendUint(subj[:n], i, 36)
		if r := s.Match(subj); len(r.Plain) == 0 {
			b.Fatal("no match")
		}
		i++
	}
}

func BenchmarkValidatePublish(b *testing.B) {
	subj := []byte("sensors.k1.temp.celsius")
	b.ReportAllocs()
	b.SetBytes(int64(len(subj)))
	for b.Loop() {
		if ValidatePublish(subj) != nil {
			b.Fatal("invalid")
		}
	}
}

func BenchmarkValidatePublishLong(b *testing.B) {
	subj := []byte("org.acme.region-eu-west-1.site-0042.building-7.floor-3.room-311.sensors.hvac.k1.temperature.celsius")
	b.ReportAllocs()
	b.SetBytes(int64(len(subj)))
	for b.Loop() {
		if ValidatePublish(subj) != nil {
			b.Fatal("invalid")
		}
	}
}

func BenchmarkValidateFilter(b *testing.B) {
	subj := []byte("sensors.*.temp.>")
	b.ReportAllocs()
	for b.Loop() {
		if ValidateFilter(subj) != nil {
			b.Fatal("invalid")
		}
	}
}

// BenchmarkInsertRemove inserts and removes one subscription against a full cache,
// so each change also updates the cached results it affects.
func BenchmarkInsertRemove(b *testing.B) {
	for _, c := range []struct{ name, filter, queue string }{
		{"literal", "sensors.k1.temp", ""},
		{"wildcard", "sensors.*.temp", ""},
		{"queue", "sensors.>", "workers"},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := benchSublist(b)
			for i := range cacheSize {
				s.Match(fmt.Appendf(nil, "sensors.k%d.temp", i))
			}
			s.Match([]byte("sensors.k1.temp")) // cached whatever was evicted above
			affected := 0
			for i := range s.cache.shards {
				for subj := range s.cache.shards[i].m {
					if Matches(c.filter, subj) {
						affected++
					}
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := s.Insert(c.filter, c.queue, 99); err != nil {
					b.Fatal(err)
				}
				if err := s.Remove(c.filter, c.queue, 99); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(affected), "cached-matches")
		})
	}
}
