package kafka

import (
	"bytes"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// compress encodes records with a Kafka codec, for seeds and tests.
func compress(codec int16, b []byte) []byte {
	var buf bytes.Buffer
	switch codec {
	case codecGzip:
		w := gzip.NewWriter(&buf)
		_, _ = w.Write(b)
		_ = w.Close()
	case codecSnappy:
		return snappy.Encode(nil, b)
	case codecLZ4:
		w := lz4.NewWriter(&buf)
		_, _ = w.Write(b)
		_ = w.Close()
	case codecZstd:
		w, _ := zstd.NewWriter(&buf)
		_, _ = w.Write(b)
		_ = w.Close()
	default:
		return b
	}
	return buf.Bytes()
}
