package loadgen_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/loadgen"
	"github.com/tern-mq/tern/internal/loadgen/loadgentest"
)

func TestModesExactCounts(t *testing.T) {
	loadgentest.CheckModes(t, newMemBroker().dialer(), 2000)
}

func TestDurationBounded(t *testing.T) {
	for _, mode := range loadgen.Modes {
		t.Run(mode, func(t *testing.T) {
			cfg := loadgen.Config{Mode: mode, Pubs: 2, Subs: 2, Size: 32, Duration: 150 * time.Millisecond, Rate: 2000}
			start := time.Now()
			res, err := loadgen.Run(context.Background(), newMemBroker().dialer(), cfg)
			if err != nil {
				t.Fatalf("run: %v\n%s", err, res)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Fatalf("run took %v", took)
			}
			if res.Sent == 0 || res.Received != res.Expected {
				t.Fatalf("sent %d, received %d of %d", res.Sent, res.Received, res.Expected)
			}
			// Two publishers at 2000/s for 150ms: about 600 messages.
			if mode != loadgen.ModeReqRep && (res.Sent < 300 || res.Sent > 900) {
				t.Fatalf("paced run sent %d, want about 600", res.Sent)
			}
		})
	}
}

func TestRateAndCount(t *testing.T) {
	cfg := loadgen.Config{Mode: loadgen.ModePubSub, Pubs: 1, Subs: 1, Size: 16, Msgs: 200, Rate: 1000}
	res, err := loadgen.Run(context.Background(), newMemBroker().dialer(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	loadgentest.CheckExact(t, cfg, res)
	if res.Elapsed < 150*time.Millisecond {
		t.Fatalf("200 messages at 1000/s took %v, want about 200ms", res.Elapsed)
	}
}

func TestLossIsReported(t *testing.T) {
	b := newMemBroker()
	b.drop = 97
	cfg := loadgen.Config{Mode: loadgen.ModePubSub, Subs: 2, Size: 16, Msgs: 1000, Stall: 100 * time.Millisecond}
	start := time.Now()
	res, err := loadgen.Run(context.Background(), b.dialer(), cfg)
	if !errors.Is(err, loadgen.ErrIncomplete) {
		t.Fatalf("err %v, want ErrIncomplete", err)
	}
	if time.Since(start) > 3*time.Second {
		t.Fatalf("stall detection took %v", time.Since(start))
	}
	if res.Received >= res.Expected || res.Expected != 2000 {
		t.Fatalf("received %d of %d", res.Received, res.Expected)
	}
	if !strings.Contains(res.String(), "missing") {
		t.Fatalf("summary does not report the loss:\n%s", res)
	}
}

func TestHardTimeout(t *testing.T) {
	b := newMemBroker()
	b.drop = 1 // nothing arrives
	cfg := loadgen.Config{Mode: loadgen.ModeQueue, Size: 16, Msgs: 100, Timeout: 200 * time.Millisecond, Stall: time.Minute}
	start := time.Now()
	_, err := loadgen.Run(context.Background(), b.dialer(), cfg)
	if !errors.Is(err, loadgen.ErrIncomplete) {
		t.Fatalf("err %v, want ErrIncomplete", err)
	}
	if time.Since(start) > 3*time.Second {
		t.Fatalf("timeout took %v", time.Since(start))
	}
}

func TestCancel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	cfg := loadgen.Config{Mode: loadgen.ModePubSub, Size: 16, Duration: time.Hour, Rate: 1000}
	start := time.Now()
	_, err := loadgen.Run(ctx, newMemBroker().dialer(), cfg)
	if !errors.Is(err, loadgen.ErrIncomplete) {
		t.Fatalf("err %v, want ErrIncomplete", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("cancel took %v", time.Since(start))
	}
}

func TestConfigErrors(t *testing.T) {
	d := newMemBroker().dialer()
	for _, cfg := range []loadgen.Config{
		{Msgs: 10},
		{Mode: "fanout", Msgs: 10},
		{Mode: loadgen.ModePub},
		{Mode: loadgen.ModePub, Msgs: -1},
		{Mode: loadgen.ModePubSub, Msgs: 1, Size: -1},
	} {
		if _, err := loadgen.Run(context.Background(), d, cfg); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
}

func TestDialError(t *testing.T) {
	boom := errors.New("refused")
	dial := func(string) (loadgen.Bus, error) { return nil, boom }
	_, err := loadgen.Run(context.Background(), dial, loadgen.Config{Mode: loadgen.ModePubSub, Msgs: 10})
	if !errors.Is(err, boom) {
		t.Fatalf("err %v, want the dial error", err)
	}
}

func TestResultJSONAndString(t *testing.T) {
	res, err := loadgen.Run(context.Background(), newMemBroker().dialer(),
		loadgen.Config{Mode: loadgen.ModeQueue, Subs: 2, Size: 100, Msgs: 500})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"mode", "pubs", "subs", "size", "sent", "received", "expected", "elapsed_ms", "msgs_per_sec", "mb_per_sec", "latency", "errors"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, b)
		}
	}
	lat := m["latency"].(map[string]any)
	for _, k := range []string{"samples", "p50_us", "p90_us", "p99_us", "p999_us", "max_us", "mean_us"} {
		if _, ok := lat[k]; !ok {
			t.Errorf("latency JSON lacks %q: %s", k, b)
		}
	}
	var back loadgen.Result
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Sent != res.Sent || back.Received != res.Received || back.Mode != res.Mode ||
		absDiff(back.Elapsed, res.Elapsed) > time.Microsecond || absDiff(back.Latency.P99, res.Latency.P99) > time.Microsecond {
		t.Fatalf("round trip changed the result:\n%+v\n%+v", res, back)
	}
	s := res.String()
	for _, want := range []string{"queue", "msgs/s", "MB/s", "p50", "p99.9", "max", "per member"} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
}

func absDiff(a, b time.Duration) time.Duration {
	if a > b {
		return a - b
	}
	return b - a
}

func TestFormatting(t *testing.T) {
	for in, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 1234567.4: "1,234,567", -42000: "-42,000"} {
		if got := loadgen.Commas(in); got != want {
			t.Errorf("Commas(%v) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[time.Duration]string{0: "0", 500: "500ns", 41200: "41.2µs", 1210 * time.Microsecond: "1.21ms", 2412 * time.Millisecond: "2.412s"} {
		if got := loadgen.FormatDuration(in); got != want {
			t.Errorf("FormatDuration(%v) = %q, want %q", in, got, want)
		}
	}
}

// TestProbe runs every workload against a broker whose subscriptions reach the
// publishers only after a delay, as on the other nodes of a cluster: with Probe the
// counts are exact, without it the first messages are lost.
func TestProbe(t *testing.T) {
	for _, c := range loadgentest.Cases(500) {
		if c.Cfg.Mode == loadgen.ModePub {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			b := newMemBroker()
			b.lag = 100 * time.Millisecond
			cfg := c.Cfg
			cfg.Probe, cfg.Timeout = true, time.Minute
			start := time.Now()
			res, err := loadgen.Run(context.Background(), b.dialer(), cfg)
			if err != nil {
				t.Fatalf("run: %v\n%s", err, res)
			}
			loadgentest.CheckExact(t, cfg, res)
			if took := time.Since(start); took < b.lag {
				t.Fatalf("the run took %v, less than the subscriptions' lag", took)
			}
		})
	}
	t.Run("without", func(t *testing.T) {
		b := newMemBroker()
		b.lag = 200 * time.Millisecond
		cfg := loadgen.Config{Mode: loadgen.ModePubSub, Subs: 1, Size: 16, Msgs: 100, Stall: 100 * time.Millisecond}
		if _, err := loadgen.Run(context.Background(), b.dialer(), cfg); !errors.Is(err, loadgen.ErrIncomplete) {
			t.Fatalf("err = %v, want the first messages lost", err)
		}
	})
}

// TestConnRoles checks the names Run gives its connections against ConnRole.
func TestConnRoles(t *testing.T) {
	want := map[string]map[string]int{ // mode: role -> connections
		loadgen.ModePub:    {loadgen.RolePub: 2},
		loadgen.ModePubSub: {loadgen.RolePub: 2, loadgen.RoleSub: 3},
		loadgen.ModeQueue:  {loadgen.RolePub: 2, loadgen.RoleSub: 3},
		loadgen.ModeReqRep: {loadgen.RoleReq: 2, loadgen.RoleResponder: 3},
	}
	for _, mode := range loadgen.Modes {
		b := newMemBroker()
		var mu sync.Mutex
		got := map[string]map[int]bool{}
		dial := func(name string) (loadgen.Bus, error) {
			role, i, ok := loadgen.ConnRole(name)
			if !ok {
				t.Errorf("%s: ConnRole(%q) not ok", mode, name)
			}
			mu.Lock()
			if got[role] == nil {
				got[role] = map[int]bool{}
			}
			got[role][i] = true
			mu.Unlock()
			return b.dialer()(name)
		}
		cfg := loadgen.Config{Mode: mode, Pubs: 2, Subs: 3, Size: 16, Msgs: 10}
		if _, err := loadgen.Run(context.Background(), dial, cfg); err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		for role, n := range want[mode] {
			for i := range n {
				if !got[role][i] {
					t.Errorf("%s: no connection %s %d (got %v)", mode, role, i, got)
				}
			}
		}
		if len(got) != len(want[mode]) {
			t.Errorf("%s: roles %v, want %v", mode, got, want[mode])
		}
	}
	for _, bad := range []string{"bench-pub", "bench--1", "bench-pub-x", "bench-pub--1", "other-pub-0", "bench-admin", "bench-streampub-0"} {
		if _, _, ok := loadgen.ConnRole(bad); ok {
			t.Errorf("ConnRole(%q) ok", bad)
		}
	}
	if role, i, ok := loadgen.ConnRole("bench-responder-12"); !ok || role != loadgen.RoleResponder || i != 12 {
		t.Errorf("ConnRole(bench-responder-12) = %q %d %v", role, i, ok)
	}
}
