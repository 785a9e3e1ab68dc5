package tern_test

import (
	"errors"
	"net"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/wire"
)

// infoServer is a one-connection server that answers CONNECT with an INFO whose
// connect_urls the test chooses, answers PINGs, and sends further INFO frames when
// told.
type infoServer struct {
	t       *testing.T
	addr    string
	connect chan wire.Connect // the client's CONNECT, once it arrives
	mu      sync.Mutex
	nc      net.Conn
}

func startInfoServer(t *testing.T, urls ...string) *infoServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &infoServer{t: t, addr: l.Addr().String(), connect: make(chan wire.Connect, 1)}
	done := make(chan struct{})
	t.Cleanup(func() {
		l.Close()
		s.mu.Lock()
		if s.nc != nil {
			s.nc.Close()
		}
		s.mu.Unlock()
		<-done
	})
	go func() {
		defer close(done)
		nc, err := l.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.nc = nc
		s.mu.Unlock()
		var buf []byte
		chunk := make([]byte, 4096)
		connected := false
		for {
			var f wire.Frame
			n, err := f.Decode(buf, 0)
			if errors.Is(err, wire.ErrIncomplete) {
				k, rerr := nc.Read(chunk)
				if rerr != nil {
					return
				}
				buf = append(buf, chunk[:k]...)
				continue
			}
			if err != nil {
				return
			}
			switch {
			case !connected && f.Type == wire.TypeConnect:
				cn, _ := wire.ParseConnect(f.Payload)
				connected = true
				s.connect <- cn
				s.send(urls)
			case f.Type == wire.TypePing:
				s.write(wire.AppendPong(nil))
			}
			buf = buf[n:]
		}
	}()
	return s
}

func (s *infoServer) write(b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _ = s.nc.Write(b)
}

// send sends an INFO with these connect_urls.
func (s *infoServer) send(urls []string) {
	s.write(wire.AppendInfo(nil, &wire.Info{Version: wire.Version, Flags: wire.InfoHeaders, ServerID: "fake", ServerName: "fake",
		ServerVersion: "0", ClientID: 1, MaxPayload: 1 << 20, PingIntervalMS: 60000, ConnectURLs: urls}))
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func TestClientLearnsAnnouncedServers(t *testing.T) {
	srv := startInfoServer(t, "tern://127.0.0.1:1", "tern://127.0.0.1:2", "mqtt://127.0.0.1:1883", "tern://127.0.0.1:1")
	changes := make(chan []string, 10)
	given := "tern://" + srv.addr + ",127.0.0.1:2"
	nc, err := tern.Connect(given, tern.NoReconnect(),
		tern.DiscoveredServersHandler(func(c *tern.Conn) { changes <- c.DiscoveredServers() }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if cn := <-srv.connect; cn.Flags&wire.ConnectInfoUpdates == 0 {
		t.Fatalf("CONNECT flags %#x: updates not asked for", cn.Flags)
	}
	// Given servers first and once; the MQTT URL is not for this client.
	if got := nc.Servers(); !reflect.DeepEqual(got, []string{"tern://" + srv.addr, "tern://127.0.0.1:2", "tern://127.0.0.1:1"}) {
		t.Fatalf("Servers %v", got)
	}
	if got := nc.DiscoveredServers(); !reflect.DeepEqual(got, []string{"tern://127.0.0.1:1"}) {
		t.Fatalf("DiscoveredServers %v", got)
	}
	if got := nc.ServerInfo().ConnectURLs; len(got) != 4 {
		t.Fatalf("ServerInfo().ConnectURLs %v", got)
	}

	next := func(what string) []string {
		t.Helper()
		select {
		case got := <-changes:
			return got
		case <-time.After(5 * time.Second):
			t.Fatalf("%s not reported", what)
			return nil
		}
	}
	// An update: a node joined (3, 4), one left (1).
	srv.send([]string{"tern://127.0.0.1:2", "tern://127.0.0.1:3", "tern://127.0.0.1:4"})
	if got := next("the first update"); !reflect.DeepEqual(sorted(got), []string{"tern://127.0.0.1:3", "tern://127.0.0.1:4"}) {
		t.Fatalf("after the first update: %v", got)
	}
	// The same list again changes nothing; then 5 joins, after the servers known.
	before := nc.DiscoveredServers()
	srv.send([]string{"tern://127.0.0.1:2", "tern://127.0.0.1:3", "tern://127.0.0.1:4"})
	srv.send([]string{"tern://127.0.0.1:4", "tern://127.0.0.1:5", "tern://127.0.0.1:3"})
	if got := next("the second update"); !reflect.DeepEqual(got, append(before, "tern://127.0.0.1:5")) {
		t.Fatalf("after the second update: %v, want %v then 5", got, before)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-changes:
		t.Fatalf("a change reported for a repeated list: %v", got)
	case <-time.After(50 * time.Millisecond):
	}
	if got := nc.Servers(); len(got) != 5 || got[0] != "tern://"+srv.addr || got[1] != "tern://127.0.0.1:2" {
		t.Fatalf("Servers %v", got)
	}
}

func TestNoClusterDiscovery(t *testing.T) {
	srv := startInfoServer(t, "tern://127.0.0.1:1", "tern://127.0.0.1:2")
	nc, err := tern.Connect(srv.addr, tern.NoReconnect(), tern.NoClusterDiscovery())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if cn := <-srv.connect; cn.Flags&wire.ConnectInfoUpdates != 0 {
		t.Fatalf("CONNECT flags %#x: updates asked for", cn.Flags)
	}
	if got := nc.Servers(); !reflect.DeepEqual(got, []string{"tern://" + srv.addr}) {
		t.Fatalf("Servers %v", got)
	}
	if got := nc.DiscoveredServers(); len(got) != 0 {
		t.Fatalf("DiscoveredServers %v", got)
	}
	if got := nc.ServerInfo().ConnectURLs; len(got) != 2 {
		t.Fatalf("ServerInfo().ConnectURLs %v", got)
	}
}
