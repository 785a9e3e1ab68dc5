package streamapi

// ConsumerSeekSubject sets a durable consumer's position (SeekRequest); the answer
// (ConsumerInfo) comes once the consumer's journal holds the new position. Any
// node may ask: in a cluster the stream's leader answers.
func ConsumerSeekSubject(stream, consumer string) string {
	return APIPrefix + "CONSUMER.SEEK." + stream + "." + consumer
}

// SeekRequest moves a consumer's position in some partitions, forward or back.
type SeekRequest struct {
	Positions []SeekPosition `json:"positions"`
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
