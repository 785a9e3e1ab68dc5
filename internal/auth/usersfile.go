package auth

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/xdg-go/scram"
	"golang.org/x/crypto/bcrypt"
)

// Limits of the users file, so a mistaken or hostile file cannot exhaust memory.
const (
	MaxUsersFileBytes = 16 << 20
	MaxPatterns       = 10_000 // per list
)

// ErrUsersFile wraps every problem found in a users file.
var ErrUsersFile = errors.New("users file")

// usersFile is the TOML form of the users file (docs/security.md).
type usersFile struct {
	AnonymousUser string       `toml:"anonymous_user"`
	Accounts      []accountDef `toml:"accounts"`
	Groups        []groupDef   `toml:"groups"`
	Users         []userDef    `toml:"users"`
}

type permList struct {
	Allow []string `toml:"allow"`
	Deny  []string `toml:"deny"`
}

type grants struct {
	Publish   permList `toml:"publish"`
	Subscribe permList `toml:"subscribe"`
	Admin     bool     `toml:"admin"`
	Monitor   bool     `toml:"monitor"`
	// AllowResponses: see PermissionSpec.AllowResponses.
	AllowResponses bool `toml:"allow_responses"`
}

type groupDef struct {
	Name string `toml:"name"`
	grants
}

type userDef struct {
	Name        string   `toml:"name"`
	Password    string   `toml:"password"`
	SCRAMSHA256 string   `toml:"scram_sha256"`
	SCRAMSHA512 string   `toml:"scram_sha512"`
	Tokens      []string `toml:"tokens"`
	CertSubject string   `toml:"cert_subject"`
	CertSAN     string   `toml:"cert_san"`
	Account     string   `toml:"account"`
	Groups      []string `toml:"groups"`
	grants
}

// userTable is a parsed users file: the users by each way of finding them.
type userTable struct {
	byName    map[string]*entry
	byToken   map[[32]byte]*entry
	bySubject map[string]*entry
	bySAN     map[string]*entry
	anonymous *User // the anonymous_user's rights; nil = unrestricted
	accounts  map[string]*Account
}

// entry is one user with its secrets, which never leave this package.
type entry struct {
	user     *User
	password []byte // bcrypt hash, nil when the user has none
	scram    map[string]scram.StoredCredentials
}

// parseUsersFile parses and checks a users file. usage gives each account its
// counters (nil: fresh ones).
func parseUsersFile(data []byte, usage func(string) *accountUsage) (*userTable, error) {
	if usage == nil {
		usage = func(string) *accountUsage { return &accountUsage{} }
	}
	if len(data) > MaxUsersFileBytes {
		return nil, fmt.Errorf("%w: %d bytes, over the %d byte limit", ErrUsersFile, len(data), MaxUsersFileBytes)
	}
	var f usersFile
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(&f)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUsersFile, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		return nil, fmt.Errorf("%w: unknown key %q", ErrUsersFile, und[0].String())
	}
	groups := make(map[string]*groupDef, len(f.Groups))
	for i := range f.Groups {
		g := &f.Groups[i]
		if err := checkName("group", g.Name); err != nil {
			return nil, err
		}
		if groups[g.Name] != nil {
			return nil, fmt.Errorf("%w: group %q defined twice", ErrUsersFile, g.Name)
		}
		groups[g.Name] = g
	}
	accts, err := buildAccounts(f.Accounts, usage)
	if err != nil {
		return nil, err
	}
	t := &userTable{byName: map[string]*entry{}, byToken: map[[32]byte]*entry{},
		bySubject: map[string]*entry{}, bySAN: map[string]*entry{}, accounts: accts}
	for i := range f.Users {
		e, err := buildUser(&f.Users[i], groups)
		if err != nil {
			return nil, err
		}
		d := &f.Users[i]
		acct := GlobalAccount
		if d.Account != "" {
			acct = d.Account
		}
		if e.user.Account = accts[acct]; e.user.Account == nil {
			return nil, fmt.Errorf("%w: user %q: account %q is not defined", ErrUsersFile, d.Name, d.Account)
		}
		if t.byName[d.Name] != nil {
			return nil, fmt.Errorf("%w: user %q defined twice", ErrUsersFile, d.Name)
		}
		t.byName[d.Name] = e
		for _, tok := range d.Tokens {
			h, err := parseTokenHash(tok)
			if err != nil {
				return nil, fmt.Errorf("%w: user %q: %w", ErrUsersFile, d.Name, err)
			}
			if t.byToken[h] != nil {
				return nil, fmt.Errorf("%w: user %q: token given to two users", ErrUsersFile, d.Name)
			}
			t.byToken[h] = e
		}
		if d.CertSubject != "" {
			if t.bySubject[d.CertSubject] != nil {
				return nil, fmt.Errorf("%w: user %q: cert_subject %q given to two users", ErrUsersFile, d.Name, d.CertSubject)
			}
			t.bySubject[d.CertSubject] = e
		}
		if d.CertSAN != "" {
			if t.bySAN[d.CertSAN] != nil {
				return nil, fmt.Errorf("%w: user %q: cert_san %q given to two users", ErrUsersFile, d.Name, d.CertSAN)
			}
			t.bySAN[d.CertSAN] = e
		}
	}
	if f.AnonymousUser != "" {
		e := t.byName[f.AnonymousUser]
		if e == nil {
			return nil, fmt.Errorf("%w: anonymous_user %q is not a user", ErrUsersFile, f.AnonymousUser)
		}
		t.anonymous = &User{Perms: e.user.Perms, Admin: e.user.Admin, Monitor: e.user.Monitor, Account: e.user.Account}
	}
	return t, nil
}

func checkName(what, name string) error {
	if name == "" {
		return fmt.Errorf("%w: a %s without a name", ErrUsersFile, what)
	}
	if len(name) > 256 || strings.ContainsAny(name, ":\x00") {
		return fmt.Errorf("%w: %s name %q: at most 256 bytes, no ':'", ErrUsersFile, what, name)
	}
	return nil
}

func buildUser(d *userDef, groups map[string]*groupDef) (*entry, error) {
	if err := checkName("user", d.Name); err != nil {
		return nil, err
	}
	bad := func(err error) error { return fmt.Errorf("%w: user %q: %w", ErrUsersFile, d.Name, err) }
	e := &entry{user: &User{Name: d.Name, Admin: d.Admin, Monitor: d.Monitor}}
	if d.Password != "" {
		if _, err := bcrypt.Cost([]byte(d.Password)); err != nil {
			return nil, bad(fmt.Errorf("password must be a bcrypt hash (`tern passwd` makes one): %w", err))
		}
		e.password = []byte(d.Password)
	}
	for mech, s := range map[string]string{SCRAMSHA256: d.SCRAMSHA256, SCRAMSHA512: d.SCRAMSHA512} {
		if s == "" {
			continue
		}
		c, err := parseSCRAM(s)
		if err != nil {
			return nil, bad(fmt.Errorf("%s: %w", strings.ToLower(strings.ReplaceAll(mech, "-", "_")), err))
		}
		if e.scram == nil {
			e.scram = map[string]scram.StoredCredentials{}
		}
		e.scram[mech] = c
	}
	// The user's own grants and its groups' add up; deny entries win.
	all := []*grants{&d.grants}
	for _, gn := range d.Groups {
		g := groups[gn]
		if g == nil {
			return nil, bad(fmt.Errorf("group %q is not defined", gn))
		}
		all = append(all, &g.grants)
	}
	var spec PermissionSpec
	restricted := false
	for _, g := range all {
		e.user.Admin = e.user.Admin || g.Admin
		e.user.Monitor = e.user.Monitor || g.Monitor
		spec.AllowResponses = spec.AllowResponses || g.AllowResponses
		spec.PublishAllow = append(spec.PublishAllow, g.Publish.Allow...)
		spec.PublishDeny = append(spec.PublishDeny, g.Publish.Deny...)
		spec.SubscribeAllow = append(spec.SubscribeAllow, g.Subscribe.Allow...)
		spec.SubscribeDeny = append(spec.SubscribeDeny, g.Subscribe.Deny...)
		restricted = restricted || len(g.Publish.Allow)+len(g.Publish.Deny)+len(g.Subscribe.Allow)+len(g.Subscribe.Deny) > 0
	}
	for _, l := range [][]string{spec.PublishAllow, spec.PublishDeny, spec.SubscribeAllow, spec.SubscribeDeny} {
		if len(l) > MaxPatterns {
			return nil, bad(fmt.Errorf("%d patterns in one list, over the limit of %d", len(l), MaxPatterns))
		}
	}
	if e.user.Admin && len(spec.PublishAllow) > 0 {
		spec.PublishAllow = append(spec.PublishAllow, apiPattern)
	}
	if restricted {
		p, err := NewPermissions(spec)
		if err != nil {
			return nil, bad(err)
		}
		e.user.Perms = p
	}
	return e, nil
}

// TokenPrefix starts a token's hash in the users file.
const TokenPrefix = "sha256:"

func parseTokenHash(s string) ([32]byte, error) {
	var h [32]byte
	hexed, ok := strings.CutPrefix(s, TokenPrefix)
	if !ok {
		return h, fmt.Errorf("token %q: want %s and 64 hex digits (`tern passwd --token` makes one)", abbreviate(s), TokenPrefix)
	}
	b, err := hex.DecodeString(hexed)
	if err != nil || len(b) != len(h) {
		return h, fmt.Errorf("token %q: want %s and 64 hex digits", abbreviate(s), TokenPrefix)
	}
	copy(h[:], b)
	return h, nil
}

// abbreviate keeps most of a mistaken secret out of error messages.
func abbreviate(s string) string {
	if len(s) > 10 {
		return s[:10] + "..."
	}
	return s
}

// SCRAM mechanism names, as Kafka's SASL handshake spells them.
const (
	SCRAMSHA256 = "SCRAM-SHA-256"
	SCRAMSHA512 = "SCRAM-SHA-512"
)

// parseSCRAM reads stored SCRAM credentials: "iterations:salt:stored_key:server_key",
// the last three in standard base64.
func parseSCRAM(s string) (scram.StoredCredentials, error) {
	var c scram.StoredCredentials
	parts := strings.Split(s, ":")
	if len(parts) != 4 {
		return c, errors.New("want iterations:salt:stored_key:server_key (`tern passwd` makes it)")
	}
	iters, err := strconv.Atoi(parts[0])
	if err != nil || iters < 4096 || iters > 1_000_000 {
		return c, fmt.Errorf("iterations %q: want 4096 to 1000000", parts[0])
	}
	var raw [3][]byte
	for i, p := range parts[1:] {
		if raw[i], err = base64.StdEncoding.DecodeString(p); err != nil || len(raw[i]) == 0 {
			return c, fmt.Errorf("field %d is not base64", i+2)
		}
	}
	c.Iters, c.Salt, c.StoredKey, c.ServerKey = iters, string(raw[0]), raw[1], raw[2]
	return c, nil
}

// FormatSCRAM is the users file's form of SCRAM credentials for password.
func FormatSCRAM(mechanism, password string, salt []byte, iterations int) (string, error) {
	hf := scram.SHA256
	if mechanism == SCRAMSHA512 {
		hf = scram.SHA512
	}
	client, err := hf.NewClient("", password, "")
	if err != nil {
		return "", fmt.Errorf("scram: %w", err)
	}
	kf := scram.KeyFactors{Salt: string(salt), Iters: iterations}
	c, err := client.GetStoredCredentialsWithError(kf)
	if err != nil {
		return "", fmt.Errorf("scram: %w", err)
	}
	enc := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("%d:%s:%s:%s", iterations, enc(salt), enc(c.StoredKey), enc(c.ServerKey)), nil
}

// TokenHash is the users file's form of a bearer token: its SHA-256. Tokens are
// long random strings, so a fast hash suffices and lets a login find its user at
// once.
func TokenHash(token []byte) string {
	h := sha256.Sum256(token)
	return TokenPrefix + hex.EncodeToString(h[:])
}
