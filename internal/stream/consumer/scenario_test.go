package consumer

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/tern-mq/tern/internal/streamapi"
	"github.com/tern-mq/tern/internal/subject"
)

// memLog is a stream held in memory: the machine's Source in scenarios, the way
// raft's tests read a MemoryStorage.
type memLog struct {
	parts  [][]Msg // message seq n of partition p at parts[p][n-1]; deleted ones have Seq 0
	filter string
}

func (l *memLog) Next(part int, seq uint64) (Msg, uint64, bool) {
	msgs := l.parts[part]
	for s := max(seq, 1); s <= uint64(len(msgs)); s++ {
		m := msgs[s-1]
		if m.Seq == 0 {
			continue
		}
		if l.filter != "" && !subject.Matches(l.filter, string(m.Subject)) {
			continue
		}
		return m, 0, true
	}
	return Msg{}, uint64(len(msgs)) + 1, false
}

func (l *memLog) Read(part int, seq uint64) (Msg, bool) {
	msgs := l.parts[part]
	if seq == 0 || seq > uint64(len(msgs)) || msgs[seq-1].Seq == 0 {
		return Msg{}, false
	}
	return msgs[seq-1], true
}

// scenario holds one scenario file's machine, log and virtual clock.
type scenario struct {
	m     *Machine
	log   *memLog
	start time.Time
	now   time.Time
	// journal is every record the machine wrote, for "replay".
	journal []byte
}

// TestScenarios runs testdata/*.txt: each command is an event at the virtual time
// (advanced only by "advance"), and below it what the machine asked for.
func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		sc := &scenario{start: time.Unix(1_000_000, 0)}
		sc.now = sc.start
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return sc.run(t, d)
		})
	})
}

func (sc *scenario) run(t *testing.T, d *datadriven.TestData) string {
	var out strings.Builder
	switch d.Cmd {
	case "new":
		cfg := Config{Partitions: 1}
		var backlog [][]uint64
		var st State
		sc.log = &memLog{}
		for _, a := range d.CmdArgs {
			v := ""
			if len(a.Vals) > 0 {
				v = a.Vals[0]
			}
			switch a.Key {
			case "partitions":
				cfg.Partitions = atoi(t, v)
			case "ack":
				cfg.AckPolicy = streamapi.AckPolicy(v)
			case "ack-wait":
				cfg.AckWait = dur(t, v)
			case "backoff":
				for _, b := range a.Vals {
					cfg.Backoff = append(cfg.Backoff, dur(t, b))
				}
			case "max-deliver":
				cfg.MaxDeliver = atoi(t, v)
			case "max-ack-pending":
				cfg.MaxAckPending = atoi(t, v)
			case "max-waiting":
				cfg.MaxWaiting = atoi(t, v)
			case "push":
				cfg.Push = true
			case "ephemeral":
				cfg.Ephemeral = true
			case "inactive":
				cfg.Inactive = dur(t, v)
			case "member-timeout":
				cfg.MemberTimeout = dur(t, v)
			case "journal":
				cfg.Journal = true
			case "filter":
				sc.log.filter = v
			case "start":
				st.Parts = []PartState{{Next: uint64(atoi(t, v))}}
			case "backlog":
				backlog = [][]uint64{nil}
				for _, s := range a.Vals {
					backlog[0] = append(backlog[0], uint64(atoi(t, s)))
				}
			case "pending":
				// pending=(seq:deliveries,...) on partition 0: a restored position
				st.Parts = []PartState{{Next: 1}}
				for _, p := range a.Vals {
					seq, n, _ := strings.Cut(p, ":")
					st.Parts[0].Pending = append(st.Parts[0].Pending, [2]uint64{uint64(atoi(t, seq)), uint64(atoi(t, n))})
					st.Parts[0].Next = max(st.Parts[0].Next, uint64(atoi(t, seq))+1)
				}
			default:
				t.Fatalf("%s: new: unknown argument %q", d.Pos, a.Key)
			}
		}
		sc.log.parts = make([][]Msg, cfg.Partitions)
		sc.m = New(cfg, st, backlog, sc.now)
	case "publish":
		// publish [part=P] subject=S [n=N] [size=B]
		part, subj, n, size := 0, "orders.new", 1, 0
		d.MaybeScanArgs(t, "part", &part)
		d.MaybeScanArgs(t, "subject", &subj)
		d.MaybeScanArgs(t, "n", &n)
		d.MaybeScanArgs(t, "size", &size)
		for i := 0; i < n; i++ {
			seq := uint64(len(sc.log.parts[part]) + 1)
			sc.log.parts[part] = append(sc.log.parts[part], Msg{Seq: seq, Subject: []byte(subj), Payload: make([]byte, size), Time: sc.now.UnixNano()})
		}
		return fmt.Sprintf("partition %d: last seq %d", part, len(sc.log.parts[part]))
	case "remove":
		// remove [part=P] seq=N: the message is gone from the stream (purge, limits)
		part, seq := 0, 0
		d.MaybeScanArgs(t, "part", &part)
		d.ScanArgs(t, "seq", &seq)
		sc.log.parts[part][seq-1].Seq = 0
		return "ok"
	case "advance":
		// advance DURATION: the clock moves and the machine ticks.
		sc.now = sc.now.Add(dur(t, d.CmdArgs[0].Key))
		sc.m.Tick(sc.now)
		fmt.Fprintf(&out, "t=%s\n", sc.now.Sub(sc.start))
	case "tick":
		sc.m.Tick(sc.now)
	case "interest":
		sc.m.SetInterest(sc.now, d.CmdArgs[0].Key == "on")
	case "pull":
		// pull reply=R [batch=N] [expires=D] [no-wait] [member=M] [max-bytes=B]
		var reply, member, expires string
		var req streamapi.PullRequest
		d.ScanArgs(t, "reply", &reply)
		d.MaybeScanArgs(t, "batch", &req.Batch)
		d.MaybeScanArgs(t, "max-bytes", &req.MaxBytes)
		d.MaybeScanArgs(t, "member", &member)
		req.Member = member
		if d.MaybeScanArgs(t, "expires", &expires); expires != "" {
			req.Expires = streamapi.Duration(dur(t, expires))
		}
		req.NoWait = d.HasArg("no-wait")
		sc.m.Pull(sc.now, []byte(reply), req)
	case "ack", "nak", "progress", "term":
		// ack [part=P] seq=N [delay=D] [reason=R]
		part, seq := 0, 0
		var delay, reason string
		d.MaybeScanArgs(t, "part", &part)
		d.ScanArgs(t, "seq", &seq)
		d.MaybeScanArgs(t, "delay", &delay)
		d.MaybeScanArgs(t, "reason", &reason)
		kind := map[string]streamapi.AckKind{"ack": streamapi.Ack, "nak": streamapi.Nak, "progress": streamapi.InProgress, "term": streamapi.Term}[d.Cmd]
		var dl time.Duration
		if delay != "" {
			dl = dur(t, delay)
		}
		sc.m.Ack(sc.now, Key{part, uint64(seq)}, kind, dl, []byte(reason))
	case "deliver":
		// deliver [refuse]: take every delivery the machine offers now; with refuse,
		// nobody takes them (the puller went away).
		for {
			dv, ok := sc.m.Next(sc.now, sc.log)
			if !ok {
				break
			}
			to := "push"
			if dv.Reply != nil {
				to = string(dv.Reply)
			}
			re := ""
			if dv.Redelivery {
				re = " redelivery"
			}
			fmt.Fprintf(&out, "deliver %d/%d %s to %s (delivery %d, cseq %d%s)\n", dv.Key.Part, dv.Key.Seq, dv.Msg.Subject, to, dv.Deliveries, dv.ConsumerSeq, re)
			if d.HasArg("refuse") {
				sc.m.NotTaken(dv)
				out.WriteString("  not taken\n")
			}
		}
	case "purge":
		// purge [part=P] first=N: the partition now starts at N
		part, first := 0, 0
		d.MaybeScanArgs(t, "part", &part)
		d.ScanArgs(t, "first", &first)
		sc.m.Purged(part, uint64(first))
	case "seek":
		// seek [part=P] next=N: the position is set from outside (a Kafka commit)
		part, next := 0, 0
		d.MaybeScanArgs(t, "part", &part)
		d.ScanArgs(t, "next", &next)
		sc.m.Seek(part, uint64(next))
	case "replay":
		// replay: the state a restart rebuilds from the snapshot taken at "new"
		// and every journal record printed since, compared with the machine's own.
		st := State{Parts: make([]PartState, len(sc.m.parts))}
		Replay(&st, [][]byte{sc.journal})
		for i, p := range st.Parts {
			fmt.Fprintf(&out, "partition %d: next %d pending %v\n", i, p.Next, sortedPending(p.Pending))
		}
		return out.String()
	case "close":
		sc.m.Close()
	case "state":
		st := sc.m.State()
		fmt.Fprintf(&out, "cseq %d redelivered %d ack-pending %d waiting %d\n", st.ConsumerSeq, st.Redelivered, sc.m.NumAckPending(), sc.m.NumWaiting())
		for i, p := range st.Parts {
			fmt.Fprintf(&out, "partition %d: next %d pending %v owner %q\n", i, p.Next, p.Pending, sc.m.Owner(i))
		}
		return out.String()
	default:
		t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	}
	sc.ready(&out)
	if out.Len() == 0 {
		return "ok"
	}
	return out.String()
}

// ready prints the machine's Ready and advances it.
func (sc *scenario) ready(out *strings.Builder) {
	rd := sc.m.Ready()
	for _, s := range rd.Statuses {
		code := s.Code
		if code == "" {
			code = "dropped"
		}
		fmt.Fprintf(out, "status %s %s %s\n", s.Reply, code, s.Description)
	}
	for _, dl := range rd.DeadLetters {
		fmt.Fprintf(out, "dead letter %d/%d after %d deliveries: %s\n", dl.Key.Part, dl.Key.Seq, dl.Deliveries, dl.Reason)
	}
	if len(rd.Retired) > 0 {
		out.WriteString("retired")
		for _, k := range rd.Retired {
			fmt.Fprintf(out, " %d/%d", k.Part, k.Seq)
		}
		out.WriteString("\n")
	}
	if len(rd.Journal) > 0 {
		sc.journal = append(sc.journal, rd.Journal...)
		fmt.Fprintf(out, "journal %s\n", decodeJournal(rd.Journal))
	}
	if rd.Members != nil {
		fmt.Fprintf(out, "members %v\n", rd.Members)
	}
	if rd.Remove {
		out.WriteString("remove\n")
	}
	if !rd.Deadline.IsZero() {
		fmt.Fprintf(out, "next tick at t=%s\n", rd.Deadline.Sub(sc.start))
	}
	sc.m.Advance()
}

// decodeJournal prints records as TYPE(args...).
func decodeJournal(b []byte) string {
	var recs []string
	for len(b) > 0 {
		typ := b[0]
		b = b[1:]
		n := 2
		if typ == RecDelivered {
			n = 3
		}
		var vals []string
		for i := 0; i < n; i++ {
			v, k := binary.Uvarint(b)
			b = b[k:]
			vals = append(vals, strconv.FormatUint(v, 10))
		}
		recs = append(recs, string(typ)+"("+strings.Join(vals, ",")+")")
	}
	return strings.Join(recs, " ")
}

func sortedPending(p [][2]uint64) [][2]uint64 {
	slices.SortFunc(p, func(a, b [2]uint64) int { return cmp.Compare(a[0], b[0]) })
	return p
}

func atoi(t *testing.T, s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func dur(t *testing.T, s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
