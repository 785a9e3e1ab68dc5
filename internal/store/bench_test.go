package store

import (
	"github.com/klauspost/compress/s2"
	"io"
	"math/rand/v2"
	"testing"
)

func benchLog(b *testing.B) *Log {
	cfg := Config{Dir: b.TempDir(), Name: "bench", Sync: SyncNever}
	l, _, err := Open(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l
}

// BenchmarkAppendCommit measures the write path: encoding into the batch
// buffer, one write(2) per commit, index and subject bookkeeping (SyncNever, so
// no fsync).
func BenchmarkAppendCommit(b *testing.B) {
	for _, size := range []struct {
		name string
		n    int
	}{{"16B", 16}, {"1KiB", 1024}} {
		for _, batch := range []int{1, 64} {
			name := size.name + "/batch1"
			if batch == 64 {
				name = size.name + "/batch64"
			}
			b.Run(name, func(b *testing.B) {
				l := benchLog(b)
				subject := []byte("orders.eu.created")
				payload := make([]byte, size.n)
				b.SetBytes(int64(size.n))
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if _, err := l.Append(subject, nil, payload, 1); err != nil {
						b.Fatal(err)
					}
					if (i+1)%batch == 0 {
						if err := l.Commit(); err != nil {
							b.Fatal(err)
						}
					}
				}
				if err := l.Commit(); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

func fillBench(b *testing.B, n, size int) *Log {
	l := benchLog(b)
	payload := make([]byte, size)
	for i := 0; i < n; i++ {
		if _, err := l.Append([]byte("orders.eu.created"), nil, payload, 0); err != nil {
			b.Fatal(err)
		}
		if i%256 == 255 {
			if err := l.Commit(); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := l.Commit(); err != nil {
		b.Fatal(err)
	}
	return l
}

// BenchmarkRead reads random records through the sparse index (page cache).
func BenchmarkRead(b *testing.B) {
	const n = 100_000
	l := fillBench(b, n, 1024)
	var buf []byte
	b.SetBytes(1024)
	b.ReportAllocs()
	b.ResetTimer()
	x := uint64(12345)
	for i := 0; i < b.N; i++ {
		x = x*6364136223846793005 + 1442695040888963407
		seq := 1 + (x>>33)%n
		r, nb, err := l.Read(seq, buf)
		if err != nil || r.Seq != seq {
			b.Fatal(err)
		}
		buf = nb
	}
}

// BenchmarkReaderNext replays the log sequentially.
func BenchmarkReaderNext(b *testing.B) {
	for _, size := range []struct {
		name string
		n    int
	}{{"16B", 16}, {"1KiB", 1024}} {
		b.Run(size.name, func(b *testing.B) {
			const n = 100_000
			l := fillBench(b, n, size.n)
			b.SetBytes(int64(size.n))
			b.ReportAllocs()
			r := l.NewReader(0)
			defer func() { r.Close() }()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				_, err := r.Next()
				if err == io.EOF {
					r.Close()
					r = l.NewReader(0)
					_, err = r.Next()
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkOpen measures recovery: a full CRC scan of every segment (here from
// the page cache), rebuilding the index and per-subject state.
func BenchmarkOpen(b *testing.B) {
	const n, size = 200_000, 1024 // ~210 MB
	l := fillBench(b, n, size)
	cfg := l.cfg
	l.Close()
	b.SetBytes(int64(n * recordSize(len("orders.eu.created"), 0, size)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l, rep, err := Open(cfg)
		if err != nil || rep.Msgs != n {
			b.Fatal(err, rep.Msgs)
		}
		l.Close()
	}
}

// BenchmarkCompressedLog: committing 64 messages at a time and reading them back
// with a Reader, with and without S2 blocks, for payloads that compress (JSON
// events) and payloads that do not (random bytes: the packer's attempts then
// come down to one run in 32). disk-B/msg is what the files hold per message.
func BenchmarkCompressedLog(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	var json, random [97][]byte
	for i := range json {
		json[i] = compressible(uint64(i), 300)
		random[i] = make([]byte, 300)
		for j := range random[i] {
			random[i][j] = byte(rng.Uint32())
		}
	}
	for _, pl := range []struct {
		name    string
		payload func(i int) []byte
	}{
		{"json", func(i int) []byte { return json[i%len(json)] }},
		{"random", func(i int) []byte { return random[i%len(random)] }},
	} {
		for _, c := range []Compression{CompressNone, CompressS2} {
			b.Run(pl.name+"/"+c.String()+"/commit", func(b *testing.B) {
				l := benchLog(b)
				l.cfg.Compression = c
				b.SetBytes(300)
				b.ReportAllocs()
				commitIn64s(b, l, b.N, pl.payload)
				var disk int64
				for _, s := range l.segs {
					disk += s.size
				}
				b.ReportMetric(float64(disk)/float64(b.N), "disk-B/msg")
			})
			b.Run(pl.name+"/"+c.String()+"/read", func(b *testing.B) {
				l := benchLog(b)
				l.cfg.Compression = c
				commitIn64s(b, l, 20000, pl.payload)
				b.SetBytes(300)
				b.ReportAllocs()
				b.ResetTimer()
				r := l.NewReader(0)
				defer func() { r.Close() }()
				readRound(b, l)
			})
		}
		// Blocks of 64 messages made by their producer (AppendBlock), as a
		// replicated stream's replicas write them.
		b.Run(pl.name+"/messages/commit", func(b *testing.B) {
			l := benchLog(b)
			// The same 64 blocks over and over: their bytes stay in the caches,
			// as a replica's just expanded entry is.
			blocks := messageBlocksOf64(64*64, pl.payload)
			b.SetBytes(300)
			b.ReportAllocs()
			b.ResetTimer()
			for n := 0; n < b.N; n += 64 * 64 {
				appendBlocks(b, l, blocks[:min(len(blocks), (b.N-n+63)/64)])
			}
			var disk int64
			for _, s := range l.segs {
				disk += s.size
			}
			b.ReportMetric(float64(disk)/float64(b.N), "disk-B/msg")
		})
		b.Run(pl.name+"/messages/read", func(b *testing.B) {
			l := benchLog(b)
			appendBlocks(b, l, messageBlocksOf64(20000, pl.payload))
			b.SetBytes(300)
			b.ReportAllocs()
			b.ResetTimer()
			readRound(b, l)
		})
	}
}

// readRound reads b.N messages of l with a Reader, starting again at the front
// at its end.
func readRound(b *testing.B, l *Log) {
	r := l.NewReader(0)
	defer func() { r.Close() }()
	for i := 0; i < b.N; i++ {
		if _, err := r.Next(); err == io.EOF {
			r.Close()
			r = l.NewReader(0)
		} else if err != nil {
			b.Fatal(err)
		}
	}
}

// messageBlocksOf64 is n messages with the given payloads in message blocks of
// 64: each block's inner bytes and its S2 block.
func messageBlocksOf64(n int, payload func(i int) []byte) [][2][]byte {
	var blocks [][2][]byte
	var inner []byte
	for i := 0; i < n; i++ {
		inner = AppendBlockMessage(inner, []byte("orders.eu.created"), nil, payload(i))
		if (i+1)%64 == 0 || i == n-1 {
			blocks = append(blocks, [2][]byte{inner, s2.Encode(nil, inner)})
			inner = nil
		}
	}
	return blocks
}

// appendBlocks appends blocks, committing each.
func appendBlocks(b *testing.B, l *Log, blocks [][2][]byte) {
	for _, blk := range blocks {
		if _, err := l.AppendBlock(1, blk[0], blk[1]); err != nil {
			b.Fatal(err)
		}
		if err := l.Commit(); err != nil {
			b.Fatal(err)
		}
	}
}

// commitIn64s appends n messages with the given payloads, committing 64 at a time.
func commitIn64s(b *testing.B, l *Log, n int, payload func(i int) []byte) {
	commitEvery(b, l, n, 64, []byte("orders.eu.created"), nil, payload)
}

// commitEvery appends n messages of subject and header with the given payloads,
// committing per at a time.
func commitEvery(b *testing.B, l *Log, n, per int, subject, header []byte, payload func(i int) []byte) {
	for i := 0; i < n; i++ {
		if _, err := l.Append(subject, header, payload(i), 1); err != nil {
			b.Fatal(err)
		}
		if (i+1)%per == 0 {
			if err := l.Commit(); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := l.Commit(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkCompressedBigCommits commits compressible 100-byte messages with a
// Kafka record's headers in commits of 8,192, as one produce request of an
// idempotent Kafka producer makes: the batch outgrows the CPU's caches before
// Commit packs it. Reported per message.
func BenchmarkCompressedBigCommits(b *testing.B) {
	l := benchLog(b)
	l.cfg.Compression = CompressS2
	hdr := []byte("\x11Tern-To-Partition\x010\x0eTern-Timestamp\x0d1765051234567\x0bTern-Msg-Id\x12kafka:7:0:0:123456")
	payload := make([]byte, 100)
	b.SetBytes(100)
	b.ReportAllocs()
	commitEvery(b, l, b.N, 8192, []byte("bench-topic-subject"), hdr, func(int) []byte { return payload })
}
