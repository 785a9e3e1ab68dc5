package raftlog

import (
	"encoding/binary"
	"errors"
	"hash/crc32"

	pb "go.etcd.io/raft/v3/raftpb"
)

// The hard state file is one 40-byte record (little endian):
//
//	0  4  magic "TRHS"
//	4  4  CRC32C of bytes [8, 40)
//	8  1  version, 1
//	9  1  presence: 1 Term, 2 Vote, 4 Commit; 0x80 alone: SetHardState(nil)
//	10 6  zero
//	16 8  term
//	24 8  vote
//	32 8  commit
const (
	hsSize    = 40
	hsVersion = 1

	hsTerm   = 1
	hsVote   = 2
	hsCommit = 4
	hsNil    = 0x80
)

var (
	hsMagic   = [4]byte{'T', 'R', 'H', 'S'}
	crcTable  = crc32.MakeTable(crc32.Castagnoli)
	errHSFile = errors.New("bad hard state record")
)

func encodeHardState(st *pb.HardState) []byte {
	b := make([]byte, hsSize)
	copy(b, hsMagic[:])
	b[8] = hsVersion
	var p byte
	if st == nil {
		p = hsNil
	} else {
		if st.Term != nil {
			p |= hsTerm
		}
		if st.Vote != nil {
			p |= hsVote
		}
		if st.Commit != nil {
			p |= hsCommit
		}
	}
	b[9] = p
	binary.LittleEndian.PutUint64(b[16:], st.GetTerm())
	binary.LittleEndian.PutUint64(b[24:], st.GetVote())
	binary.LittleEndian.PutUint64(b[32:], st.GetCommit())
	binary.LittleEndian.PutUint32(b[4:], crc32.Checksum(b[8:], crcTable))
	return b
}

// decodeHardState checks and decodes the file; every record it accepts encodes
// back to the same bytes.
func decodeHardState(b []byte) (*pb.HardState, error) {
	if len(b) != hsSize || [4]byte(b[:4]) != hsMagic {
		return nil, errHSFile
	}
	if crc32.Checksum(b[8:], crcTable) != binary.LittleEndian.Uint32(b[4:]) {
		return nil, errHSFile
	}
	p := b[9]
	if b[8] != hsVersion || (p&^(hsTerm|hsVote|hsCommit) != 0 && p != hsNil) {
		return nil, errHSFile
	}
	for _, x := range b[10:16] {
		if x != 0 {
			return nil, errHSFile
		}
	}
	term, vote, commit := binary.LittleEndian.Uint64(b[16:]), binary.LittleEndian.Uint64(b[24:]), binary.LittleEndian.Uint64(b[32:])
	if (p&hsTerm == 0 && term != 0) || (p&hsVote == 0 && vote != 0) || (p&hsCommit == 0 && commit != 0) {
		return nil, errHSFile
	}
	if p == hsNil {
		return nil, nil
	}
	st := &pb.HardState{}
	if p&hsTerm != 0 {
		st.Term = &term
	}
	if p&hsVote != 0 {
		st.Vote = &vote
	}
	if p&hsCommit != 0 {
		st.Commit = &commit
	}
	return st, nil
}
