package tern_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"sort"
	"time"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/server"
)

// exampleServer starts a broker on a free loopback port for the examples.
func exampleServer() (*server.Server, func()) {
	cfg := server.DefaultConfig()
	cfg.Host, cfg.Port, cfg.HTTPAddr, cfg.MQTTPort, cfg.MQTTWSPort, cfg.UDPPort = "127.0.0.1", 0, "", 0, 0, -1
	dir, err := os.MkdirTemp("", "tern-example-")
	if err != nil {
		log.Fatal(err)
	}
	cfg.StoreDir, cfg.KafkaPort = dir, 0
	s, err := server.New(cfg, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := s.Start(); err != nil {
		log.Fatal(err)
	}
	return s, func() {
		_ = s.Shutdown(context.Background())
		_ = os.RemoveAll(dir)
	}
}

func Example() {
	s, stop := exampleServer()
	defer stop()

	nc, err := tern.Connect(s.URL(), tern.Name("example"))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()

	sub, _ := nc.SubscribeSync("sensors.*.temp")
	_ = nc.Publish("sensors.k1.temp", []byte("21.5"))
	m, _ := sub.NextMsg(time.Second)
	fmt.Println(m.Subject, string(m.Data))
	// Output: sensors.k1.temp 21.5
}

func ExampleConn_QueueSubscribe() {
	s, stop := exampleServer()
	defer stop()
	nc, _ := tern.Connect(s.URL())
	defer nc.Close()

	got := make(chan string, 6)
	for _, worker := range []string{"w1", "w2", "w3"} {
		_, _ = nc.QueueSubscribe("jobs", "workers", func(m *tern.Msg) { got <- worker })
	}
	for i := 0; i < 6; i++ {
		_ = nc.Publish("jobs", []byte("job"))
	}
	var who []string
	for i := 0; i < 6; i++ {
		who = append(who, <-got)
	}
	sort.Strings(who)
	fmt.Println(who) // each job went to exactly one worker, spread evenly
	// Output: [w1 w1 w2 w2 w3 w3]
}

func ExampleFilter() {
	s, stop := exampleServer()
	defer stop()
	nc, _ := tern.Connect(s.URL())
	defer nc.Close()

	sub, _ := nc.SubscribeSync("events", tern.Filter(`hdr.sender == "s1" && size <= 4`))
	for _, sender := range []string{"s1", "s2", "s1"} {
		_ = nc.PublishMsg(&tern.Msg{Subject: "events", Header: tern.Header{"sender": {sender}}, Data: []byte("from " + sender)})
	}
	_ = nc.PublishMsg(&tern.Msg{Subject: "events", Header: tern.Header{"sender": {"s1"}}, Data: []byte("ok")})
	m, _ := sub.NextMsg(time.Second)
	fmt.Println(string(m.Data)) // only the short message from s1 passes
	// Output: ok
}

func ExampleConn_Request() {
	s, stop := exampleServer()
	defer stop()
	nc, _ := tern.Connect(s.URL())
	defer nc.Close()

	_, _ = nc.Subscribe("greet.*", func(m *tern.Msg) {
		_ = m.Respond([]byte("hello " + string(m.Data)))
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	reply, err := nc.Request(ctx, "greet.en", []byte("world"))
	fmt.Println(string(reply.Data), err)

	_, err = nc.Request(ctx, "nobody.listens", nil)
	fmt.Println(err)
	// Output:
	// hello world <nil>
	// tern: no responders
}

func ExampleConn_ChanSubscribe() {
	s, stop := exampleServer()
	defer stop()
	nc, _ := tern.Connect(s.URL())
	defer nc.Close()

	ch := make(chan *tern.Msg, 64)
	sub, _ := nc.ChanSubscribe("orders.>", ch)
	_ = sub.AutoUnsubscribe(2)
	_ = nc.PublishMsg(&tern.Msg{Subject: "orders.new", Header: tern.Header{"id": {"7"}}, Data: []byte("book")})
	_ = nc.Publish("orders.cancel", []byte("pen"))
	_ = nc.Publish("orders.new", []byte("after the second: not delivered"))
	for i := 0; i < 2; i++ {
		m := <-ch
		fmt.Println(m.Subject, m.Header.Get("id"), string(m.Data))
	}
	// Output:
	// orders.new 7 book
	// orders.cancel  pen
}

func ExampleConn_Drain() {
	s, stop := exampleServer()
	defer stop()
	nc, _ := tern.Connect(s.URL())
	pub, _ := tern.Connect(s.URL())
	defer pub.Close()

	handled := 0
	_, _ = nc.QueueSubscribe("jobs", "workers", func(*tern.Msg) {
		time.Sleep(time.Millisecond) // a slow worker
		handled++
	})
	for i := 0; i < 20; i++ {
		_ = pub.Publish("jobs", nil)
	}
	_ = pub.Flush()
	// Every job already sent to this worker is handled before the connection closes.
	err := nc.Drain()
	fmt.Println(handled, err, nc.Status())
	// Output: 20 <nil> closed
}

func ExampleStreams() {
	s, stop := exampleServer()
	defer stop()
	nc, _ := tern.Connect(s.URL())
	defer nc.Close()
	ctx := context.Background()
	js := nc.Streams()

	// A work queue: each message is removed once a consumer acknowledges it.
	if _, err := js.AddStream(ctx, tern.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, Retention: "workqueue"}); err != nil {
		log.Fatal(err)
	}
	ack, _ := js.Publish(ctx, "orders.eu", []byte("order 1"), tern.MsgID("o-1"))
	fmt.Println(ack.Stream, ack.Seq)
	dup, _ := js.Publish(ctx, "orders.eu", []byte("order 1"), tern.MsgID("o-1"))
	fmt.Println("duplicate:", dup.Duplicate)
	for i := 2; i <= 3; i++ {
		f, _ := js.PublishAsync("orders.us", []byte(fmt.Sprintf("order %d", i)))
		<-f.Done()
	}

	_, _ = js.AddConsumer(ctx, "ORDERS", tern.ConsumerConfig{Durable: "billing", AckPolicy: "explicit"})
	pull := js.Pull("ORDERS", "billing")
	defer pull.Close()
	msgs, _ := pull.Fetch(ctx, 10, tern.FetchMaxWait(time.Second))
	for _, m := range msgs {
		fmt.Println(m.Subject, string(m.Data))
		_ = m.AckSync(ctx)
	}
	ci, _ := js.ConsumerInfo(ctx, "ORDERS", "billing")
	fmt.Println("pending:", ci.NumPending, "unacknowledged:", ci.NumAckPending)
	// Output:
	// ORDERS 1
	// duplicate: true
	// orders.eu order 1
	// orders.us order 2
	// orders.us order 3
	// pending: 0 unacknowledged: 0
}
