package streamapi

import "time"

// ConsumerSeekSubject sets a durable consumer's position (SeekRequest); the answer
// (ConsumerInfo) comes once the consumer's journal holds the new position. Any
// node may ask: in a cluster the stream's leader answers.
func ConsumerSeekSubject(stream, consumer string) string {
	return APIPrefix + "CONSUMER.SEEK." + stream + "." + consumer
}

// SeekRequest moves a consumer's position in some partitions, forward or back.
type SeekRequest struct {
	Positions []SeekPosition `json:"positions"`
	// NotAfter, when set, is the last moment the seek may take effect, by the
	// clock of the node that answers: a request that reaches the consumer later is
	// refused (CodeExpired) and changes nothing. A requester that gives up waiting
	// for the answer sets it before its own deadline, so that a request held up on
	// the way (a route cut, a leader paused) cannot move the consumer after a newer
	// seek that the requester made once it had given up on this one.
	NotAfter time.Time `json:"not_after,omitzero"`
}

// SeekPosition is one partition's new position: the next first delivery there is
// the first message at or after stream sequence Next (1 and up). Messages of the
// partition awaiting an ack are forgotten: those below Next count as done, the
// others are delivered again as new. A Kafka group's committed offset o is the
// position Next = o + 1 (docs/kafka.md).
type SeekPosition struct {
	Partition int    `json:"partition"`
	Next      uint64 `json:"next"`
}
