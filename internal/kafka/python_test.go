package kafka_test

import (
	"bytes"
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/tern-mq/tern/internal/testenv"
)

// python is the project's virtual environment's interpreter, where scripts/deps.sh
// installs kafka-python and confluent-kafka.
func python(t *testing.T) string { return testenv.Python(t, "kafka-python and confluent-kafka") }

// Each script consumes N records of topic T in group G from the group's committed
// offsets (the topic's start when it has none), prints their values, commits
// synchronously and leaves the group. Arguments: address, topic, group, N.
var pythonGroupScripts = map[string]string{
	"kafka-python": `
import sys, time
from kafka import KafkaConsumer
addr, topic, group, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
c = KafkaConsumer(bootstrap_servers=addr, group_id=group, auto_offset_reset='earliest',
                  enable_auto_commit=False, session_timeout_ms=10000, heartbeat_interval_ms=500)
# The topic's metadata before the group is joined: kafka-python 3.0.12 that joins
# first assigns nothing, rejoins once the metadata comes, and then, now and then,
# never applies the second SyncGroup's assignment (the server's answer carries
# it; the consumer never fetches).
c.partitions_for_topic(topic)
c.subscribe([topic])
got, deadline = [], time.time() + 25
while len(got) < n and time.time() < deadline:
    for recs in c.poll(timeout_ms=200).values():
        got += [r.value.decode() for r in recs]
c.commit()
c.close()
print("\n".join(got))
`,
	"confluent-kafka": `
import sys, time
from confluent_kafka import Consumer
addr, topic, group, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
c = Consumer({'bootstrap.servers': addr, 'group.id': group, 'auto.offset.reset': 'earliest',
              'enable.auto.commit': False})
c.subscribe([topic])
got, deadline = [], time.time() + 25
while len(got) < n and time.time() < deadline:
    m = c.poll(0.2)
    if m is None or m.error():
        continue
    got.append(m.value().decode())
c.commit(asynchronous=False)
c.close()
print("\n".join(got))
`,
}

// TestPythonGroups: kafka-python's and confluent-kafka's group consumers read a
// topic through a consumer group, commit, and a second run of the group reads
// only the records produced since.
func TestPythonGroups(t *testing.T) {
	py := python(t)
	_, addr := startTern(t, fastGroups)
	prod := newClient(t, addr)
	for name, script := range pythonGroupScripts {
		t.Run(name, func(t *testing.T) {
			topic, grp := "py-"+name, "py.group."+name
			run := func(n int) []string {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				cmd := exec.CommandContext(ctx, py, "-c", script, addr, topic, grp, strconv.Itoa(n))
				var out, errOut bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &errOut
				if err := cmd.Run(); err != nil {
					t.Fatalf("%s: %v\n%s", name, err, errOut.String())
				}
				return strings.Fields(out.String())
			}
			createTopic(t, kadm.NewClient(prod), topic, 1)
			produceN(t, prod, topic, 0, 5)
			if got := run(5); strings.Join(got, " ") != "0 1 2 3 4" {
				t.Fatalf("first run consumed %v", got)
			}
			produceN(t, prod, topic, 5, 2)
			if got := run(2); strings.Join(got, " ") != "5 6" {
				t.Fatalf("second run consumed %v, want only the new records", got)
			}
		})
	}
}
