package tern

import (
	"context"

	"github.com/tern-mq/tern/internal/streamapi"
)

// SeekPosition is one partition's new position for SeekConsumer: the next first
// delivery there is the first message at or after stream sequence Next.
type SeekPosition = streamapi.SeekPosition

// SeekConsumer moves a consumer's position in the partitions given, forward or
// back; messages of those partitions awaiting an ack are forgotten. It returns once
// the consumer's journal holds the new positions. A Kafka group's committed offset
// o on a topic is the position Next = o + 1 of the consumer of the topic's stream
// named after the group (docs/kafka.md), so this is also how to reset a Kafka
// group's offsets.
func (s *Streams) SeekConsumer(ctx context.Context, stream, consumer string, positions ...SeekPosition) (*ConsumerInfo, error) {
	return request[ConsumerInfo](ctx, s, streamapi.ConsumerSeekSubject(stream, consumer), streamapi.SeekRequest{Positions: positions})
}
