package header

import (
	"errors"
	"strings"
	"testing"
)

// TestLengthsAroundOneByte: strings whose length takes one varint byte (up to
// 127) and more than one read back whole, by Each, Lookup and LookupPair alike.
func TestLengthsAroundOneByte(t *testing.T) {
	for _, n := range []int{0, 1, 126, 127, 128, 129, 300, 20000} {
		value := strings.Repeat("v", n)
		key := "k" + strings.Repeat("x", n%200)
		h := Append(nil, "first", "1")
		h = Append(h, key, value)
		h = Append(h, "last", "2")
		if err := Block(h).Validate(); err != nil {
			t.Fatalf("length %d: %v", n, err)
		}
		var pairs []string
		Block(h).Each(func(k, v []byte) bool {
			pairs = append(pairs, string(k)+"="+string(v))
			return true
		})
		if len(pairs) != 3 || pairs[1] != key+"="+value || pairs[2] != "last=2" {
			t.Fatalf("length %d: Each gave %d pairs, middle %.40q", n, len(pairs), pairs[1])
		}
		if v, ok := Block(h).Lookup(key); !ok || v != value {
			t.Fatalf("length %d: Lookup gave %d bytes, %v", n, len(v), ok)
		}
		v1, ok1, v2, ok2 := Block(h).LookupPair("last", key)
		if !ok1 || v1 != "2" || !ok2 || v2 != value {
			t.Fatalf("length %d: LookupPair gave %q %v, %d bytes %v", n, v1, ok1, len(v2), ok2)
		}
	}
}

// TestMalformedBlocks: a length running past the block, with one length byte or
// more, and a length that never ends, fail Validate and stop the readers without
// a value.
func TestMalformedBlocks(t *testing.T) {
	good := Append(nil, "key", strings.Repeat("v", 200))
	for name, b := range map[string][]byte{
		"short string past the end": {3, 'k', 'e', 'y', 5, 'a'},
		"long string past the end":  good[:len(good)-1],
		"key past the end":          {0x7f, 'k'},
		"unending length":           {0x80, 0x80, 0x80},
		"missing value":             {3, 'k', 'e', 'y'},
		"empty key":                 {0, 1, 'v'},
	} {
		if err := Block(b).Validate(); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: Validate = %v, want ErrMalformed", name, err)
		}
		if name == "empty key" {
			continue // well-formed strings: readers take it, Validate refuses it
		}
		if v, ok := Block(b).Lookup("key"); ok {
			t.Errorf("%s: Lookup found %q", name, v)
		}
		if _, ok1, _, ok2 := Block(b).LookupPair("key", "other"); ok1 || ok2 {
			t.Errorf("%s: LookupPair found a value", name)
		}
	}
}

// BenchmarkLookupPairKafka looks up a message id among the headers the Kafka
// API gives an idempotent producer's record, the other key absent.
func BenchmarkLookupPairKafka(b *testing.B) {
	h := Append(nil, "Tern-To-Partition", "0")
	h = Append(h, "Tern-Timestamp", "1765051234567")
	h = Append(h, "Tern-Msg-Id", "kafka:7:0:0:123456")
	for b.Loop() {
		if _, ok, _, _ := Block(h).LookupPair("Tern-Msg-Id", "Tern-Expected-Last-Msg-Id"); !ok {
			b.Fatal("no id")
		}
	}
}
