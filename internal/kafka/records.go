package kafka

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Record batch v2 layout (the offsets kmsg.RecordBatch's fields sit at): the CRC
// covers everything from the attributes on.
const (
	batchHeaderLen = 61 // through NumRecords
	batchCRCAt     = 17
	batchAttrsAt   = 21
	batchLenAfter  = 49 // Length counts this much before the records
)

// Attribute bits of a record batch.
const (
	attrCodec         = 0x07
	attrLogAppendTime = 0x08
	attrTransactional = 0x10
	attrControl       = 0x20
)

// Compression codecs (attributes & attrCodec).
const (
	codecNone   = 0
	codecGzip   = 1
	codecSnappy = 2
	codecLZ4    = 3
	codecZstd   = 4
)

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// batchError is a batch Kafka's rules refuse, with the code to answer.
type batchError struct {
	code int16
	msg  string
}

func (e *batchError) Error() string { return e.msg }

func badBatch(code int16, format string, args ...any) error {
	return &batchError{code: code, msg: fmt.Sprintf(format, args...)}
}

// errorCode is the Kafka code of a batch decoding error.
func errorCode(err error) (int16, string) {
	var be *batchError
	if errors.As(err, &be) {
		return be.code, be.msg
	}
	return kerr.CorruptMessage.Code, err.Error()
}

// nextBatch splits the first record batch off b, checks its framing, magic and
// CRC, and decodes its header. rest is what follows it.
func nextBatch(b []byte) (batch kmsg.RecordBatch, rest []byte, err error) {
	if len(b) < batchHeaderLen {
		return batch, nil, badBatch(kerr.CorruptMessage.Code, "record batch of %d bytes, shorter than its header", len(b))
	}
	r := kbin.Reader{Src: b}
	_ = r.Int64()
	length := int(r.Int32())
	if length < batchLenAfter || length > len(b)-12 {
		return batch, nil, badBatch(kerr.CorruptMessage.Code, "record batch length %d does not fit its %d bytes", length, len(b)-12)
	}
	raw := b[:12+length]
	if err := batch.ReadFrom(raw); err != nil {
		return batch, nil, badBatch(kerr.CorruptMessage.Code, "record batch: %v", err)
	}
	if batch.Magic != 2 {
		return batch, nil, badBatch(kerr.UnsupportedForMessageFormat.Code, "record batch magic %d: only v2 batches are taken", batch.Magic)
	}
	if got := crc32.Checksum(raw[batchAttrsAt:], crc32c); got != uint32(batch.CRC) {
		return batch, nil, badBatch(kerr.CorruptMessage.Code, "record batch CRC %08x, computed %08x", uint32(batch.CRC), got)
	}
	return batch, b[12+length:], nil
}

// decompress returns a batch's records uncompressed, using buf, and never more than
// limit bytes of them.
func decompress(batch *kmsg.RecordBatch, buf []byte, limit int) ([]byte, error) {
	codec := batch.Attributes & attrCodec
	if codec == codecNone {
		return batch.Records, nil
	}
	var rd io.Reader
	switch codec {
	case codecGzip:
		zr, err := gzip.NewReader(bytes.NewReader(batch.Records))
		if err != nil {
			return nil, badBatch(kerr.CorruptMessage.Code, "gzip: %v", err)
		}
		defer zr.Close()
		rd = zr
	case codecSnappy:
		return unsnappy(batch.Records, buf, limit)
	case codecLZ4:
		lr := lz4Readers.Get().(*lz4.Reader)
		defer lz4Readers.Put(lr)
		lr.Reset(bytes.NewReader(batch.Records))
		rd = lr
	case codecZstd:
		zr := zstdReaders.Get().(*zstd.Decoder)
		defer zstdReaders.Put(zr)
		if err := zr.Reset(bytes.NewReader(batch.Records)); err != nil {
			return nil, badBatch(kerr.CorruptMessage.Code, "zstd: %v", err)
		}
		rd = zr
	default:
		return nil, badBatch(kerr.UnsupportedCompressionType.Code, "compression codec %d unknown", codec)
	}
	out, err := readAllLimited(rd, buf[:0], limit)
	if err != nil {
		return nil, badBatch(kerr.CorruptMessage.Code, "%s: %v", codecName(codec), err)
	}
	return out, nil
}

var (
	lz4Readers  = sync.Pool{New: func() any { return lz4.NewReader(nil) }}
	zstdReaders = sync.Pool{New: func() any {
		d, _ := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true))
		return d
	}}
)

func codecName(c int16) string {
	switch c {
	case codecGzip:
		return "gzip"
	case codecSnappy:
		return "snappy"
	case codecLZ4:
		return "lz4"
	case codecZstd:
		return "zstd"
	}
	return "none"
}

var errTooBig = errors.New("decompressed records larger than the request limit")

func readAllLimited(r io.Reader, buf []byte, limit int) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if len(buf) > limit {
			return nil, errTooBig
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// xerialMagic starts snappy data framed the way Kafka's Java client frames it:
// the magic, two 4-byte versions, then blocks each prefixed by its 4-byte length.
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

// unsnappy decodes Kafka's snappy: plain snappy blocks (librdkafka, franz-go) or
// the xerial framing (the Java client).
func unsnappy(src, buf []byte, limit int) ([]byte, error) {
	buf = buf[:0]
	if !bytes.HasPrefix(src, xerialMagic) {
		return snappyBlock(buf, src, limit)
	}
	if len(src) < 16 {
		return nil, badBatch(kerr.CorruptMessage.Code, "snappy: xerial header truncated")
	}
	src = src[16:]
	for len(src) > 0 {
		if len(src) < 4 {
			return nil, badBatch(kerr.CorruptMessage.Code, "snappy: xerial block length truncated")
		}
		n := int(binary.BigEndian.Uint32(src))
		src = src[4:]
		if n < 0 || n > len(src) {
			return nil, badBatch(kerr.CorruptMessage.Code, "snappy: xerial block of %d bytes, %d left", n, len(src))
		}
		var err error
		if buf, err = snappyBlock(buf, src[:n], limit); err != nil {
			return nil, err
		}
		src = src[n:]
	}
	return buf, nil
}

// snappyBlock appends the decoding of one snappy block to dst.
func snappyBlock(dst, block []byte, limit int) ([]byte, error) {
	n, err := snappy.DecodedLen(block)
	if err != nil {
		return nil, badBatch(kerr.CorruptMessage.Code, "snappy: %v", err)
	}
	if n > limit-len(dst) {
		return nil, badBatch(kerr.CorruptMessage.Code, "snappy: %v", errTooBig)
	}
	dst = append(dst, make([]byte, n)...)[:len(dst)]
	out, err := snappy.Decode(dst[len(dst):len(dst)+n], block)
	if err != nil {
		return nil, badBatch(kerr.CorruptMessage.Code, "snappy: %v", err)
	}
	return dst[:len(dst)+len(out)], nil
}

// eachRecord decodes the n records of an uncompressed batch body, calling fn for
// each. A record is valid only during its call.
func eachRecord(body []byte, n int32, rec *kmsg.Record, fn func(i int, rec *kmsg.Record) error) error {
	for i := 0; i < int(n); i++ {
		length, k := kbin.Varint(body)
		if k <= 0 || length < 0 || int(length) > len(body)-k {
			return badBatch(kerr.CorruptMessage.Code, "record %d of %d: bad length", i, n)
		}
		if err := rec.UnsafeReadFrom(body[:k+int(length)]); err != nil {
			return badBatch(kerr.CorruptMessage.Code, "record %d of %d: %v", i, n, err)
		}
		if err := fn(i, rec); err != nil {
			return err
		}
		body = body[k+int(length):]
	}
	if len(body) != 0 {
		return badBatch(kerr.CorruptMessage.Code, "%d bytes after the batch's %d records", len(body), n)
	}
	return nil
}

// ---------------------------------------------------------------------------------
// Encoding fetched records

// batchWriter builds one uncompressed v2 record batch.
type batchWriter struct {
	buf      []byte // the batch being built
	start    int    // where it starts in buf
	base     int64  // offset of its first record
	firstTS  int64
	maxTS    int64
	n        int32
	lastDelt int32
}

// begin starts a batch at the end of dst whose first record has offset base and
// timestamp ts (unix milliseconds).
func (w *batchWriter) begin(dst []byte, base, ts int64) {
	w.buf, w.start, w.base, w.firstTS, w.maxTS, w.n = dst, len(dst), base, ts, ts, 0
	b := kmsg.RecordBatch{FirstOffset: base, Magic: 2, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1,
		FirstTimestamp: ts, MaxTimestamp: ts}
	w.buf = b.AppendTo(w.buf) // header with zero length and CRC: end fills them in
}

// add appends a record; its key and value may be nil.
func (w *batchWriter) add(rec *kmsg.Record, offset, ts int64) {
	rec.OffsetDelta = int32(offset - w.base)
	rec.TimestampDelta64 = ts - w.firstTS
	rec.TimestampDelta = int32(rec.TimestampDelta64)
	rec.Length = recordLength(rec)
	w.buf = rec.AppendTo(w.buf)
	w.n++
	w.lastDelt = rec.OffsetDelta
	w.maxTS = max(w.maxTS, ts)
}

// end completes the batch's header and returns the buffer.
func (w *batchWriter) end() []byte {
	b := w.buf[w.start:]
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[23:], uint32(w.lastDelt))
	binary.BigEndian.PutUint64(b[35:], uint64(w.maxTS))
	binary.BigEndian.PutUint32(b[57:], uint32(w.n))
	binary.BigEndian.PutUint32(b[batchCRCAt:], crc32.Checksum(b[batchAttrsAt:], crc32c))
	return w.buf
}

// recordLength is a record's Length field: its size after that field.
func recordLength(r *kmsg.Record) int32 {
	n := 1 + kbin.VarlongLen(r.TimestampDelta64) + kbin.VarintLen(r.OffsetDelta)
	n += bytesLen(r.Key) + bytesLen(r.Value)
	n += kbin.VarintLen(int32(len(r.Headers)))
	for i := range r.Headers {
		h := &r.Headers[i]
		n += kbin.VarintLen(int32(len(h.Key))) + len(h.Key) + bytesLen(h.Value)
	}
	return int32(n)
}

func bytesLen(b []byte) int {
	if b == nil {
		return kbin.VarintLen(-1)
	}
	return kbin.VarintLen(int32(len(b))) + len(b)
}
