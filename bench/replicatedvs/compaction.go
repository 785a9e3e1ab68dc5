package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tern-mq/tern/bench/internal/harness"
	"github.com/tern-mq/tern/bench/internal/host"
)

// The compacted-topic comparison (bench/compaction.sh): a franz-go producer writes
// records of a fixed set of keys, round after round, to a topic created with
// cleanup.policy=compact and small segments, against one running system, Kafka or
// Tern; then the topic's partition directory is watched until compaction stops
// shrinking it, and a consumer reads the partition from its start and checks that
// every key's latest value is there.

// compactionResult is one system's run.
type compactionResult struct {
	Date    string       `json:"date"`
	Command string       `json:"command"`
	Machine host.Machine `json:"machine"`
	System  string       `json:"system"`
	Version string       `json:"version,omitempty"`

	Replicas     int `json:"replicas"`
	Keys         int `json:"keys"`
	Records      int `json:"records"`
	Size         int `json:"size"`
	SegmentBytes int `json:"segment_bytes"`

	ProduceSeconds float64 `json:"produce_seconds"`
	ProducePerSec  float64 `json:"produce_records_per_second"`
	// The partition directories' disk space (every file under them, summed over
	// the replicas) right after the last record was acknowledged, at its
	// smallest while watched, and how long after the produce ended that smallest
	// size was first seen.
	BytesProduced  int64   `json:"bytes_after_produce"`
	BytesCompacted int64   `json:"bytes_compacted"`
	CompactSeconds float64 `json:"compact_seconds"`
	WatchedSeconds float64 `json:"watched_seconds"`
	// Segment files (*.log) under the directories right after the produce and
	// when the watch ended.
	SegmentsProduced int `json:"segments_after_produce"`
	SegmentsAtEnd    int `json:"segments_at_end"`
	// What a consumer read from the start afterwards: records, distinct keys, and
	// keys whose last record read is not the last one produced (must be 0).
	ReadRecords int `json:"read_records"`
	ReadKeys    int `json:"read_keys"`
	StaleKeys   int `json:"stale_keys"`
}

func cmdCompaction(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("replicatedvs compaction", flag.ContinueOnError)
	fs.SetOutput(stderr)
	system := fs.String("system", "kafka", "the system's name, for the report")
	version := fs.String("version", "", "the system's version, for the report")
	bootstrap := fs.String("bootstrap", "127.0.0.1:9092", "the system's Kafka listener(s), comma-separated")
	dirList := fs.String("dir", "", "the topic partition's directory on disk, whose files are summed, one per replica, comma-separated (required)")
	rf := fs.Int("replication-factor", 1, "the topic's replication factor")
	topic := fs.String("topic", "compacted", "the topic to create")
	keys := fs.Int("keys", 10_000, "distinct keys")
	records := fs.Int("records", 1_000_000, "records produced: keys in turn, round after round")
	size := fs.Int("size", 100, "value bytes (at least 16)")
	segment := fs.Int("segment-bytes", 1<<20, "the topic's segment.bytes")
	watch := fs.Duration("watch", 3*time.Minute, "watch the directory at most this long")
	steady := fs.Duration("steady", 30*time.Second, "stop watching once the size has not moved for this long")
	jsonOut := fs.String("json", "", "write the result as JSON to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	dirs := harness.SplitList(*dirList)
	if len(dirs) == 0 || *keys < 1 || *records < *keys || *size < 16 || *rf < 1 {
		return errors.New("--dir is required, --keys at least 1, --records at least --keys, --size at least 16, --replication-factor at least 1")
	}
	res := compactionResult{Date: time.Now().UTC().Format(time.RFC3339), Command: "replicatedvs compaction " + strings.Join(args, " "),
		Machine: host.Info(), System: *system, Version: *version, Replicas: *rf, Keys: *keys, Records: *records, Size: *size, SegmentBytes: *segment}
	seeds := harness.SplitList(*bootstrap)
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(*topic),
		kgo.ProducerLinger(5*time.Millisecond), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ClientID("bench-compaction"))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	configs := map[string]*string{"cleanup.policy": kadm.StringPtr("compact"), "segment.bytes": kadm.StringPtr(strconv.Itoa(*segment)),
		"min.cleanable.dirty.ratio": kadm.StringPtr("0.5")}
	// A cluster just started may not place replicas on every node yet: the
	// topic is asked for again for a minute.
	for deadline := time.Now().Add(time.Minute); ; {
		r, err := adm.CreateTopic(ctx, 1, int16(*rf), configs, *topic)
		if err == nil && r.Err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("create %s: %v %v %s", *topic, err, r.Err, r.ErrMessage)
		}
		time.Sleep(500 * time.Millisecond)
	}

	// Produce: key i%keys, the value its round's number then letters, so that
	// the consumer can tell the last round from an earlier one.
	values := recordValues(*size, valuesLetters)
	var (
		mu      sync.Mutex
		prodErr error
		acked   atomic.Int64
		wg      sync.WaitGroup
	)
	// Keys are shared by the records that carry them (franz-go does not
	// modify a record's key); a value is its own, its round written in.
	keyNames := make([][]byte, *keys)
	for k := range keyNames {
		keyNames[k] = fmt.Appendf(nil, "key-%07d", k)
	}
	start := time.Now()
	for i := 0; i < *records && ctx.Err() == nil; i++ {
		v := append([]byte(nil), values[i%len(values)]...)
		_ = fmt.Appendf(v[:0], "%010d", i / *keys) // in place, over its first 10 bytes
		wg.Add(1)
		cl.Produce(ctx, &kgo.Record{Key: keyNames[i%*keys], Value: v}, func(_ *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				mu.Lock()
				prodErr = errors.Join(prodErr, err)
				mu.Unlock()
				return
			}
			acked.Add(1)
		})
	}
	wg.Wait()
	res.ProduceSeconds = time.Since(start).Seconds()
	res.ProducePerSec = float64(acked.Load()) / res.ProduceSeconds
	if prodErr != nil || acked.Load() != int64(*records) {
		return fmt.Errorf("produce: %d of %d acknowledged: %v", acked.Load(), *records, prodErr)
	}
	fmt.Fprintf(stderr, "%s: %d records produced in %.1fs (%.0f/s)\n", *system, *records, res.ProduceSeconds, res.ProducePerSec)

	// Watch the directory shrink.
	produced := time.Now()
	if res.BytesProduced, res.SegmentsProduced, err = dirsBytes(dirs); err != nil {
		return err
	}
	res.BytesCompacted, res.CompactSeconds = res.BytesProduced, 0
	last, lastMove := res.BytesProduced, produced
	for time.Since(produced) < *watch && time.Since(lastMove) < *steady && ctx.Err() == nil {
		time.Sleep(500 * time.Millisecond)
		n, segs, err := dirsBytes(dirs)
		if err != nil {
			return err
		}
		res.SegmentsAtEnd = segs
		if n != last {
			last, lastMove = n, time.Now()
		}
		if n < res.BytesCompacted {
			res.BytesCompacted, res.CompactSeconds = n, time.Since(produced).Seconds()
		}
	}
	res.WatchedSeconds = time.Since(produced).Seconds()
	fmt.Fprintf(stderr, "%s: %d bytes after the produce, %d after %.1fs (watched %.0fs); %d segment files, then %d\n", *system,
		res.BytesProduced, res.BytesCompacted, res.CompactSeconds, res.WatchedSeconds, res.SegmentsProduced, res.SegmentsAtEnd)

	// Read it all back.
	ends, err := adm.ListEndOffsets(ctx, *topic)
	if err != nil {
		return err
	}
	end, ok := ends.Lookup(*topic, 0)
	if !ok || end.Err != nil {
		return fmt.Errorf("end offset of %s: %v", *topic, end.Err)
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{*topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.ClientID("bench-compaction-reader"))
	if err != nil {
		return err
	}
	defer cons.Close()
	lastRound := map[string]int{}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for next := int64(0); next < end.Offset; {
		fetches := cons.PollFetches(rctx)
		if rctx.Err() != nil {
			return fmt.Errorf("read %s: at offset %d of %d: %w", *topic, next, end.Offset, rctx.Err())
		}
		var ferr error
		fetches.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return fmt.Errorf("read %s: %w", *topic, ferr)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			res.ReadRecords++
			round, _ := strconv.Atoi(string(r.Value[:10]))
			lastRound[string(r.Key)] = round
			next = r.Offset + 1
		})
	}
	res.ReadKeys = len(lastRound)
	for k := 0; k < *keys; k++ {
		key := fmt.Sprintf("key-%07d", k)
		want := (*records - 1 - k) / *keys
		if got, ok := lastRound[key]; !ok || got != want {
			res.StaleKeys++
		}
	}
	fmt.Fprintf(stderr, "%s: read %d records of %d keys; %d keys without their last value\n", *system, res.ReadRecords, res.ReadKeys, res.StaleKeys)
	if *jsonOut != "" {
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "| %s | %.0f | %s | %s | %.1f s | %d → %d | %d | %d | %d |\n", *system, res.ProducePerSec,
		mib(res.BytesProduced), mib(res.BytesCompacted), res.CompactSeconds, res.SegmentsProduced, res.SegmentsAtEnd,
		res.ReadRecords, res.ReadKeys, res.StaleKeys)
	if res.StaleKeys > 0 || res.ReadKeys != *keys {
		return fmt.Errorf("%s: %d keys read, %d without their last value", *system, res.ReadKeys, res.StaleKeys)
	}
	return nil
}

// dirsBytes sums dirBytes over dirs.
func dirsBytes(dirs []string) (bytes int64, segments int, err error) {
	for _, d := range dirs {
		n, segs, err := dirBytes(d)
		if err != nil {
			return 0, 0, err
		}
		bytes, segments = bytes+n, segments+segs
	}
	return bytes, segments, nil
}

// dirBytes sums the disk space the files under dir take (their allocated
// blocks, as du counts them: Kafka preallocates each segment's index files at
// 10 MiB, sparse, which their sizes would count), but for Kafka's segments
// replaced by its cleaner, which wait as *.deleted for file.delete.delay.ms
// (a minute) before they go; and counts the segment files (*.log) there.
func dirBytes(dir string) (n int64, segments int, err error) {
	err = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // a file removed under the walk
			}
			return err
		}
		if d.IsDir() || strings.HasSuffix(d.Name(), ".deleted") {
			return nil
		}
		if strings.HasSuffix(d.Name(), ".log") {
			segments++
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			n += st.Blocks * 512
		} else {
			n += info.Size()
		}
		return nil
	})
	return n, segments, err
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
