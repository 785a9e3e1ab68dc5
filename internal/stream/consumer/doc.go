// Package consumer is the logic of a stream consumer as a pure, deterministic state
// machine: its position in each partition, the messages delivered and not yet
// acknowledged, the redelivery schedule and backoff, max deliveries and
// dead-lettering, pull requests waiting with their deadlines, push flow control (max
// ack pending) and consumer-group assignment.
//
// The machine does no I/O and reads no clock: events come in with the time they
// happen, and what the machine wants done comes out. Reading the stream's messages
// goes through a Source the caller provides, the way go.etcd.io/raft reads its log
// through Storage. Given the same events, times and messages, two machines end in the
// same state — which is what lets a replicated stream apply one log of consumer
// events on every replica.
//
// # The caller's loop
//
// The caller (internal/stream's Consumer) owns the lock, the clock, the files and
// the broker. Acks and pull requests arrive on publishers' goroutines and only change
// state under the lock:
//
//	mu.Lock()
//	m.Ack(now, key, kind, delay, reason)   // or m.Pull(now, req)
//	mu.Unlock()
//	wakeDeliveryLoop()
//
// One delivery goroutine does the rest, holding the lock only for in-memory work:
//
//	for {
//		mu.Lock()
//		m.SetInterest(now, hasSubscribers) // push consumers
//		m.Tick(now)                       // ack deadlines, expired pulls, members, inactivity
//		for n := 0; n < chunk; n++ {
//			d, ok := m.Next(now, source)  // who gets what, as a Delivery
//			if !ok { break }
//			if !publish(d) { m.NotTaken(d) }
//		}
//		rd := m.Ready()                   // statuses, dead letters, retired messages, journal, deadline
//		answer(rd.Statuses); deadLetter(rd.DeadLetters); retire(rd.Retired)
//		records := rd.Journal
//		m.Advance()
//		mu.Unlock()
//		journal.Write(records); journal.Sync() // disk I/O outside the lock acks take
//		confirmSynchronousAcks()
//		sleepUntil(rd.Deadline)          // or a wake-up
//	}
//
// # Journal
//
// Every change a durable consumer must survive a restart with is appended to the
// Ready's Journal as a record (a type byte and uvarints): Delivered, Acked,
// AckedUpTo, Next, Seek and ConsumerSeq. State is the snapshot form; ApplyRecords replays
// records over a State, and replaying a record twice gives the same state, so a
// snapshot followed by a journal that overlaps it restores correctly (a Seek sets
// its partition whole, and the records after it rebuild what followed).
package consumer
