package raftlog

import (
	"encoding/binary"
	"errors"
	"hash/crc32"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// A snapshot file (snapshot, snapshot.tmp, snapshot.install) is (little endian):
//
//	0  4  magic "TRSN"
//	4  4  CRC32C of bytes [8, end)
//	8  1  version, 1
//	9  1  presence: 1 Data (non-nil)
//	10 2  zero
//	12 4  metadata length M
//	16 8  data length D
//	24 M  raftpb.SnapshotMetadata, protobuf (deterministic)
//	.. D  data
const (
	snapHdrSize = 24
	snapVersion = 1
	snapHasData = 1
)

var (
	snapMagic   = [4]byte{'T', 'R', 'S', 'N'}
	errSnapFile = errors.New("bad snapshot file")
)

var marshalDet = proto.MarshalOptions{Deterministic: true}

func encodeSnapshot(s *pb.Snapshot) ([]byte, error) {
	md, err := marshalDet.Marshal(s.GetMetadata())
	if err != nil {
		return nil, err
	}
	b := make([]byte, snapHdrSize, snapHdrSize+len(md)+len(s.Data))
	copy(b, snapMagic[:])
	b[8] = snapVersion
	if s.Data != nil {
		b[9] = snapHasData
	}
	binary.LittleEndian.PutUint32(b[12:], uint32(len(md)))
	binary.LittleEndian.PutUint64(b[16:], uint64(len(s.Data)))
	b = append(b, md...)
	b = append(b, s.Data...)
	binary.LittleEndian.PutUint32(b[4:], crc32.Checksum(b[8:], crcTable))
	return b, nil
}

// decodeSnapshot checks and decodes a snapshot file. The data aliases b.
func decodeSnapshot(b []byte) (*pb.Snapshot, error) {
	if len(b) < snapHdrSize || [4]byte(b[:4]) != snapMagic {
		return nil, errSnapFile
	}
	if crc32.Checksum(b[8:], crcTable) != binary.LittleEndian.Uint32(b[4:]) {
		return nil, errSnapFile
	}
	if b[8] != snapVersion || b[9]&^snapHasData != 0 || b[10] != 0 || b[11] != 0 {
		return nil, errSnapFile
	}
	m := uint64(binary.LittleEndian.Uint32(b[12:]))
	d := binary.LittleEndian.Uint64(b[16:])
	if d > uint64(len(b)) || snapHdrSize+m+d != uint64(len(b)) || (b[9]&snapHasData == 0 && d != 0) {
		return nil, errSnapFile
	}
	md := &pb.SnapshotMetadata{}
	if err := proto.Unmarshal(b[snapHdrSize:snapHdrSize+m], md); err != nil {
		return nil, errSnapFile
	}
	s := &pb.Snapshot{Metadata: md}
	if b[9]&snapHasData != 0 {
		s.Data = b[snapHdrSize+m : snapHdrSize+m+d : snapHdrSize+m+d]
	}
	return s, nil
}
