package stream

import (
	"sort"
	"strings"
	"time"

	"github.com/tern-mq/tern/internal/header"
	"github.com/tern-mq/tern/internal/streamapi"
)

// pubIDs reads a published message's first message id (empty: none) and the
// last message id it expects stored before it, in one pass over its headers.
func pubIDs(hdr header.Block) (id, expected string, hasExpected bool) {
	id, _, expected, hasExpected = hdr.LookupPair(streamapi.HeaderMsgID, streamapi.HeaderExpectedLastMsgID)
	return id, expected, hasExpected
}

// idCheck is the duplicate check's look at a message about to be stored: its
// ids, its message id parsed, and where that id is stored already (dup).
type idCheck struct {
	id          msgID // zero: the message has none
	expected    string
	hasExpected bool
	part        int
	seq         uint64
	dup         bool
}

// check reads a message's ids into c and looks its message id up. The one node's
// writer and a replicated partition's machine decide alike with it: a
// duplicate is answered with where it is stored; else, after wrongLast, the
// message is stored and its id added.
func (d *dedupWindow) check(hdr header.Block, now int64, c *idCheck) {
	var idText string
	idText, c.expected, c.hasExpected = pubIDs(hdr)
	if idText == "" {
		c.id, c.dup = msgID{}, false
		return
	}
	c.id = parseMsgID(idText)
	c.part, c.seq, c.dup = d.lookup(c.id, now)
}

// wrongLast reports whether c's message expects another last message id than
// the one stored, with the refusal's code and text.
func (d *dedupWindow) wrongLast(c *idCheck, now int64) (wrong bool, code int, text string) {
	if !c.hasExpected {
		if id := &c.id; id.numbered && id.n > 0 && strings.HasSuffix(id.prefix, streamapi.SequenceMark) {
			// A sequence's id follows the one before it, stored already.
			if last, known := d.highest(id.prefix, now); !known || last != id.n-1 {
				return true, streamapi.CodeWrongLastMsgID, "wrong last message id: " + id.id + " does not follow the last one stored of its sequence"
			}
		}
		return false, 0, ""
	}
	want, ifAny := strings.CutPrefix(c.expected, streamapi.ExpectedLastIfAny)
	if prefix, n, ok := splitNumbered(want); ok {
		last, known := d.highest(prefix, now)
		if known && last == n || !known && ifAny {
			return false, 0, ""
		}
	}
	return true, streamapi.CodeWrongLastMsgID, "wrong last message id: " + want + " is not the last one stored"
}

// dedupWindow remembers the message ids a stream stored within its duplicate window,
// so that a producer retrying a publish whose ack it lost does not store it twice.
// It belongs to the stream's writer (or, replicated, to the partition's machine).
//
// Producers that number their messages — "<prefix><n>" with n a decimal counter,
// such as Kafka's idempotent producers' "kafka:<id>:<epoch>:<partition>:<seq>" —
// are kept as runs: consecutive numbers stored at consecutive sequences of one
// partition are one run, and each id costs only its time (8 bytes) instead of a
// map entry and a string. Any other id, and a numbered id that comes out of order,
// is a map entry. Both answer exactly as a set of (id, time) would: an id is a
// duplicate while it was stored less than the window before the lookup, so every
// replica that applies the same entries decides alike.
type dedupWindow struct {
	window time.Duration

	ids   map[string]dedupEntry
	order []dedupAge // insertion order, for expiry
	head  int

	numbered  map[string]*idRuns // by prefix
	last      *idRuns            // the list of the latest numbered id, looked up first
	nextSweep int64              // when lists not looked up lately are expired
}

type dedupEntry struct {
	part int
	seq  uint64
	at   int64
}

type dedupAge struct {
	id string
	at int64
}

// idRuns is what is stored of one prefix's numbered ids: runs in ascending order
// of their numbers, and the time of each id in the order they were added, as
// spans of ids added at one time (the ids of one batch share its time). Each id
// has a position, counted from the first added; a run's ids have consecutive
// positions, and an id removed from the middle of a run leaves its position and
// time behind, skipped when it expires.
type idRuns struct {
	prefix   string
	runs     []idRun
	spans    []timeSpan // spans[spanHead:] are the times of positions headPos to end-1
	spanHead int
	headPos  int // the position of spans[spanHead]'s first id
	end      int // the position of the next id added
}

// idRun is the ids prefix+first .. prefix+last, stored at partition part from
// sequence seq on; prefix+first has position at.
type idRun struct {
	first, last uint64
	part        int
	seq         uint64
	at          int
}

// timeSpan is n ids added one after another at time at.
type timeSpan struct {
	at int64
	n  int
}

// maxIDDigits bounds the counter of a numbered id, so that it fits in a uint64.
const maxIDDigits = 19

func newDedupWindow(window time.Duration) *dedupWindow {
	return &dedupWindow{window: window, ids: make(map[string]dedupEntry), numbered: make(map[string]*idRuns)}
}

func (d *dedupWindow) setWindow(w time.Duration) { d.window = w }

// splitNumbered splits "<prefix><n>" into its prefix and n; ok is false for an id
// that does not end in a decimal counter without leading zeros.
func splitNumbered(id string) (prefix string, n uint64, ok bool) {
	i := len(id)
	for i > 0 && id[i-1] >= '0' && id[i-1] <= '9' {
		i--
	}
	digits := len(id) - i
	if digits == 0 || digits > maxIDDigits || (digits > 1 && id[i] == '0') {
		return "", 0, false
	}
	for j := i; j < len(id); j++ {
		n = n*10 + uint64(id[j]-'0')
	}
	return id[:i], n, true
}

// msgID is a message id as the window reads it: split once into its prefix and
// counter when it is numbered, for the lookup and the add that follows it.
type msgID struct {
	id       string
	prefix   string
	n        uint64
	numbered bool
}

func parseMsgID(id string) msgID {
	m := msgID{id: id}
	m.prefix, m.n, m.numbered = splitNumbered(id)
	return m
}

// lookup reports whether id was stored within the window, and where.
func (d *dedupWindow) lookup(id msgID, now int64) (part int, seq uint64, dup bool) {
	d.expire(now)
	if id.numbered {
		if l := d.list(id.prefix); l != nil {
			l.expire(now - int64(d.window))
			if r := l.find(id.n); r != nil {
				return r.part, r.seq + (id.n - r.first), true
			}
		}
	}
	if len(d.ids) == 0 {
		return 0, 0, false
	}
	e, ok := d.ids[id.id]
	if !ok {
		return 0, 0, false
	}
	return e.part, e.seq, true
}

// highest returns the highest number stored with prefix within the window; known
// is false when none is.
func (d *dedupWindow) highest(prefix string, now int64) (n uint64, known bool) {
	l := d.list(prefix)
	if l == nil {
		return 0, false
	}
	l.expire(now - int64(d.window))
	if len(l.runs) == 0 {
		return 0, false
	}
	return l.runs[len(l.runs)-1].last, true
}

// list returns prefix's runs, nil when none are kept.
func (d *dedupWindow) list(prefix string) *idRuns {
	if d.last != nil && d.last.prefix == prefix {
		return d.last
	}
	l := d.numbered[prefix]
	if l != nil {
		d.last = l
	}
	return l
}

// add records id, not stored within the window (lookup said so), as stored at
// part, seq at time at. id may point into a buffer that is reused: what is kept
// is copied.
func (d *dedupWindow) add(id msgID, part int, seq uint64, at int64) {
	if id.numbered {
		l := d.list(id.prefix)
		if l == nil {
			l = &idRuns{prefix: string([]byte(id.prefix))}
			d.numbered[l.prefix] = l
			d.last = l
		}
		if l.add(id.n, part, seq, at) {
			return
		}
	}
	kept := string([]byte(id.id))
	d.ids[kept] = dedupEntry{part, seq, at}
	d.order = append(d.order, dedupAge{kept, at})
}

// remove forgets id, stored by the last commit, which failed.
func (d *dedupWindow) remove(id msgID) {
	if id.numbered {
		if l := d.list(id.prefix); l != nil && l.remove(id.n) {
			return
		}
	}
	delete(d.ids, id.id)
}

// expire forgets the map's ids older than the window, and now and then the
// runs of prefixes not looked up lately.
func (d *dedupWindow) expire(now int64) {
	cutoff := now - int64(d.window)
	for d.head < len(d.order) && d.order[d.head].at < cutoff {
		a := d.order[d.head]
		if e, ok := d.ids[a.id]; ok && e.at == a.at {
			delete(d.ids, a.id)
		}
		d.order[d.head] = dedupAge{}
		d.head++
	}
	// Compact once the expired prefix dominates, so memory follows the window.
	if d.head > 1024 && d.head*2 > len(d.order) {
		n := copy(d.order, d.order[d.head:])
		clear(d.order[n:])
		d.order = d.order[:n]
		d.head = 0
	}
	if now < d.nextSweep {
		return
	}
	d.nextSweep = now + max(int64(d.window)/4, int64(time.Second))
	for prefix, l := range d.numbered {
		if l.expire(cutoff); len(l.runs) == 0 {
			delete(d.numbered, prefix)
			if d.last == l {
				d.last = nil
			}
		}
	}
}

func (d *dedupWindow) len() int {
	n := len(d.ids)
	for _, l := range d.numbered {
		for _, r := range l.runs {
			n += int(r.last - r.first + 1)
		}
	}
	return n
}

// find returns the run holding n, nil when none does.
func (l *idRuns) find(n uint64) *idRun {
	k := len(l.runs)
	if k == 0 || n > l.runs[k-1].last {
		return nil // the common case: a number not seen yet
	}
	i := sort.Search(k, func(i int) bool { return l.runs[i].last >= n })
	if i < k && l.runs[i].first <= n {
		return &l.runs[i]
	}
	return nil
}

// add appends n, stored at part, seq; false when n is not above every number kept
// (out of order: the caller keeps it in its map).
func (l *idRuns) add(n uint64, part int, seq uint64, at int64) bool {
	k := len(l.runs)
	if k > 0 {
		r := &l.runs[k-1]
		if n <= r.last {
			return false
		}
		if n == r.last+1 && part == r.part && seq == r.seq+(r.last-r.first)+1 && r.at+int(r.last-r.first)+1 == l.end {
			r.last = n
			l.addTime(at)
			return true
		}
	}
	l.runs = append(l.runs, idRun{first: n, last: n, part: part, seq: seq, at: l.end})
	l.addTime(at)
	return true
}

// addTime gives the next position time at.
func (l *idRuns) addTime(at int64) {
	if k := len(l.spans); k > l.spanHead && l.spans[k-1].at == at {
		l.spans[k-1].n++
	} else {
		l.spans = append(l.spans, timeSpan{at: at, n: 1})
	}
	l.end++
}

// remove forgets n; false when no run holds it.
func (l *idRuns) remove(n uint64) bool {
	r := l.find(n)
	if r == nil {
		return false
	}
	i := r.at + int(n-r.first)
	switch {
	case r.first == r.last:
		l.runs = append(l.runs[:l.indexOf(r)], l.runs[l.indexOf(r)+1:]...)
	case n == r.last:
		r.last--
	case n == r.first:
		r.first++
		r.seq++
		r.at++
	default:
		// Split: the time of n stays behind, skipped when it expires.
		tail := idRun{first: n + 1, last: r.last, part: r.part, seq: r.seq + (n + 1 - r.first), at: i + 1}
		r.last = n - 1
		j := l.indexOf(r) + 1
		l.runs = append(l.runs, idRun{})
		copy(l.runs[j+1:], l.runs[j:])
		l.runs[j] = tail
	}
	if i == l.end-1 {
		l.end--
		last := &l.spans[len(l.spans)-1]
		if last.n--; last.n == 0 {
			l.spans = l.spans[:len(l.spans)-1]
		}
	}
	return true
}

func (l *idRuns) indexOf(r *idRun) int {
	for i := range l.runs {
		if &l.runs[i] == r {
			return i
		}
	}
	return -1
}

// expire forgets the ids stored before cutoff, oldest first: a span at a time,
// up to the first span not that old.
func (l *idRuns) expire(cutoff int64) {
	for l.spanHead < len(l.spans) && l.spans[l.spanHead].at < cutoff {
		to := l.headPos + l.spans[l.spanHead].n
		for len(l.runs) > 0 && l.runs[0].at < to {
			r := &l.runs[0]
			k := uint64(to - r.at)
			if k > r.last-r.first {
				l.runs = l.runs[1:]
				continue
			}
			r.first += k
			r.seq += k
			r.at = to
		}
		l.headPos = to
		l.spanHead++
	}
	if len(l.runs) == 0 {
		l.runs, l.spans, l.spanHead, l.headPos = l.runs[:0], l.spans[:0], 0, l.end
		return
	}
	// Compact once the expired part dominates, so memory follows the window.
	if l.spanHead > 1024 && l.spanHead*2 > len(l.spans) {
		n := copy(l.spans, l.spans[l.spanHead:])
		l.spans = l.spans[:n]
		l.spanHead = 0
	}
}
