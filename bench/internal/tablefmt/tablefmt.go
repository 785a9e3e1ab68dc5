// Package tablefmt is how the bench reports print numbers in their Markdown tables
// and progress lines: throughputs to three significant digits, MB/s, message and
// byte sizes. One set of formats keeps the reports of different harnesses (streamvs,
// natsvs, replicatedvs) comparable cell by cell.
package tablefmt

import (
	"fmt"

	"github.com/tern-mq/tern/bench/internal/stats"
)

const kib = 1024

// Rate prints a throughput with three significant digits: 812k, 5.12M, 999, 4.50.
func Rate(v float64) string {
	unit := ""
	switch {
	case v >= 1e6:
		v, unit = v/1e6, "M"
	case v >= 1e3:
		v, unit = v/1e3, "k"
	}
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f%s", v, unit)
	case v >= 10:
		return fmt.Sprintf("%.1f%s", v, unit)
	default:
		return fmt.Sprintf("%.2f%s", v, unit)
	}
}

// MBps prints MB/s with three significant digits below 1,000: 812, 51.2, 5.12.
func MBps(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// Size prints a message size: "16 B", "1 KiB" (whole KiB only).
func Size(n int) string {
	if n >= kib && n%kib == 0 {
		return fmt.Sprintf("%d KiB", n/kib)
	}
	return fmt.Sprintf("%d B", n)
}

// Bytes prints an amount of data: "1 GiB" (whole GiB), "256 MiB", "512 KiB".
func Bytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20:
		return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
	}
}

// Plural is "1 run", "3 runs".
func Plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// RateCell is a throughput cell over a row's runs: "FAILED" when none completed,
// else the median rate, its min–max after more than one completed run, and a note
// when some failed (FailNote).
func RateCell(rate stats.Spread, completed, failed, runs int) string {
	if completed == 0 {
		return "FAILED"
	}
	s := Rate(rate.Median)
	if completed > 1 {
		s += " (" + Rate(rate.Min) + "–" + Rate(rate.Max) + ")"
	}
	return s + FailNote(failed, runs)
}

// FailNote is " [2 of 3 runs failed]", or nothing when no run failed.
func FailNote(failed, runs int) string {
	if failed == 0 {
		return ""
	}
	return fmt.Sprintf(" [%d of %d runs failed]", failed, runs)
}
