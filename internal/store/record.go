package store

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"slices"
)

// Record layout (little endian), 36 bytes of header then the variable parts:
//
//	0  4  magic  FE 54 4E 01 ("\xFETN" + format version 1)
//	4  4  CRC32C (Castagnoli) of bytes [8, length)
//	8  4  length of the whole record, header included
//	12 8  seq
//	20 8  time, unix nanoseconds
//	28 2  flags (0; reserved)
//	30 2  subject length S
//	32 4  header length H
//	36 S  subject
//	.. H  header
//	.. .. payload (length - 36 - S - H bytes)
//
// The magic comes first so recovery can look for the next record after damage;
// 0xFE never occurs in UTF-8 text, which keeps false candidates rare, and the CRC
// (which covers the length) rejects the rest.
const (
	recHdrSize = 36
	recVersion = 1

	offCRC   = 4
	offLen   = 8
	offSeq   = 12
	offTime  = 20
	offFlags = 28
	offSubj  = 30
	offHdr   = 32

	maxSubject = math.MaxUint16
	maxRecord  = math.MaxUint32
)

var recMagic = [4]byte{0xFE, 'T', 'N', recVersion}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Reasons a byte range is not a record; they end up in Corruption.Err.
var (
	errMagic   = errors.New("bad record marker")
	errLength  = errors.New("bad record length")
	errCRC     = errors.New("CRC mismatch")
	errFields  = errors.New("bad record fields")
	errSeq     = errors.New("unexpected sequence")
	errMissing = errors.New("records missing")
	// errHoleLive: a hole (Clean) stands for sequences the tombstones do not
	// say were deleted.
	errHoleLive = errors.New("deleted records the tombstones do not name")
)

func recordSize(subject, header, payload int) int {
	return recHdrSize + subject + header + payload
}

// appendRecord encodes one record at the end of dst.
func appendRecord(dst []byte, seq uint64, ts int64, subject, header, payload []byte) []byte {
	off := len(dst)
	dst = appendBareRecord(dst, seq, ts, subject, header, payload)
	sealRecord(dst[off:])
	return dst
}

// appendBareRecord encodes one record at the end of dst without its CRC (left
// zero): for a record that may go into a compressed block, whose CRC then covers
// it, so that only the records that stay plain pay for one (sealRecords).
func appendBareRecord(dst []byte, seq uint64, ts int64, subject, header, payload []byte) []byte {
	n := recordSize(len(subject), len(header), len(payload))
	off := len(dst)
	dst = slices.Grow(dst, n)[:off+n]
	b := dst[off:]
	copy(b, recMagic[:])
	binary.LittleEndian.PutUint32(b[offCRC:], 0)
	binary.LittleEndian.PutUint32(b[offLen:], uint32(n))
	binary.LittleEndian.PutUint64(b[offSeq:], seq)
	binary.LittleEndian.PutUint64(b[offTime:], uint64(ts))
	binary.LittleEndian.PutUint16(b[offFlags:], 0)
	binary.LittleEndian.PutUint16(b[offSubj:], uint16(len(subject)))
	binary.LittleEndian.PutUint32(b[offHdr:], uint32(len(header)))
	p := recHdrSize
	p += copy(b[p:], subject)
	p += copy(b[p:], header)
	copy(b[p:], payload)
	return dst
}

// sealRecord computes the CRC of the record at the start of b.
func sealRecord(b []byte) {
	binary.LittleEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offLen:recLen(b)], crcTable))
}

// sealRecords computes the CRC of every record of b (whole records, and
// AppendBlock's blocks, which have theirs).
func sealRecords(b []byte) {
	for len(b) > 0 {
		if recFlags(b)&flagBlock == 0 {
			sealRecord(b)
		}
		b = b[recLen(b):]
	}
}

// peekRecord checks the fixed header in b (at least recHdrSize bytes) and returns
// the record's total length. It does not check the CRC.
func peekRecord(b []byte) (int, error) {
	if b[0] != recMagic[0] || b[1] != recMagic[1] || b[2] != recMagic[2] || b[3] != recMagic[3] {
		return 0, errMagic
	}
	n := int(binary.LittleEndian.Uint32(b[offLen:]))
	if n < recHdrSize {
		return 0, errLength
	}
	s := int(binary.LittleEndian.Uint16(b[offSubj:]))
	h := int(binary.LittleEndian.Uint32(b[offHdr:]))
	switch binary.LittleEndian.Uint16(b[offFlags:]) {
	case 0:
	case flagBlock, flagBlock | flagBareInner, flagBlock | flagMessages, flagBlock | flagBareInner | flagHoles:
		if s != 0 || h != blockHdrSize-recHdrSize || n <= blockHdrSize {
			return 0, errFields
		}
	case flagBlock | flagHole:
		if s != 0 || h != blockHdrSize-recHdrSize || n != blockHdrSize {
			return 0, errFields
		}
	default:
		return 0, errFields
	}
	if s+h > n-recHdrSize {
		return 0, errFields
	}
	return n, nil
}

// checkUnit verifies the CRC of raw, a record or a block exactly (its header
// checked by peekRecord), and returns its first sequence and how many it stands
// for. It does not expand a block.
func checkUnit(raw []byte) (seq, count uint64, err error) {
	if crc32.Checksum(raw[offLen:], crcTable) != binary.LittleEndian.Uint32(raw[offCRC:]) {
		return 0, 0, errCRC
	}
	count = unitCount(raw)
	if count == 0 {
		return 0, 0, errBlock
	}
	return recSeq(raw), count, nil
}

func recSeq(b []byte) uint64 { return binary.LittleEndian.Uint64(b[offSeq:]) }
func recTime(b []byte) int64 { return int64(binary.LittleEndian.Uint64(b[offTime:])) }
func recLen(b []byte) int    { return int(binary.LittleEndian.Uint32(b[offLen:])) }
func recSubject(b []byte) []byte {
	s := int(binary.LittleEndian.Uint16(b[offSubj:]))
	return b[recHdrSize : recHdrSize+s : recHdrSize+s]
}

// decodeRecord verifies and decodes the record that is exactly b. The returned
// slices alias b and are capped so appending to one cannot overwrite another.
func decodeRecord(b []byte) (Record, error) {
	r, err := parseRecord(b)
	if err == nil && crc32.Checksum(b[offLen:], crcTable) != binary.LittleEndian.Uint32(b[offCRC:]) {
		return Record{}, errCRC
	}
	return r, err
}

// parseRecord decodes the record that is exactly b, as decodeRecord does, but
// for its CRC: for a record checked already (an expanded block's, by load).
func parseRecord(b []byte) (Record, error) {
	if len(b) < recHdrSize {
		return Record{}, errLength
	}
	n, err := peekRecord(b)
	if err != nil {
		return Record{}, err
	}
	if recFlags(b) != 0 {
		return Record{}, errFields // a block holds records; it is not one (expander)
	}
	if n != len(b) {
		return Record{}, errLength
	}
	s := int(binary.LittleEndian.Uint16(b[offSubj:]))
	h := int(binary.LittleEndian.Uint32(b[offHdr:]))
	p := recHdrSize
	r := Record{
		Seq:     recSeq(b),
		Time:    recTime(b),
		Subject: b[p : p+s : p+s],
	}
	p += s
	if h > 0 {
		r.Header = b[p : p+h : p+h]
	}
	p += h
	r.Payload = b[p:n:n]
	return r, nil
}
