package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/testenv"
)

// Apache Kafka's own tools (kafka-tools, Java) against Tern. scripts/deps.sh installs
// the jars from Maven Central into bench/.tools/kafka-<version>/libs with
// bench/kafka.sh's kafka_install, the version being that file's KAFKA_VERSION, and a
// Java 17 runtime.

// repoRoot is the repository's root.
func repoRoot(t *testing.T) string { return testenv.Root(t) }

// kafkaLibs is the directory of Kafka's jars that bench/kafka.sh installs.
func kafkaLibs(t *testing.T) string {
	t.Helper()
	root := repoRoot(t)
	script, err := os.ReadFile(filepath.Join(root, "bench", "kafka.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^KAFKA_VERSION=(\S+)$`).FindSubmatch(script)
	if m == nil {
		t.Fatal("bench/kafka.sh sets no KAFKA_VERSION")
	}
	libs := filepath.Join(root, "bench", ".tools", "kafka-"+string(m[1]), "libs")
	if _, err := os.Stat(filepath.Join(libs, ".installed")); err != nil {
		t.Fatalf("Kafka %s's jars are not installed in %s (scripts/deps.sh installs them): %v", m[1], libs, err)
	}
	return libs
}

// javaCmd is the command that runs a main class of Kafka's jars (or a
// single-file source program, class being its path) with args, killed when
// ctx ends, logging warnings and errors to its standard error. It fails the
// test when there is no java.
func javaCmd(ctx context.Context, t *testing.T, class string, args ...string) *exec.Cmd {
	t.Helper()
	libs := kafkaLibs(t)
	java, lerr := exec.LookPath("java")
	if lerr != nil {
		t.Fatalf("java not installed (scripts/deps.sh installs a Java 17 JDK): %v", lerr)
	}
	// Log warnings and errors to stderr, without the configuration dumps of INFO.
	log4j := filepath.Join(t.TempDir(), "log4j2.properties")
	if err := os.WriteFile(log4j, []byte(`status = warn
appender.console.type = Console
appender.console.name = CONSOLE
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.console.ref = CONSOLE
`), 0o644); err != nil {
		t.Fatal(err)
	}
	// A small heap, the client compiler only and the serial collector: short runs of
	// a client start faster and take less of a busy machine's CPUs so.
	jvm := []string{"-Xmx256M", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Djava.awt.headless=true",
		"-Duser.language=en", "-Duser.country=US", "-Dlog4j2.configurationFile=" + log4j,
		"-cp", filepath.Join(libs, "*"), class}
	cmd := exec.CommandContext(ctx, java, append(jvm, args...)...)
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// kafkaTool runs a main class of Kafka's jars as a child process with the given
// standard input, killed after timeout, and returns its standard output and error.
// It fails the test when the tool cannot start; the tool's exit status is err.
func kafkaTool(t *testing.T, timeout time.Duration, stdin, class string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := javaCmd(ctx, t, class, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	err = cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("killed after %v: %w", timeout, err)
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) && ctx.Err() == nil {
		t.Fatalf("%s: %v", class, err)
	}
	t.Logf("%s %s: %v in %v", class[strings.LastIndex(class, ".")+1:], strings.Join(args, " "), err, time.Since(start).Round(time.Millisecond))
	return out.String(), errOut.String(), err
}

// TestJavaConsoleProducerConsumer: Kafka's console producer sends lines with keys
// and headers (parse.key, parse.headers) to an auto-created topic; a native Tern
// subscriber of the topic's subject gets each record with its key and headers; the
// console consumer reads them back from the beginning (--max-messages) with their
// keys, headers and offsets, and franz-go sees the same keys, values and headers.
func TestJavaConsoleProducerConsumer(t *testing.T) {
	s, addr := startTern(t, nil)
	const topic, n = "java-console", 100
	nc := native(t, s)
	sub, err := nc.SubscribeSync(topic)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// Lines are headers|key|value; headers are k:v pairs separated by commas.
	var in, want strings.Builder
	for i := range n {
		fmt.Fprintf(&in, "origin:java,n:%d|key-%d|value %d from the console producer\n", i, i%7, i)
		fmt.Fprintf(&want, "Offset:%d|origin:java,n:%d|key-%d|value %d from the console producer\n", i, i, i%7, i)
	}
	_, errOut, err := kafkaTool(t, 60*time.Second, in.String(), "org.apache.kafka.tools.ConsoleProducer",
		"--bootstrap-server", addr, "--topic", topic,
		"--reader-property", "parse.key=true", "--reader-property", "key.separator=|",
		"--reader-property", "parse.headers=true", "--reader-property", "headers.delimiter=|",
		"--command-property", "acks=all", "--command-property", "linger.ms=5")
	if err != nil {
		t.Fatalf("console producer: %v\n%s", err, errOut)
	}

	for i := range n {
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("native subscriber, message %d: %v", i, err)
		}
		if string(m.Data) != fmt.Sprintf("value %d from the console producer", i) || m.Header.Get("Tern-Key") != fmt.Sprintf("key-%d", i%7) ||
			m.Header.Get("origin") != "java" || m.Header.Get("n") != strconv.Itoa(i) {
			t.Fatalf("native subscriber, message %d: %q with headers %v", i, m.Data, m.Header)
		}
		if ts, err := strconv.ParseInt(m.Header.Get("Tern-Timestamp"), 10, 64); err != nil || time.Since(time.UnixMilli(ts)).Abs() > time.Minute {
			t.Fatalf("native subscriber, message %d: Tern-Timestamp %q, want the producer's time", i, m.Header.Get("Tern-Timestamp"))
		}
	}

	out, errOut, err := kafkaTool(t, 60*time.Second, "", "org.apache.kafka.tools.consumer.ConsoleConsumer",
		"--bootstrap-server", addr, "--topic", topic, "--partition", "0", "--offset", "earliest",
		"--max-messages", strconv.Itoa(n), "--timeout-ms", "30000",
		"--formatter-property", "print.key=true", "--formatter-property", "print.headers=true",
		"--formatter-property", "print.offset=true", "--formatter-property", "key.separator=|")
	if err != nil {
		t.Fatalf("console consumer: %v\n%s", err, errOut)
	}
	if out != want.String() {
		t.Fatalf("console consumer printed:\n%s\nwant:\n%s", out, want.String())
	}
	if !strings.Contains(errOut, fmt.Sprintf("Processed a total of %d messages", n)) {
		t.Fatalf("console consumer's summary: %s", errOut)
	}

	got := consume(t, addr, topic, n)
	for i, r := range got {
		wantHeaders := []kgo.RecordHeader{{Key: "origin", Value: []byte("java")}, {Key: "n", Value: []byte(strconv.Itoa(i))}}
		if string(r.Key) != fmt.Sprintf("key-%d", i%7) || string(r.Value) != fmt.Sprintf("value %d from the console producer", i) ||
			!slices.EqualFunc(r.Headers, wantHeaders, func(a, b kgo.RecordHeader) bool { return a.Key == b.Key && string(a.Value) == string(b.Value) }) {
			t.Fatalf("franz-go read record %d: key %q value %q headers %v", i, r.Key, r.Value, r.Headers)
		}
	}
}

// TestJavaTopicCommand: Kafka's topic admin tool (TopicCommand) creates a topic of 3
// partitions with a retention, describes it, adds partitions to it, lists it and
// deletes it; each step is checked through Tern's own stream API.
func TestJavaTopicCommand(t *testing.T) {
	s, addr := startTern(t, nil)
	nc := native(t, s)
	ctx := ctxT(t)
	const topic = "java-admin"
	topicCommand := func(args ...string) (string, string, error) {
		return kafkaTool(t, 60*time.Second, "", "org.apache.kafka.tools.TopicCommand", append([]string{"--bootstrap-server", addr}, args...)...)
	}

	out, errOut, err := topicCommand("--create", "--topic", topic, "--partitions", "3", "--config", "retention.ms=3600000")
	if err != nil || !strings.Contains(out, "Created topic "+topic+".") {
		// The topic may have been made all the same: go on, to report what follows too.
		t.Errorf("create: %v\nstdout: %s\nstderr: %s", err, out, errOut)
	}
	info, err := nc.Streams().StreamInfo(ctx, topic)
	if err != nil {
		t.Fatalf("stream after create: %v", err)
	}
	if info.Config.Partitions != 3 || time.Duration(info.Config.MaxAge) != time.Hour || !slices.Equal(info.Config.Subjects, []string{topic}) {
		t.Fatalf("stream after create: %+v", info.Config)
	}

	out, errOut, err = topicCommand("--describe", "--topic", topic)
	if err != nil {
		t.Fatalf("describe: %v\n%s", err, errOut)
	}
	for _, want := range []string{"Topic: " + topic + "\t", "PartitionCount: 3\t", "ReplicationFactor: 1\t", "retention.ms=3600000"} {
		if !strings.Contains(out, want) {
			t.Fatalf("describe lacks %q:\n%s", want, out)
		}
	}
	for p := range 3 {
		if want := fmt.Sprintf("Partition: %d\tLeader: 0\tReplicas: 0\tIsr: 0", p); !strings.Contains(out, want) {
			t.Fatalf("describe lacks %q:\n%s", want, out)
		}
	}

	// --alter --partitions adds partitions; fewer are refused with the tool's
	// report of the error.
	if out, errOut, err = topicCommand("--alter", "--topic", topic, "--partitions", "5"); err != nil {
		t.Fatalf("alter to 5 partitions: %v\n%s%s", err, out, errOut)
	}
	if info, err := nc.Streams().StreamInfo(ctx, topic); err != nil || info.Config.Partitions != 5 || len(info.State.Parts) != 5 || time.Duration(info.Config.MaxAge) != time.Hour {
		t.Fatalf("stream after alter: %v %+v", err, info)
	}
	out, errOut, err = topicCommand("--alter", "--topic", topic, "--partitions", "2")
	if err == nil && !strings.Contains(out+errOut, "InvalidPartitionsException") {
		t.Fatalf("alter to 2 partitions was not refused:\n%s%s", out, errOut)
	}
	if !strings.Contains(out+errOut, "not removed") {
		t.Fatalf("alter to 2 partitions: no reason given:\n%s%s", out, errOut)
	}

	// A stream made by the stream API is a topic too.
	if _, err := nc.Streams().AddStream(ctx, tern.StreamConfig{Name: "native-made", Subjects: []string{"native-made"}}); err != nil {
		t.Fatal(err)
	}
	out, errOut, err = topicCommand("--list")
	if err != nil {
		t.Fatalf("list: %v\n%s", err, errOut)
	}
	if lines := strings.Fields(out); !slices.Contains(lines, topic) || !slices.Contains(lines, "native-made") {
		t.Fatalf("list: %q, want %s and native-made", lines, topic)
	}

	out, errOut, err = topicCommand("--delete", "--topic", topic)
	if err != nil {
		t.Fatalf("delete: %v\n%s%s", err, out, errOut)
	}
	if _, err := nc.Streams().StreamInfo(ctx, topic); !errors.Is(err, tern.ErrStreamNotFound) {
		t.Fatalf("stream after delete: %v", err)
	}
	out, errOut, err = topicCommand("--list")
	if lines := strings.Fields(out); err != nil || slices.Contains(lines, topic) || !slices.Contains(lines, "native-made") {
		t.Fatalf("list after delete: %v %q\n%s", err, out, errOut)
	}
}

// TestJavaProducerPerformance: Kafka's ProducerPerformance sends 20,000 records of
// 100 bytes with acks=all (idempotent, the producer's default) and with acks=1; its
// report counts every record sent and the stream holds every one. A smoke test of
// the load tool the benchmarks use, not a measurement.
func TestJavaProducerPerformance(t *testing.T) {
	s, addr := startTern(t, nil)
	nc := native(t, s)
	const n = 20000
	for _, acks := range []string{"all", "1"} {
		t.Run("acks="+acks, func(t *testing.T) {
			topic := "java-perf-acks-" + acks
			out, errOut, err := kafkaTool(t, 90*time.Second, "", "org.apache.kafka.tools.ProducerPerformance",
				"--bootstrap-server", addr, "--topic", topic, "--num-records", strconv.Itoa(n), "--record-size", "100",
				"--throughput", "-1", "--command-property", "acks="+acks)
			if err != nil {
				t.Fatalf("ProducerPerformance: %v\nstdout: %s\nstderr: %s", err, out, errOut)
			}
			// The last line is the total: "20000 records sent, ... records/sec (... MB/sec), ...".
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if last := lines[len(lines)-1]; !strings.HasPrefix(last, fmt.Sprintf("%d records sent, ", n)) {
				t.Fatalf("ProducerPerformance's report: %q\nstderr: %s", out, errOut)
			}
			if strings.Contains(errOut, "ERROR") || strings.Contains(errOut, "Exception") {
				t.Fatalf("ProducerPerformance logged errors:\n%s", errOut)
			}
			info, err := nc.Streams().StreamInfo(ctxT(t), topic)
			if err != nil || info.State.Msgs != n || info.State.LastSeq != n {
				t.Fatalf("stream %s: %v %+v, want %d messages", topic, err, info, n)
			}
			// The producer was idempotent with acks=all: the last record carries the
			// message id of its producer's sequence n-1 (epoch 0, partition 0); with
			// acks=1 it was not, and its records have no message id.
			m, err := nc.Streams().GetMsg(ctxT(t), topic, 0, n)
			if err != nil || len(m.Data) != 100 {
				t.Fatalf("last message: %v %+v", err, m)
			}
			idem := regexp.MustCompile(fmt.Sprintf(`Tern-Msg-Id.kafka:\d+:0:0#%d(\D|$)`, n-1)).Match(m.Header)
			if idem != (acks == "all") || (acks != "all" && bytes.Contains(m.Header, []byte("Tern-Msg-Id"))) {
				t.Fatalf("acks=%s: last message's headers %q", acks, m.Header)
			}
		})
	}
}

// TestJavaConsumerPerformance: Kafka's ConsumerPerformance reads 20,000 records of
// 100 bytes (produced by franz-go) and reports every one consumed. It subscribes
// with a consumer group (ConsumerPerformance has no assign mode), so it needs
// FindCoordinator, JoinGroup and SyncGroup.
func TestJavaConsumerPerformance(t *testing.T) {
	_, addr := startTern(t, nil)
	const topic, n, size = "java-perf-consume", 20000, 100
	cl := newClient(t, addr, kgo.AllowAutoTopicCreation(), kgo.ProducerLinger(5*time.Millisecond))
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Value: bytes.Repeat([]byte{'a' + byte(i%26)}, size)}
	}
	if err := cl.ProduceSync(ctxT(t), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := kafkaTool(t, 90*time.Second, "", "org.apache.kafka.tools.ConsumerPerformance",
		"--bootstrap-server", addr, "--topic", topic, "--num-records", strconv.Itoa(n), "--timeout", "30000")
	if err != nil {
		t.Fatalf("ConsumerPerformance: %v\nstdout: %s\nstderr: %s", err, out, errOut)
	}
	// A header line, then: start.time, end.time, data.consumed.in.MB, MB.sec,
	// data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms, ...
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg,") {
		t.Fatalf("ConsumerPerformance's report:\n%s\nstderr: %s", out, errOut)
	}
	cols := strings.Split(lines[1], ", ")
	if len(cols) < 6 || cols[4] != strconv.Itoa(n) {
		t.Fatalf("ConsumerPerformance consumed %q records, want %d:\n%s\nstderr: %s", cols, n, out, errOut)
	}
	// The tool prints MB rounded to 4 decimals.
	if mb, err := strconv.ParseFloat(cols[2], 64); err != nil || mb < float64(n*size)/(1<<20)-0.0001 {
		t.Fatalf("ConsumerPerformance consumed %s MB, want at least %.4f", cols[2], float64(n*size)/(1<<20))
	}
	if strings.Contains(errOut, "WARNING: Exiting before consuming") {
		t.Fatalf("ConsumerPerformance timed out:\n%s", errOut)
	}
}

// TestJavaConfigAndRecordsTools: Kafka's ConfigCommand changes a topic's retention
// and record size limit (IncrementalAlterConfigs), shows them (DescribeConfigs) and
// deletes one back to its default; GetOffsetShell lists the partition's end and start
// offsets (ListOffsets); DeleteRecordsCommand removes the records below an offset,
// which the stream and a franz-go consumer see.
func TestJavaConfigAndRecordsTools(t *testing.T) {
	s, addr := startTern(t, nil)
	nc := native(t, s)
	ctx := ctxT(t)
	const topic = "java-configs"
	cl := newClient(t, addr, kgo.AllowAutoTopicCreation())
	for i := range 10 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "record %d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	tool := func(class string, args ...string) string {
		t.Helper()
		out, errOut, err := kafkaTool(t, 60*time.Second, "", class, append([]string{"--bootstrap-server", addr}, args...)...)
		if err != nil {
			t.Fatalf("%s %s: %v\nstdout: %s\nstderr: %s", class, strings.Join(args, " "), err, out, errOut)
		}
		return out
	}
	const configs = "org.apache.kafka.tools.ConfigCommand"

	out := tool(configs, "--alter", "--entity-type", "topics", "--entity-name", topic, "--add-config", "retention.ms=7200000,max.message.bytes=500000")
	if !strings.Contains(out, "Completed updating config for topic "+topic+".") {
		t.Fatalf("alter: %s", out)
	}
	info, err := nc.Streams().StreamInfo(ctx, topic)
	if err != nil || time.Duration(info.Config.MaxAge) != 2*time.Hour || info.Config.MaxMsgSize != 500000 {
		t.Fatalf("stream after alter: %v %+v", err, info)
	}
	out = tool(configs, "--describe", "--entity-type", "topics", "--entity-name", topic)
	for _, want := range []string{"  retention.ms=7200000 ", "  max.message.bytes=500000 "} {
		if !strings.Contains(out, want) {
			t.Fatalf("describe lacks %q:\n%s", want, out)
		}
	}
	tool(configs, "--alter", "--entity-type", "topics", "--entity-name", topic, "--delete-config", "retention.ms")
	if info, err = nc.Streams().StreamInfo(ctx, topic); err != nil || info.Config.MaxAge != 0 || info.Config.MaxMsgSize != 500000 {
		t.Fatalf("stream after deleting retention.ms: %v %+v", err, info)
	}

	if out := tool("org.apache.kafka.tools.GetOffsetShell", "--topic", topic); out != topic+":0:10\n" {
		t.Fatalf("end offsets: %q", out)
	}
	offsets := filepath.Join(t.TempDir(), "offsets.json")
	if err := os.WriteFile(offsets, fmt.Appendf(nil, `{"version":1,"partitions":[{"topic":%q,"partition":0,"offset":4}]}`, topic), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := tool("org.apache.kafka.tools.DeleteRecordsCommand", "--offset-json-file", offsets); !strings.Contains(out, "partition: "+topic+"-0\tlow_watermark: 4") {
		t.Fatalf("delete records: %s", out)
	}
	if info, err = nc.Streams().StreamInfo(ctx, topic); err != nil || info.State.FirstSeq != 5 || info.State.Msgs != 6 {
		t.Fatalf("stream after deleting records: %v %+v", err, info.State)
	}
	if out := tool("org.apache.kafka.tools.GetOffsetShell", "--topic", topic, "--time", "-2"); out != topic+":0:4\n" {
		t.Fatalf("start offsets: %q", out)
	}
	got := consume(t, addr, topic, 6)
	for i, r := range got {
		if r.Offset != int64(i+4) || string(r.Value) != fmt.Sprintf("record %d", i+4) {
			t.Fatalf("record %d after deleting records: offset %d value %q", i, r.Offset, r.Value)
		}
	}
}

// TestJavaConsumerGroupCommand: Kafka's consumer group tool (kafka-consumer-groups)
// lists a group that committed offsets, describes its offsets and lag per
// partition, resets them to the earliest, deletes the offsets of a topic
// (OffsetDelete) and deletes the group.
func TestJavaConsumerGroupCommand(t *testing.T) {
	_, addr := startTern(t, nil)
	const topic, grp = "java-groups", "java-g"
	cl := newClient(t, addr, kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	adm := kadm.NewClient(cl)
	ctx := ctxT(t)
	if r, err := adm.CreateTopic(ctx, 2, -1, nil, topic); err != nil || r.Err != nil {
		t.Fatalf("create: %v %v", err, r.Err)
	}
	var recs []*kgo.Record
	for i := range 20 {
		recs = append(recs, &kgo.Record{Topic: topic, Value: []byte(strconv.Itoa(i))})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var os kadm.Offsets
	os.AddOffset(topic, 0, 7, -1)
	os.AddOffset(topic, 1, 3, -1)
	if r, err := adm.CommitOffsets(ctx, grp, os); err != nil || r.Error() != nil {
		t.Fatalf("commit: %v %v", err, r.Error())
	}
	groups := func(args ...string) string {
		t.Helper()
		out, errOut, err := kafkaTool(t, 60*time.Second, "", "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", append([]string{"--bootstrap-server", addr}, args...)...)
		if err != nil {
			t.Fatalf("%v: %v\n%s%s", args, err, out, errOut)
		}
		return out
	}
	if out := groups("--list"); !slices.Contains(strings.Fields(out), grp) {
		t.Fatalf("--list lacks %s:\n%s", grp, out)
	}
	// GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG ...
	row := func(out string, p int) []string {
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) >= 6 && f[0] == grp && f[1] == topic && f[2] == strconv.Itoa(p) {
				return f
			}
		}
		t.Fatalf("no row for partition %d:\n%s", p, out)
		return nil
	}
	out := groups("--describe", "--group", grp)
	if f := row(out, 0); f[3] != "7" || f[4] != "10" || f[5] != "3" {
		t.Fatalf("partition 0 described as %v, want offset 7, end 10, lag 3:\n%s", f, out)
	}
	if f := row(out, 1); f[3] != "3" || f[5] != "7" {
		t.Fatalf("partition 1 described as %v, want offset 3, lag 7:\n%s", f, out)
	}
	groups("--reset-offsets", "--to-earliest", "--execute", "--group", grp, "--topic", topic)
	offs, err := adm.FetchOffsets(ctx, grp)
	if err != nil {
		t.Fatal(err)
	}
	for p := range int32(2) {
		if o, _ := offs.Lookup(topic, p); o.At != 0 {
			t.Fatalf("partition %d after --reset-offsets --to-earliest: %+v", p, o)
		}
	}
	if out := groups("--delete-offsets", "--group", grp, "--topic", topic); !strings.Contains(out, "Successful") {
		t.Fatalf("--delete-offsets:\n%s", out)
	}
	if offs, err = adm.FetchOffsets(ctx, grp); err != nil {
		t.Fatal(err)
	}
	if _, ok := offs.Lookup(topic, 0); ok {
		t.Fatalf("offsets after --delete-offsets: %+v", offs)
	}
	os = kadm.Offsets{}
	os.AddOffset(topic, 0, 1, -1)
	if r, err := adm.CommitOffsets(ctx, grp, os); err != nil || r.Error() != nil {
		t.Fatalf("commit: %v %v", err, r.Error())
	}
	if out := groups("--delete", "--group", grp); !strings.Contains(out, "successful") {
		t.Fatalf("--delete:\n%s", out)
	}
	if out := groups("--list"); slices.Contains(strings.Fields(out), grp) {
		t.Fatalf("--list after --delete still has %s:\n%s", grp, out)
	}
}
