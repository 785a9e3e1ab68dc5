package mqtt_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
)

// TestMosquittoPubSub sends messages between the Debian mosquitto clients through
// Tern at every QoS and protocol version.
func TestMosquittoPubSub(t *testing.T) {
	s, port := startTern(t, nil)
	for _, version := range []string{"mqttv31", "mqttv311", "mqttv5"} {
		for qos := 0; qos <= 2; qos++ {
			t.Run(fmt.Sprintf("%s/qos%d", version, qos), func(t *testing.T) {
				topic := fmt.Sprintf("pubsub/%s/q%d", version, qos)
				before := clientSubs(s)
				sub := mosqSub(t, port, "-V", version, "-q", strconv.Itoa(qos), "-t", topic, "-C", "5", "-W", "20", "-F", "%t %q %p")
				waitSubs(t, s, before+1)
				var in strings.Builder
				for i := range 5 {
					fmt.Fprintf(&in, "m%d\n", i)
				}
				p := startProc(t, "sh", "-c", fmt.Sprintf("printf '%s' | mosquitto_pub -h 127.0.0.1 -p %s -V %s -q %d -t %s -l",
					in.String(), port, version, qos, topic))
				p.wait(t, 20*time.Second)
				got := lines(sub.wait(t, 20*time.Second))
				var want []string
				for i := range 5 {
					want = append(want, fmt.Sprintf("%s %d m%d", topic, qos, i))
				}
				if !slices.Equal(got, want) {
					t.Fatalf("got %q, want %q", got, want)
				}
			})
		}
	}
}

// TestMosquittoWildcardsAndDots checks '+', '#' (which also matches its parent) and a
// '.' inside a level.
func TestMosquittoWildcardsAndDots(t *testing.T) {
	s, port := startTern(t, nil)
	sub := mosqSub(t, port, "-t", "home/+/temp", "-t", "office/#", "-C", "4", "-W", "20", "-F", "%t=%p")
	waitSubs(t, s, 3) // office/# is two broker subscriptions
	for _, tp := range []string{"home/k1/temp", "home/k1/hum", "office", "office/a/b", "v1.2/x", "home/k.2/temp"} {
		mosqPub(t, port, "-t", tp, "-m", "x")
	}
	got := lines(sub.wait(t, 20*time.Second))
	want := []string{"home/k1/temp=x", "office=x", "office/a/b=x", "home/k.2/temp=x"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// TestMosquittoRetained covers storing, wildcard delivery on subscribe, replacement
// and clearing with an empty retained publish.
func TestMosquittoRetained(t *testing.T) {
	_, port := startTern(t, nil)
	mosqPub(t, port, "-t", "status/a", "-m", "old", "-r", "-q", "1")
	mosqPub(t, port, "-t", "status/a", "-m", "on", "-r", "-q", "1")
	mosqPub(t, port, "-t", "status/b", "-m", "off", "-r")
	mosqPub(t, port, "-t", "status/c", "-m", "not kept")
	out := mosqSub(t, port, "-t", "status/#", "-C", "2", "-W", "10", "-F", "%t=%p %r").wait(t, 15*time.Second)
	got := lines(out)
	slices.Sort(got)
	if want := []string{"status/a=on 1", "status/b=off 1"}; !slices.Equal(got, want) {
		t.Fatalf("retained on subscribe: got %q, want %q", got, want)
	}
	mosqPub(t, port, "-t", "status/a", "-r", "-n")
	out = mosqSub(t, port, "-t", "status/#", "-C", "1", "-W", "10", "-F", "%t=%p").wait(t, 15*time.Second)
	if got := lines(out); !slices.Equal(got, []string{"status/b=off"}) {
		t.Fatalf("after clearing status/a: got %q", got)
	}
}

// TestNativeAndMQTTInterop: a native publish reaches an MQTT subscriber and an MQTT
// publish reaches a native subscriber and a stream, on the same subjects.
func TestNativeAndMQTTInterop(t *testing.T) {
	s, port := startTern(t, nil)
	nc, err := tern.Connect(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	sub := mosqSub(t, port, "-t", "sensors/+/temp", "-C", "1", "-W", "10", "-F", "%t=%p")
	waitSubs(t, s, 1)
	if err := nc.Publish("sensors.k1.temp", []byte("21.5")); err != nil {
		t.Fatal(err)
	}
	if got := lines(sub.wait(t, 15*time.Second)); !slices.Equal(got, []string{"sensors/k1/temp=21.5"}) {
		t.Fatalf("native to MQTT: got %q", got)
	}

	ch := make(chan *tern.Msg, 4)
	nsub, err := nc.ChanSubscribe("cmd.>", ch)
	if err != nil {
		t.Fatal(err)
	}
	defer nsub.Unsubscribe()
	js := nc.Streams()
	ctx := context.Background()
	if _, err := js.AddStream(ctx, tern.StreamConfig{Name: "CMDS", Subjects: []string{"cmd.>"}}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	mosqPub(t, port, "-t", "cmd/k1/v1.2", "-m", "reboot", "-q", "1")
	select {
	case m := <-ch:
		if m.Subject != "cmd.k1.v1%2E2" || string(m.Data) != "reboot" {
			t.Fatalf("MQTT to native: got %q %q", m.Subject, m.Data)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("native subscriber got nothing")
	}
	// The stream stores asynchronously to the delivery above: wait for it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		info, err := js.StreamInfo(ctx, "CMDS")
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream holds %d messages, want 1", info.State.Msgs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
