package consumer

import "encoding/binary"

// Journal record types: a type byte followed by uvarints.
const (
	RecDelivered   = 'D' // partition, seq, deliveries: the message is pending
	RecAcked       = 'A' // partition, seq: no longer pending
	RecAckedUpTo   = 'L' // partition, seq: nothing up to seq is pending
	RecNext        = 'N' // partition, next: first delivery has passed everything below next
	RecConsumerSeq = 'C' // consumer sequence, redelivered count
	// RecSeek sets a partition's position exactly, forward or back, and forgets
	// its pending messages (Machine.Seek): partition, next.
	RecSeek = 'S'
	// RecApplied closes the records a replicated stream's group applied up to a
	// log index: index. A replica replaying its group's log after a restart skips
	// the entries its journal already holds (State.Applied).
	RecApplied = 'I'
)

// State is the snapshot of a consumer's position.
type State struct {
	ConsumerSeq uint64      `json:"consumer_seq"`
	Redelivered uint64      `json:"redelivered"`
	Parts       []PartState `json:"partitions"`
	// Applied is the last group log index whose records the state holds (a
	// replicated stream's consumer; 0 otherwise).
	Applied uint64 `json:"applied,omitempty"`
}

// PartState is one partition's position.
type PartState struct {
	Next    uint64      `json:"next"`
	Pending [][2]uint64 `json:"pending,omitempty"` // seq, deliveries
}

// AppendRecord appends one journal record.
func AppendRecord(b []byte, typ byte, vals ...uint64) []byte {
	b = append(b, typ)
	for _, v := range vals {
		b = binary.AppendUvarint(b, v)
	}
	return b
}

// Replay applies journal chunks to st in order: each chunk applies whole or not at
// all, and the first malformed one ends the replay. It returns how many chunks
// applied.
func Replay(st *State, chunks [][]byte) int { return replay(st, chunks, len(st.Parts)) }

// ReplayGrowing is Replay for a state whose stream may have gained partitions
// since it was taken (a replicated consumer's, on a replica that applies records
// the leader wrote with more partitions than the replica has opened yet): a
// record may name any partition below parts, and st grows to hold it.
func ReplayGrowing(st *State, chunks [][]byte, parts int) int {
	return replay(st, chunks, max(parts, len(st.Parts)))
}

func replay(st *State, chunks [][]byte, parts int) int {
	pending := make([]map[uint64]uint64, len(st.Parts))
	for i, p := range st.Parts {
		pending[i] = make(map[uint64]uint64, len(p.Pending))
		for _, e := range p.Pending {
			pending[i][e[0]] = e[1]
		}
	}
	n := 0
	for _, recs := range chunks {
		// Checked first, then applied, so a chunk refused halfway leaves no trace.
		named, ok := applyRecords(recs, st, nil, parts)
		if !ok {
			break
		}
		for len(st.Parts) < named {
			st.Parts = append(st.Parts, PartState{})
			pending = append(pending, map[uint64]uint64{})
		}
		applyRecords(recs, st, pending, parts)
		n++
	}
	for i := range st.Parts {
		st.Parts[i].Pending = st.Parts[i].Pending[:0]
		for seq, d := range pending[i] {
			st.Parts[i].Pending = append(st.Parts[i].Pending, [2]uint64{seq, d})
		}
	}
	return n
}

// applyRecords applies the records of one chunk; with pending nil it only checks
// that every record is well formed and names a partition below parts, and
// returns how many partitions the records name (the highest one + 1).
func applyRecords(b []byte, st *State, pending []map[uint64]uint64, parts int) (named int, ok bool) {
	next := func(n int) ([3]uint64, bool) {
		var v [3]uint64
		for i := 0; i < n; i++ {
			x, k := binary.Uvarint(b)
			if k <= 0 {
				return v, false
			}
			v[i] = x
			b = b[k:]
		}
		return v, true
	}
	for len(b) > 0 {
		typ := b[0]
		b = b[1:]
		var v [3]uint64
		var ok bool
		switch typ {
		case RecDelivered:
			v, ok = next(3)
		case RecAcked, RecAckedUpTo, RecNext, RecConsumerSeq, RecSeek:
			v, ok = next(2)
		case RecApplied:
			v, ok = next(1)
		default:
			return named, false
		}
		if !ok {
			return named, false
		}
		if typ == RecApplied {
			if pending != nil {
				st.Applied = max(st.Applied, v[0])
			}
			continue
		}
		if typ == RecConsumerSeq {
			if pending != nil {
				st.ConsumerSeq, st.Redelivered = max(st.ConsumerSeq, v[0]), max(st.Redelivered, v[1])
			}
			continue
		}
		if v[0] >= uint64(parts) {
			return named, false
		}
		named = max(named, int(v[0])+1)
		if pending == nil {
			continue
		}
		p := int(v[0])
		switch typ {
		case RecDelivered:
			pending[p][v[1]] = v[2]
			st.Parts[p].Next = max(st.Parts[p].Next, v[1]+1)
		case RecAcked:
			delete(pending[p], v[1])
		case RecAckedUpTo:
			for seq := range pending[p] {
				if seq <= v[1] {
					delete(pending[p], seq)
				}
			}
		case RecNext:
			st.Parts[p].Next = max(st.Parts[p].Next, v[1])
		case RecSeek:
			st.Parts[p].Next = max(v[1], 1)
			clear(pending[p])
		}
	}
	return named, true
}
