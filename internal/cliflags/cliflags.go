// Package cliflags holds the typed option values (pflag.Value) that the server's
// configuration and the command-line client share: byte sizes, enumerations,
// booleans, bounded integers, non-negative durations and plain strings, each with an error
// that names the value given and what is accepted. It also accepts the single-dash
// long options (-count 5) that Tern's commands took before they moved to pflag.
//
// It owns parsing and printing of option values only; what an option means belongs
// to the package that declares it.
package cliflags

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// ValueError is a value that an option does not accept: Value is what was given,
// Want says what would be.
type ValueError struct {
	Value string
	Want  string
}

func (e *ValueError) Error() string { return fmt.Sprintf("%q %s", e.Value, e.Want) }

// ---------------------------------------------------------------------------------
// Byte sizes

// byteUnits are the units a byte size may carry, upper-cased: powers of 1024 for
// the single letters and the IEC names, powers of 1000 for KB, MB, GB, TB.
var byteUnits = map[string]float64{
	"": 1, "B": 1,
	"K": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MIB": 1 << 20,
	"G": 1 << 30, "GIB": 1 << 30, "T": 1 << 40, "TIB": 1 << 40,
	"KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
}

// ByteSizeWant is what a byte size accepts, as error messages say it.
const ByteSizeWant = "is not a byte size (want e.g. 1048576, 64KiB, 8MiB, 1GiB)"

// ParseByteSize reads a byte count: a number with an optional unit, B, K or KiB, M
// or MiB, G or GiB, T or TiB (powers of 1024) or KB, MB, GB, TB (powers of 1000),
// in any case, e.g. 1048576, 64KiB, 1.5GiB, 10MB. Negative sizes are refused.
//
// Units follow Tern's documented meaning (K, M, G are powers of 1024 while KB, MB,
// GB are powers of 1000), which the common parsing libraries do not share.
func ParseByteSize(v string) (int64, error) {
	s := strings.TrimSpace(v)
	num := strings.TrimRightFunc(s, func(r rune) bool { return r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' })
	mult, ok := byteUnits[strings.ToUpper(strings.TrimSpace(s[len(num):]))]
	f, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || !ok || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, &ValueError{v, ByteSizeWant}
	}
	if n := f * mult; n < 1<<62 {
		return int64(n), nil
	}
	return 0, &ValueError{v, "is too large a byte size"}
}

// FormatByteSize prints n in the largest binary unit that divides it exactly:
// 64MiB, 1GiB, 1500.
func FormatByteSize(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10)
}

// ByteSize is a byte count option bound to an int or int64.
type ByteSize[T ~int | ~int64] struct{ p *T }

// NewByteSize binds a byte size option to *p, whose value is its default.
func NewByteSize[T ~int | ~int64](p *T) *ByteSize[T] { return &ByteSize[T]{p} }

func (b *ByteSize[T]) String() string { return FormatByteSize(int64(*b.p)) }
func (b *ByteSize[T]) Type() string   { return "bytes" }

func (b *ByteSize[T]) Set(v string) error {
	n, err := ParseByteSize(v)
	if err != nil {
		return err
	}
	if int64(T(n)) != n {
		return &ValueError{v, "is too large a byte size"}
	}
	*b.p = T(n)
	return nil
}

// ---------------------------------------------------------------------------------
// Enumerations

// Enum is a string option with a fixed set of values, matched without regard to
// case and stored as declared.
type Enum struct {
	p       *string
	allowed []string
}

// NewEnum binds an enumeration to *p, whose value is its default.
func NewEnum(p *string, allowed ...string) *Enum { return &Enum{p, allowed} }

// Allowed lists the values the option takes.
func (e *Enum) Allowed() []string { return e.allowed }

func (e *Enum) String() string { return *e.p }

// Type is the values separated by '|', as help shows it.
func (e *Enum) Type() string { return strings.Join(e.allowed, "|") }

func (e *Enum) Set(v string) error {
	for _, a := range e.allowed {
		if strings.EqualFold(strings.TrimSpace(v), a) {
			*e.p = a
			return nil
		}
	}
	return &ValueError{v, "is not one of " + strings.Join(e.allowed, ", ")}
}

// ---------------------------------------------------------------------------------
// Integers, durations, strings

// Int is an integer option within [Min, Max].
type Int struct {
	p        *int
	Min, Max int
}

// NewInt binds an integer option within [lo, hi] to *p, whose value is its default.
func NewInt(p *int, lo, hi int) *Int { return &Int{p, lo, hi} }

func (i *Int) String() string { return strconv.Itoa(*i.p) }
func (i *Int) Type() string   { return "int" }

func (i *Int) Set(v string) error {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return &ValueError{v, "is not an integer" + i.rangeText()}
	}
	if n < i.Min || n > i.Max {
		return &ValueError{v, "is out of range" + i.rangeText()}
	}
	*i.p = n
	return nil
}

func (i *Int) rangeText() string {
	switch {
	case i.Min == math.MinInt && i.Max == math.MaxInt:
		return " (want e.g. 0, 100, -1)"
	case i.Max == math.MaxInt:
		return fmt.Sprintf(" (want %d or more)", i.Min)
	}
	return fmt.Sprintf(" (want %d to %d)", i.Min, i.Max)
}

// DurationWant is what a duration accepts, as error messages say it.
const DurationWant = "is not a duration (want e.g. 500ms, 30s, 2m, 1h30m; not negative)"

// Duration is a non-negative time.Duration option in Go syntax.
type Duration struct{ p *time.Duration }

// NewDuration binds a duration option to *p, whose value is its default.
func NewDuration(p *time.Duration) *Duration { return &Duration{p} }

func (d *Duration) String() string { return d.p.String() }
func (d *Duration) Type() string   { return "duration" }

func (d *Duration) Set(v string) error {
	x, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil || x < 0 {
		return &ValueError{v, DurationWant}
	}
	*d.p = x
	return nil
}

// Bool is a true/false option; like every option it takes a value (--flag false),
// also 1/0, t/f in any case.
type Bool struct{ p *bool }

// NewBool binds a boolean option to *p, whose value is its default.
func NewBool(p *bool) *Bool { return &Bool{p} }

func (b *Bool) String() string { return strconv.FormatBool(*b.p) }
func (b *Bool) Type() string   { return "bool" }

func (b *Bool) Set(v string) error {
	x, err := strconv.ParseBool(strings.TrimSpace(v))
	if err != nil {
		return &ValueError{v, "is not a boolean (want true or false)"}
	}
	*b.p = x
	return nil
}

// String is a plain string option.
type String struct{ p *string }

// NewString binds a string option to *p, whose value is its default.
func NewString(p *string) *String { return &String{p} }

func (s *String) String() string     { return *s.p }
func (s *String) Type() string       { return "string" }
func (s *String) Set(v string) error { *s.p = v; return nil }

// ---------------------------------------------------------------------------------
// Go-style single-dash long options

// GoStyleArgs rewrites the single-dash long options that Go's flag package took
// (-count 5, -psk, -max-pending=1MiB) into pflag's double-dash form for the flags
// defined in fs; everything else, shorthands (-f), negative numbers and the
// arguments after "--" or after an option that takes a value, is left alone.
func GoStyleArgs(fs *pflag.FlagSet, args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		out = append(out, a)
		if a == "--" {
			return append(out, args[i+1:]...)
		}
		if len(a) < 2 || a[0] != '-' {
			continue
		}
		long := a[1] == '-'
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		var f *pflag.Flag
		switch {
		case long:
			f = fs.Lookup(name)
		case len(name) > 1:
			if f = fs.Lookup(name); f != nil {
				out[len(out)-1] = "-" + a
			}
		default:
			f = fs.ShorthandLookup(name)
		}
		// An option that takes a value and has none attached consumes the next
		// argument, which must not be rewritten.
		if f != nil && !hasValue && f.NoOptDefVal == "" && i+1 < len(args) {
			i++
			out = append(out, args[i])
		}
	}
	return out
}
