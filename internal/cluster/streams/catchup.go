package streams

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/stream"
)

// fetchPrefix is the subject a lagging replica asks the stream's leader for the
// records it misses on: "$TERN.SYS.STREAM.FETCH.<stream>", the body the first
// sequence wanted in decimal, then for a partition other than 0 a space and the
// partition; the answer as stream.ReadRecords makes it (or, when the leader cannot
// read, a text starting "error: ").
const fetchPrefix = "$TERN.SYS.STREAM.FETCH."

// fetchReaders bounds the fetches a leader answers at once.
const fetchReaders = 4

// fetcher is how a replica of a partition of the named stream catches up: from the
// stream's leader.
func (s *Service) fetcher(name string) func(part int) stream.Fetcher {
	return func(part int) stream.Fetcher {
		return func(ctx context.Context, from uint64) ([]byte, error) {
			body := strconv.AppendUint(nil, from, 10)
			if part > 0 {
				body = strconv.AppendInt(append(body, ' '), int64(part), 10)
			}
			b, err := s.cfg.Node.Request(ctx, fetchPrefix+name, body, stream.FetchTimeout)
			if err != nil {
				return nil, err
			}
			if msg, ok := strings.CutPrefix(string(b), "error: "); ok {
				return nil, fmt.Errorf("stream %q: partition %d: the leader could not read from %d: %s", name, part, from, msg)
			}
			return b, nil
		}
	}
}

// parseFetch reads a fetch's body: the first sequence wanted, then the partition
// if not 0.
func parseFetch(body []byte) (part int, from uint64, err error) {
	seq, p, hasPart := strings.Cut(string(body), " ")
	if from, err = strconv.ParseUint(seq, 10, 64); err != nil {
		return 0, 0, errors.New("the body does not start with a sequence")
	}
	if hasPart {
		if part, err = strconv.Atoi(p); err != nil || part < 0 {
			return 0, 0, errors.New("the partition is not a number")
		}
	}
	return part, from, nil
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
	part, from, err := parseFetch(m.Payload)
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
			out = []byte("error: " + err.Error())
		} else if out, err = f.str.ReadRecords(part, from, stream.FetchBytes); err != nil {
			out = []byte("error: " + err.Error())
		}
		var p broker.Batch
		f.s.cfg.Broker.Publish(&p, &broker.Message{Subject: []byte(reply), Payload: out})
		p.Flush()
	}()
	return true
}

func (fetchSink) Flush() {}
