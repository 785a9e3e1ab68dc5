package membership

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"unicode/utf8"

	"github.com/hashicorp/memberlist"
)

// MaxMetaSize is the most bytes a node's encoded metadata may take: memberlist
// carries it in every alive message and refuses (by panicking) anything larger.
// The cluster name, node ID, route address, version and tags share it; see
// encodeMeta for the layout and [Config.Tags] for what that leaves for tags.
const MaxMetaSize = memberlist.MetaMaxSize

// maxField is the longest single string in the metadata: lengths are one byte so
// that every value has exactly one encoding, which lets the fuzz target check that
// decoding and encoding again gives back the input.
const maxField = 255

// metaFormat is the metadata layout this code writes. A decoder reads any format at
// or above 1 and ignores bytes past the fields it knows when the format is newer,
// so a later release may append fields without cutting older nodes off.
const metaFormat = 2

const (
	flagLeaving   = 1 << 0
	flagMetaGroup = 1 << 1 // format 2: the node holds a replica of the meta group
	knownFlags    = flagLeaving | flagMetaGroup
)

// meta is what a node tells the others about itself besides its name and gossip
// address (which memberlist carries).
type meta struct {
	format  byte
	leaving bool // set just before a graceful leave, so peers tell it from a failure
	cluster string
	id      string
	route   string
	version string
	tags    map[string]string
	raftID  uint64 // format 2 on; 0 when the node runs no replication
	// metaGroup: the node holds a replica of the meta group (format 2 on), so a
	// node starting later joins that group instead of founding one.
	metaGroup bool
}

// ErrMetaTooLarge is returned when a node's metadata (mostly its tags) would not fit
// in MaxMetaSize bytes or a single field would exceed 255 bytes.
var ErrMetaTooLarge = errors.New("membership: node metadata too large")

// errBadMeta is wrapped by every decoding failure: the bytes come from other nodes.
var errBadMeta = errors.New("malformed node metadata")

// encodeMeta lays the metadata out as
//
//	format(1) flags(1) cluster id route version  ntags(1) {key value}*  raft_id(uvarint)
//
// where every string is a one-byte length and its bytes, and tags are in increasing
// key order so that equal metadata encodes to equal bytes (memberlist announces an
// update whenever the bytes change).
func encodeMeta(m meta) ([]byte, error) {
	if len(m.tags) > maxField {
		return nil, fmt.Errorf("%w: %d tags, at most %d", ErrMetaTooLarge, len(m.tags), maxField)
	}
	keys := make([]string, 0, len(m.tags))
	for k := range m.tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)

	b := make([]byte, 0, 64)
	var flags byte
	if m.leaving {
		flags |= flagLeaving
	}
	if m.metaGroup {
		flags |= flagMetaGroup
	}
	b = append(b, metaFormat, flags)
	var err error
	put := func(what, s string) {
		if err != nil {
			return
		}
		if len(s) > maxField {
			err = fmt.Errorf("%w: %s is %d bytes, at most %d", ErrMetaTooLarge, what, len(s), maxField)
			return
		}
		b = append(b, byte(len(s)))
		b = append(b, s...)
	}
	put("cluster name", m.cluster)
	put("node id", m.id)
	put("route address", m.route)
	put("version", m.version)
	b = append(b, byte(len(keys)))
	for _, k := range keys {
		put("tag key "+k, k)
		put("tag "+k, m.tags[k])
	}
	b = binary.AppendUvarint(b, m.raftID)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxMetaSize {
		return nil, fmt.Errorf("%w: %d bytes, at most %d (tags take %d)", ErrMetaTooLarge, len(b), MaxMetaSize, tagBytes(m.tags))
	}
	return b, nil
}

func tagBytes(tags map[string]string) int {
	n := 1
	for k, v := range tags {
		n += 2 + len(k) + len(v)
	}
	return n
}

// decodeMeta parses metadata another node sent. It never panics: any input that is
// not metadata it understands is an error wrapping errBadMeta.
func decodeMeta(b []byte) (meta, error) {
	var m meta
	if len(b) > MaxMetaSize {
		return m, fmt.Errorf("%w: %d bytes, at most %d", errBadMeta, len(b), MaxMetaSize)
	}
	if len(b) < 2 {
		return m, fmt.Errorf("%w: %d bytes, too short for a header", errBadMeta, len(b))
	}
	m.format = b[0]
	if m.format < 1 {
		return m, fmt.Errorf("%w: format %d", errBadMeta, m.format)
	}
	m.leaving = b[1]&flagLeaving != 0
	m.metaGroup = m.format >= 2 && b[1]&flagMetaGroup != 0
	if m.format == metaFormat && b[1]&^knownFlags != 0 || m.format < 2 && b[1]&^flagLeaving != 0 {
		// A later format may define more flags; this one defines one.
		return m, fmt.Errorf("%w: unknown flags %#x", errBadMeta, b[1])
	}
	p := 2
	get := func(what string) (string, error) {
		if p >= len(b) {
			return "", fmt.Errorf("%w: %s missing", errBadMeta, what)
		}
		n := int(b[p])
		p++
		if len(b)-p < n {
			return "", fmt.Errorf("%w: %s is %d bytes, only %d left", errBadMeta, what, n, len(b)-p)
		}
		s := string(b[p : p+n])
		p += n
		if !utf8.ValidString(s) {
			return "", fmt.Errorf("%w: %s is not UTF-8", errBadMeta, what)
		}
		return s, nil
	}
	var err error
	if m.cluster, err = get("cluster name"); err != nil {
		return m, err
	}
	if m.id, err = get("node id"); err != nil {
		return m, err
	}
	if m.id == "" {
		return m, fmt.Errorf("%w: empty node id", errBadMeta)
	}
	if m.route, err = get("route address"); err != nil {
		return m, err
	}
	if m.version, err = get("version"); err != nil {
		return m, err
	}
	if p >= len(b) {
		return m, fmt.Errorf("%w: tag count missing", errBadMeta)
	}
	ntags := int(b[p])
	p++
	if ntags > 0 {
		m.tags = make(map[string]string, ntags)
	}
	prev := ""
	for i := range ntags {
		k, err := get("tag key")
		if err != nil {
			return m, err
		}
		if k == "" || (i > 0 && k <= prev) {
			return m, fmt.Errorf("%w: tag key %q empty or out of order", errBadMeta, k)
		}
		v, err := get("tag " + k)
		if err != nil {
			return m, err
		}
		m.tags[k] = v
		prev = k
	}
	if m.format >= 2 {
		id, n := binary.Uvarint(b[p:])
		if n <= 0 || n != uvarintLen(id) {
			return m, fmt.Errorf("%w: raft id missing or not minimally encoded", errBadMeta)
		}
		m.raftID = id
		p += n
	}
	if p != len(b) && m.format == metaFormat {
		return m, fmt.Errorf("%w: %d bytes after the last field", errBadMeta, len(b)-p)
	}
	return m, nil
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}
