package streams

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/stream"
)

// fetchPrefix is the subject a lagging replica asks the stream's leader for the
// records it misses on: "$TERN.SYS.STREAM.FETCH.<stream>", the body the first
// sequence wanted in decimal, the answer as stream.ReadRecords makes it (or, when
// the leader cannot read, a text starting "error: ").
const fetchPrefix = "$TERN.SYS.STREAM.FETCH."

// fetchReaders bounds the fetches a leader answers at once.
const fetchReaders = 4

// fetcher is how a replica of the named stream catches up: from its group's leader.
func (s *Service) fetcher(name string) stream.Fetcher {
	return func(ctx context.Context, from uint64) ([]byte, error) {
		b, err := s.cfg.Node.Request(ctx, fetchPrefix+name, strconv.AppendUint(nil, from, 10), stream.FetchTimeout)
		if err != nil {
			return nil, err
		}
		if msg, ok := strings.CutPrefix(string(b), "error: "); ok {
			return nil, fmt.Errorf("stream %q: the leader could not read from %d: %s", name, from, msg)
		}
		return b, nil
	}
}

// fetchSink answers fetches for one stream this node leads, reading on a goroutine:
// the sink runs on a route's reader.
type fetchSink struct {
	s   *Service
	str *stream.Stream
}

func (f fetchSink) Deliver(_ *broker.Subscription, m *broker.Message) bool {
	if len(m.Reply) == 0 {
		return true
	}
	from, err := strconv.ParseUint(string(m.Payload), 10, 64)
	reply := string(m.Reply)
	select {
	case f.s.readers <- struct{}{}:
	default:
		return false // too many at once: the replica asks again
	}
	f.s.wg.Add(1)
	go func() {
		defer func() { <-f.s.readers; f.s.wg.Done() }()
		var out []byte
		if err != nil {
			out = []byte("error: the body is not a sequence")
		} else if out, err = f.str.ReadRecords(from, stream.FetchBytes); err != nil {
			out = []byte("error: " + err.Error())
		}
		var p broker.Batch
		f.s.cfg.Broker.Publish(&p, &broker.Message{Subject: []byte(reply), Payload: out})
		p.Flush()
	}()
	return true
}

func (fetchSink) Flush() {}
