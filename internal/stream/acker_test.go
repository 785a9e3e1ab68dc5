package stream

import (
	"fmt"
	"strconv"
	"sync"
)

// InProcessAcks, for the tests of this package and of stream_test, is a
// broker.Acker that writes down every answer: per tag, the sequences
// acknowledged ("7", "1 dup", or "err <code>"), and the calls. Lock it to read.
type InProcessAcks struct {
	sync.Mutex
	Seqs  map[uint64][]string
	Calls int
}

func (a *InProcessAcks) StreamAck(tag uint64, part int, seq uint64, n int, dup bool, code int, err string) {
	a.Lock()
	defer a.Unlock()
	if a.Seqs == nil {
		a.Seqs = map[uint64][]string{}
	}
	a.Calls++
	if code != 0 {
		a.Seqs[tag] = append(a.Seqs[tag], fmt.Sprintf("err %d", code))
		return
	}
	for i := range n {
		s := strconv.FormatUint(seq+uint64(i), 10)
		if dup {
			s += " dup"
		}
		a.Seqs[tag] = append(a.Seqs[tag], s)
	}
}

// Count is how many messages have been answered.
func (a *InProcessAcks) Count() int {
	a.Lock()
	defer a.Unlock()
	n := 0
	for _, s := range a.Seqs {
		n += len(s)
	}
	return n
}
