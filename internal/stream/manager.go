package stream

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tern-mq/tern/internal/auth"
	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/fileutil"
	"github.com/tern-mq/tern/internal/store"
	"github.com/tern-mq/tern/internal/streamapi"
	"github.com/tern-mq/tern/internal/subject"
)

// Config is the stream engine's configuration.
type Config struct {
	// Dir holds every stream's data.
	Dir string
	// Sync is the default fsync policy of stream logs and consumer journals.
	Sync         store.SyncPolicy
	SyncInterval time.Duration
	// MaxPayload is the largest message a stream accepts unless its own MaxMsgSize is
	// smaller.
	MaxPayload int
	// MaxStreams and MaxConsumers (per stream) bound what clients may create; 0 means
	// no limit.
	MaxStreams   int
	MaxConsumers int
	// SegmentBytes is the default segment size of stream logs.
	SegmentBytes int64
	// MaxQueued bounds the bytes of captured messages waiting for a stream's writer;
	// above a quarter of it publishers are slowed down, above it they get errors.
	MaxQueued int
	// ExternalAPI leaves the "$TERN.API.>" and "$TERN.ACK.>" subscriptions to the
	// caller: in a cluster that replicates, a front of the cluster's catalogue
	// takes every request and hands this node's own to APISink and AckSink.
	ExternalAPI bool
	// Accounts returns the limits of the named account (not the global one), and
	// whether it exists: the engine serves no request of an account that does not.
	// nil: every account exists, without limits.
	Accounts func(name string) (AccountLimits, bool)
	// Imports returns the subscriptions to other accounts' exported subjects
	// that a filter of the named account reaches (auth.Account.Imports): a
	// stream of the account captures those too. nil: no imports.
	Imports func(account, filter string) []auth.ImportedSubscription
}

// Errors callers branch on.
var (
	ErrStreamNotFound   = errors.New("stream not found")
	ErrConsumerNotFound = errors.New("consumer not found")
	ErrExists           = errors.New("already exists with a different configuration")
	ErrOverlap          = errors.New("subjects overlap with another stream")
	ErrLimit            = errors.New("limit reached")
	ErrBadConfig        = errors.New("invalid configuration")
	ErrClosed           = errors.New("stream engine closed")
	ErrNotLeader        = errors.New("this node does not lead the stream's group")
	ErrExpired          = errors.New("request arrived after its deadline")
)

// Manager owns every stream of a server.
type Manager struct {
	cfg    Config
	broker *broker.Broker
	log    *slog.Logger

	lock *os.File // dir/LOCK, held while the manager is open
	mu   sync.RWMutex
	// streams holds every stream by its key (Key): the global account's by name.
	streams map[string]*Stream
	closed  bool

	api        *apiSink
	acks       *ackSink
	apiRunning bool
	subs       []*broker.Subscription

	describeCluster atomic.Pointer[func(group uint64) *streamapi.StreamCluster]
}

// SetDescribeCluster sets how Info describes the Raft group of a stream the
// cluster placed here.
func (m *Manager) SetDescribeCluster(fn func(group uint64) *streamapi.StreamCluster) {
	m.describeCluster.Store(&fn)
}

// New opens the engine's directory and recovers every stream and durable consumer in
// it. It does not subscribe to anything until Start.
func New(cfg Config, b *broker.Broker, log *slog.Logger) (*Manager, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Dir == "" {
		return nil, fmt.Errorf("stream engine: %w: no data directory", ErrBadConfig)
	}
	if cfg.SyncInterval <= 0 {
		cfg.SyncInterval = 100 * time.Millisecond
	}
	if cfg.MaxPayload <= 0 {
		cfg.MaxPayload = 1 << 20
	}
	if cfg.MaxQueued <= 0 {
		cfg.MaxQueued = 64 << 20
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "streams"), 0o755); err != nil {
		return nil, fmt.Errorf("stream engine: %w", err)
	}
	lock, err := lockDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	m := &Manager{cfg: cfg, broker: b, log: log, streams: make(map[string]*Stream), lock: lock}
	m.api = newAPISink(m)
	m.acks = &ackSink{m: m}
	if err := m.recover(); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

func (m *Manager) streamsDir() string { return filepath.Join(m.cfg.Dir, "streams") }

// StreamsDir is the directory of the streams of the global account (each
// account's are beside it, under accounts/).
func (m *Manager) StreamsDir() string { return m.streamsDir() }

// recover opens every stream found on disk: the global account's, then every
// other account's.
func (m *Manager) recover() error {
	return m.eachStreamDir(func(dir string, def streamDef) error {
		if def.Group != 0 {
			return nil
		}
		start := time.Now()
		s, err := openStream(m, def, dir)
		if err != nil {
			return err
		}
		m.streams[s.key] = s
		st := s.state()
		m.log.Info("stream recovered", "stream", def.Config.Name, "account", accountAttr(s.acct), "messages", st.Msgs, "bytes", st.Bytes,
			"consumers", st.Consumers, "took", time.Since(start).Round(time.Millisecond))
		for _, c := range s.corrupt {
			m.log.Error("stream corruption found on recovery", "stream", def.Config.Name, "account", accountAttr(s.acct), "detail", c)
		}
		return nil
	})
}

// accountAttr names an account in the log.
func accountAttr(account string) string {
	if account == "" {
		return auth.GlobalAccount
	}
	return account
}

// eachStreamDir calls fn with every stream directory and definition on disk: the
// global account's (streams/), then the other accounts' (accounts/*/streams/).
func (m *Manager) eachStreamDir(fn func(dir string, def streamDef) error) error {
	dirs := []string{m.streamsDir()}
	accts, err := os.ReadDir(m.accountsDir())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("stream engine: %w", err)
	}
	for _, a := range accts {
		if a.IsDir() {
			dirs = append(dirs, filepath.Join(m.accountsDir(), a.Name(), "streams"))
		}
	}
	for i, parent := range dirs {
		entries, err := os.ReadDir(parent)
		if err != nil {
			if i > 0 && errors.Is(err, os.ErrNotExist) {
				continue
			}
			return fmt.Errorf("stream engine: %w", err)
		}
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			dir := filepath.Join(parent, e.Name())
			var def streamDef
			if err := readJSON(filepath.Join(dir, "stream.json"), &def); err != nil {
				if errors.Is(err, os.ErrNotExist) {
					m.log.Warn("stream directory without a definition, ignored", "dir", dir)
					continue
				}
				return fmt.Errorf("stream %q: %w", e.Name(), err)
			}
			if i == 0 && def.Account != "" || i > 0 && (def.Account == "" || dir != m.streamDir(def.Account, def.Config.Name)) {
				m.log.Warn("stream directory not where its definition's account and name put it, ignored", "dir", dir,
					"account", accountAttr(def.Account), "stream", def.Config.Name)
				continue
			}
			if err := fn(dir, def); err != nil {
				return err
			}
		}
	}
	return nil
}

// Start subscribes every stream to its subjects and starts serving the API and acks.
func (m *Manager) Start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.streams {
		if err := s.start(); err != nil {
			return err
		}
	}
	m.apiRunning = true
	go m.api.run()
	if m.cfg.ExternalAPI {
		return nil
	}
	for _, sub := range []*broker.Subscription{
		// Each node answers for its own streams: requests and acks are not
		// forwarded between nodes (docs/cluster.md).
		{Sink: m.api, Subject: streamapi.APIPrefix + ">", NodeLocal: true},
		{Sink: m.acks, Subject: streamapi.AckPrefix + ">", NodeLocal: true},
		// The same of every other account, in its subject space.
		{Sink: m.api, Subject: AccountAPISubject, NodeLocal: true},
		{Sink: m.acks, Subject: AccountAckSubject, NodeLocal: true},
	} {
		if err := m.broker.Subscribe(sub); err != nil {
			return fmt.Errorf("stream engine: %w", err)
		}
		m.subs = append(m.subs, sub)
	}
	return nil
}

// AccountAPISubject and AccountAckSubject are the stream API's and acks' subjects
// of every account but the global one, for APISink and AckSink.
const (
	AccountAPISubject = auth.AccountPrefix + "*." + streamapi.APIPrefix + ">"
	AccountAckSubject = auth.AccountPrefix + "*." + streamapi.AckPrefix + ">"
)

// APISink answers stream API requests ("$TERN.API." subjects, and
// "$A.<account>.$TERN.API." of other accounts) from this node's streams; AckSink
// applies acknowledgements to them. Manager subscribes them itself unless
// Config.ExternalAPI.
func (m *Manager) APISink() broker.Sink { return m.api }

// AckSink: see APISink.
func (m *Manager) AckSink() broker.Sink { return m.acks }

// Normalise checks a stream configuration and fills in its defaults, as creating
// the stream would.
func (m *Manager) Normalise(cfg *streamapi.StreamConfig) error { return m.normalise(cfg) }

// Close stops every stream and consumer and closes their files. Messages already
// acknowledged to publishers are on disk (per the sync policy); captured messages not
// yet committed are answered with an error.
func (m *Manager) Close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	streams := make([]*Stream, 0, len(m.streams))
	for _, s := range m.streams {
		streams = append(streams, s)
	}
	var api *apiSink
	if m.apiRunning {
		api = m.api
	}
	for _, sub := range m.subs {
		_ = m.broker.Unsubscribe(sub)
	}
	m.mu.Unlock()
	if api != nil {
		api.stop()
	}
	for _, s := range streams {
		s.close(false)
	}
	if m.lock != nil {
		_ = m.lock.Close() // releases the directory for another process
	}
}

// Stream returns the stream of that key (Key): for the global account, its name.
func (m *Manager) Stream(key string) (*Stream, error) {
	m.mu.RLock()
	s := m.streams[key]
	m.mu.RUnlock()
	if s == nil {
		acct, name := SplitKey(key)
		return nil, fmt.Errorf("stream %q%s: %w", name, inAccount(acct), ErrStreamNotFound)
	}
	return s, nil
}

// AccountStream returns the named stream of an account.
func (m *Manager) AccountStream(account, name string) (*Stream, error) {
	s, err := m.Stream(Key(account, name))
	if err != nil {
		// Named as the account knows it.
		return nil, fmt.Errorf("stream %q: %w", name, ErrStreamNotFound)
	}
	return s, nil
}

// inAccount is " of account X" for errors the server logs, "" for the global account.
func inAccount(account string) string {
	if account == "" {
		return ""
	}
	return fmt.Sprintf(" of account %q", account)
}

// streamBytes looks a stream of the global account up by a name held in a byte
// slice, without allocating.
func (m *Manager) streamBytes(name []byte) *Stream {
	m.mu.RLock()
	s := m.streams[string(name)]
	m.mu.RUnlock()
	return s
}

// accountStreamBytes looks up the named stream of the account whose subjects
// start with prefix ("$A.<account>."), without allocating for usual lengths.
func (m *Manager) accountStreamBytes(prefix, name []byte) *Stream {
	var buf [192]byte
	key := append(append(buf[:0], prefix...), name...)
	m.mu.RLock()
	s := m.streams[string(key)]
	m.mu.RUnlock()
	return s
}

// Streams lists the global account's streams in name order.
func (m *Manager) Streams() []*Stream { return m.AccountStreams("") }

// AccountStreams lists an account's streams in name order.
func (m *Manager) AccountStreams(account string) []*Stream {
	account = normAccount(account)
	m.mu.RLock()
	out := make([]*Stream, 0, len(m.streams))
	for _, s := range m.streams {
		if s.acct == account {
			out = append(out, s)
		}
	}
	m.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// AllStreams lists every account's streams in key order.
func (m *Manager) AllStreams() []*Stream {
	m.mu.RLock()
	out := make([]*Stream, 0, len(m.streams))
	for _, s := range m.streams {
		out = append(out, s)
	}
	m.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out
}

// AddStream creates a stream of the global account, or returns the existing one
// if its configuration is the same.
func (m *Manager) AddStream(cfg streamapi.StreamConfig) (*Stream, error) {
	return m.AddAccountStream("", cfg)
}

// AddAccountStream creates a stream of an account (cfg in the account's terms),
// or returns the existing one if its configuration is the same.
func (m *Manager) AddAccountStream(account string, cfg streamapi.StreamConfig) (*Stream, error) {
	account = normAccount(account)
	if err := m.normalise(&cfg); err != nil {
		return nil, err
	}
	if err := alone(cfg); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	key := Key(account, cfg.Name)
	if s := m.streams[key]; s != nil {
		if configsEqual(s.cfg, cfg) {
			return s, nil
		}
		return nil, fmt.Errorf("stream %q: %w", cfg.Name, ErrExists)
	}
	if account == "" && m.cfg.MaxStreams > 0 && m.countStreams("") >= m.cfg.MaxStreams {
		return nil, fmt.Errorf("stream %q: %w: at most %d streams", cfg.Name, ErrLimit, m.cfg.MaxStreams)
	}
	if err := m.CheckAccount(account, cfg, m.accountConfigs(account, cfg.Name)); err != nil {
		return nil, err
	}
	if err := m.checkOverlap(account, cfg, ""); err != nil {
		return nil, err
	}
	dir := m.streamDir(account, cfg.Name)
	def := streamDef{Config: cfg, Created: time.Now().UTC(), Account: account}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("stream %q: %w", cfg.Name, diskErr(err))
	}
	if err := writeJSON(filepath.Join(dir, "stream.json"), def, true); err != nil {
		_ = os.RemoveAll(dir) // no half-made stream to trip over at the next start
		return nil, fmt.Errorf("stream %q: %w", cfg.Name, err)
	}
	s, err := openStream(m, def, dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if err := s.start(); err != nil {
		s.close(true)
		return nil, err
	}
	m.streams[key] = s
	m.log.Info("stream created", "stream", cfg.Name, "account", accountAttr(account), "subjects", cfg.Subjects, "retention", cfg.Retention,
		"partitions", cfg.Partitions)
	return s, nil
}

// countStreams counts an account's streams; m.mu is held.
func (m *Manager) countStreams(account string) int {
	n := 0
	for _, s := range m.streams {
		if s.acct == account {
			n++
		}
	}
	return n
}

// UpdateStream changes a stream's limits, subjects and compression, and adds
// partitions (addPartitions). Retention, sync and segment size cannot change,
// nor can partitions go.
func (m *Manager) UpdateStream(cfg streamapi.StreamConfig) (*Stream, error) {
	return m.UpdateAccountStream("", cfg)
}

// UpdateAccountStream is UpdateStream for a stream of an account.
func (m *Manager) UpdateAccountStream(account string, cfg streamapi.StreamConfig) (*Stream, error) {
	account = normAccount(account)
	if err := m.normalise(&cfg); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.streams[Key(account, cfg.Name)]
	if s == nil {
		return nil, fmt.Errorf("stream %q: %w", cfg.Name, ErrStreamNotFound)
	}
	if s.group == 0 {
		if err := alone(cfg); err != nil {
			return nil, err
		}
	}
	old := s.Config()
	if old.Retention != cfg.Retention || old.Sync != cfg.Sync || old.SegmentBytes != cfg.SegmentBytes {
		return nil, fmt.Errorf("stream %q: %w: retention, sync and segment size cannot change", cfg.Name, ErrBadConfig)
	}
	if cfg.Partitions < old.Partitions {
		return nil, fmt.Errorf("stream %q: %w: it has %d partitions, and partitions can be added but not removed", cfg.Name, ErrBadConfig, old.Partitions)
	}
	if cfg.Partitions > old.Partitions && s.group != 0 {
		// A cluster's replica gains its partitions with their groups, which the
		// catalogue places (the cluster's stream service reopens it).
		return nil, fmt.Errorf("stream %q: %w: a cluster's stream gains partitions through the cluster", cfg.Name, ErrBadConfig)
	}
	if s.group == 0 {
		// A replicated stream's limits were checked by the cluster's catalogue.
		if err := m.CheckAccount(account, cfg, m.accountConfigs(account, cfg.Name)); err != nil {
			return nil, err
		}
	}
	if err := m.checkOverlap(account, cfg, cfg.Name); err != nil {
		return nil, err
	}
	if cfg.Partitions > old.Partitions {
		return m.addPartitions(s, cfg)
	}
	if err := s.update(cfg); err != nil {
		return nil, err
	}
	return s, nil
}

// addPartitions gives stream s the larger partition count of cfg (and the rest
// of cfg): s is closed as at shutdown — its writer answers what it captured, its
// consumers keep their state — and opened again from its directory, where the new
// partitions start empty beside the old ones, which keep their messages and
// sequences. Consumers go on where they were and read each new partition from its
// start. The key of a message names another partition than before for most keys,
// as in Kafka. The subscriptions stay through the reopen, which takes
// milliseconds: what they capture meanwhile waits in the old stream's queue,
// which the new one takes over (handOver). m.mu is held.
func (m *Manager) addPartitions(s *Stream, cfg streamapi.StreamConfig) (*Stream, error) {
	def := streamDef{Config: cfg, Created: s.created, Account: s.acct}
	was := streamDef{Config: s.Config(), Created: s.created, Account: s.acct}
	s.stop()
	ns, err := m.reopen(def, s)
	if err != nil {
		// The stream as it was, so that a failed change leaves it serving.
		back, berr := m.reopen(was, s)
		if berr != nil {
			delete(m.streams, s.key)
			s.cfgMu.Lock()
			s.unsubscribe()
			s.cfgMu.Unlock()
			m.log.Error("stream lost: adding partitions failed and it could not be opened again", "stream", s.name, "account", accountAttr(s.acct), "err", berr)
			return nil, errors.Join(err, berr)
		}
		m.streams[s.key] = back
		return nil, err
	}
	m.streams[s.key] = ns
	m.log.Info("stream partitions added", "stream", cfg.Name, "account", accountAttr(s.acct), "partitions", cfg.Partitions, "were", was.Config.Partitions)
	return ns, nil
}

// reopen writes def as the definition in the directory of the stopped stream
// old, and opens and starts the stream it defines in old's place (handOver).
func (m *Manager) reopen(def streamDef, old *Stream) (*Stream, error) {
	if err := writeJSON(filepath.Join(old.dir, "stream.json"), def, true); err != nil {
		return nil, fmt.Errorf("stream %q: %w", def.Config.Name, err)
	}
	s, err := openStream(m, def, old.dir)
	if err != nil {
		return nil, err
	}
	old.handOver(s)
	if err := s.start(); err != nil {
		return nil, err // not reached: a stream that takes subscriptions over makes none
	}
	(*captureSink)(s).Flush() // for what old had queued
	return s, nil
}

// CloseStream closes a stream (by key) and forgets it, keeping its data.
func (m *Manager) CloseStream(key string) error {
	s, err := m.forget(key)
	if err != nil {
		return err
	}
	s.close(false)
	return nil
}

// DeleteStream removes a stream (by key), its consumers and its data.
func (m *Manager) DeleteStream(key string) error {
	s, err := m.forget(key)
	if err != nil {
		return err
	}
	s.close(true)
	m.log.Info("stream deleted", "stream", s.name, "account", accountAttr(s.acct))
	return nil
}

// forget takes the stream of that key out of the manager, for its caller to close.
func (m *Manager) forget(key string) (*Stream, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.streams[key]
	if s == nil {
		_, name := SplitKey(key)
		return nil, fmt.Errorf("stream %q: %w", name, ErrStreamNotFound)
	}
	delete(m.streams, key)
	return s, nil
}

// alone refuses a configuration a stream of this node alone cannot have.
func alone(cfg streamapi.StreamConfig) error {
	if cfg.Replicas > 1 {
		return fmt.Errorf("stream %q: %w: %d replicas need a cluster that replicates (cluster_size)", cfg.Name, ErrBadConfig, cfg.Replicas)
	}
	return nil
}

func (m *Manager) normalise(cfg *streamapi.StreamConfig) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("stream %q: %w: %s", cfg.Name, ErrBadConfig, fmt.Sprintf(format, args...))
	}
	if err := streamapi.ValidName("stream", cfg.Name); err != nil {
		return fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	if len(cfg.Subjects) == 0 {
		cfg.Subjects = []string{cfg.Name}
	}
	for i, f := range cfg.Subjects {
		if err := subject.ValidateFilter([]byte(f)); err != nil {
			return bad("%v", err)
		}
		// The server's own subjects may not be captured, except dead letters, which
		// are there to be kept; nor other accounts' (an account's stream captures
		// in its own subject space).
		if strings.HasPrefix(f, "$TERN.") && !strings.HasPrefix(f, streamapi.DeadLetterPrefix) || strings.HasPrefix(f, auth.AccountPrefix) {
			return bad("subject %q is reserved for the server", f)
		}
		for _, g := range cfg.Subjects[:i] {
			if overlaps(f, g) {
				return bad("subjects %q and %q overlap", g, f)
			}
		}
	}
	switch cfg.Retention {
	case "":
		cfg.Retention = streamapi.RetainLimits
	case streamapi.RetainLimits, streamapi.RetainWorkQueue, streamapi.RetainInterest:
	default:
		return bad("retention %q: want limits, workqueue or interest", cfg.Retention)
	}
	switch cfg.Discard {
	case "":
		cfg.Discard = "old"
	case "old", "new":
	default:
		return bad("discard %q: want old or new", cfg.Discard)
	}
	if cfg.Partitions <= 0 {
		cfg.Partitions = 1
	}
	if cfg.Partitions > streamapi.MaxPartitions {
		return bad("at most %d partitions", streamapi.MaxPartitions)
	}
	if cfg.MaxMsgSize <= 0 || cfg.MaxMsgSize > m.cfg.MaxPayload {
		cfg.MaxMsgSize = m.cfg.MaxPayload
	}
	if cfg.MaxAge < 0 || cfg.MaxBytes < 0 || cfg.SegmentAge < 0 {
		return bad("limits and segment_age must not be negative")
	}
	if cfg.DuplicateWindow <= 0 {
		cfg.DuplicateWindow = streamapi.Duration(2 * time.Minute)
	}
	if cfg.Sync != "" {
		if _, err := store.ParseSyncPolicy(cfg.Sync); err != nil {
			return bad("%v", err)
		}
	}
	if cfg.SegmentBytes < 0 {
		return bad("segment size must not be negative")
	}
	if _, err := store.ParseCompression(cfg.Compression); err != nil {
		return bad("%v", err)
	}
	switch cfg.Replicas {
	case 0, 1, 3, 5:
	default:
		return bad("replicas %d: want 1, 3 or 5", cfg.Replicas)
	}
	if c := cfg.Compact; c != nil {
		if !c.Off && cfg.Retention != streamapi.RetainLimits {
			return bad("compaction needs retention limits, not %s", cfg.Retention)
		}
		if c.MinLag < 0 || c.TombstoneRetention < 0 || c.MaxLag < 0 {
			return bad("compaction's min lag, max lag and tombstone retention must not be negative")
		}
		if c.MaxLag > 0 && c.MaxLag < c.MinLag {
			return bad("compaction's max lag %v is below its min lag %v", time.Duration(c.MaxLag), time.Duration(c.MinLag))
		}
		cc := *c
		if cc.TombstoneRetention == 0 {
			cc.TombstoneRetention = streamapi.Duration(streamapi.DefaultTombstoneRetention)
		}
		cfg.Compact = &cc
	}
	return nil
}

// Overlaps reports whether two subject filters can match a subject in common.
func Overlaps(a, b string) bool { return overlaps(a, b) }

// checkOverlap refuses a stream whose subjects overlap another stream's of the
// same account: a message must belong to exactly one stream so that its publish
// ack is unambiguous. Accounts' subjects never meet.
func (m *Manager) checkOverlap(account string, cfg streamapi.StreamConfig, self string) error {
	for _, s := range m.streams {
		if s.acct != account || s.name == self {
			continue
		}
		name := s.name
		for _, f := range cfg.Subjects {
			for _, g := range s.cfg.Subjects {
				if overlaps(f, g) {
					return fmt.Errorf("stream %q: subject %q and stream %q's %q: %w", cfg.Name, f, name, g, ErrOverlap)
				}
			}
		}
	}
	return nil
}

// overlaps reports whether some subject matches both filters.
func overlaps(a, b string) bool {
	ta, tb := splitTokens(a), splitTokens(b)
	for i := 0; ; i++ {
		if i == len(ta) || i == len(tb) {
			return len(ta) == len(tb)
		}
		x, y := ta[i], tb[i]
		if x == ">" || y == ">" {
			return true
		}
		if x != "*" && y != "*" && x != y {
			return false
		}
	}
}

func splitTokens(s string) []string {
	var out []string
	for t := range subject.Tokens(s) {
		out = append(out, t)
	}
	return out
}

func configsEqual(a, b streamapi.StreamConfig) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// streamDef is what stream.json holds.
type streamDef struct {
	Config  streamapi.StreamConfig `json:"config"`
	Created time.Time              `json:"created"`
	// Group is the Raft group of a replicated stream's partition, 0 for a stream
	// of this node alone. A replica is opened by the cluster (OpenReplica), not
	// recovered at start.
	Group uint64 `json:"group,omitempty"`
	// Groups are the groups of every partition, Group first, when there are
	// more than one.
	Groups []uint64 `json:"groups,omitempty"`
	// Account is the account of the stream, empty for the global account.
	Account string `json:"account,omitempty"`
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// writeJSON replaces path atomically (write, optionally fsync, rename, fsync dir).
func writeJSON(path string, v any, sync bool) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(path, append(b, '\n'), sync)
}

// diskErr marks running out of space or quota as store.ErrNoSpace, which the stream
// API answers with 503 (storage unavailable) rather than 500.
func diskErr(err error) error {
	if (errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)) && !errors.Is(err, store.ErrNoSpace) {
		return fmt.Errorf("%w: %w", store.ErrNoSpace, err)
	}
	return err
}

func writeFileAtomic(path string, b []byte, sync bool) error {
	return diskErr(fileutil.WriteAtomic(path, b, sync))
}

// sortedKeys returns a map's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
