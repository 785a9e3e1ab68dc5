package main

import (
	"bytes"
	"slices"
	"testing"
)

func TestRatioColumns(t *testing.T) {
	bs := []broker{{name: "mosquitto"}, {name: "mochi"}, {name: "tern"}}
	if got, want := ratioHeads(bs), []string{"tern/mosquitto", "tern/mochi"}; !slices.Equal(got, want) {
		t.Errorf("ratioHeads = %q, want %q", got, want)
	}
	if got, want := ratioCells([]float64{100, 0, 250}), []string{"2.50×", "–"}; !slices.Equal(got, want) {
		t.Errorf("ratioCells = %q, want %q", got, want)
	}
	if got := ratioCells([]float64{100, 200, 0}); !slices.Equal(got, []string{"–", "–"}) {
		t.Errorf("ratioCells with the last failed = %q", got)
	}
	if got := ratioHeads(bs[:1]); len(got) != 0 {
		t.Errorf("one broker: ratioHeads = %q, want none", got)
	}
	if got := ratioCells(nil); len(got) != 0 {
		t.Errorf("no broker: ratioCells = %q, want none", got)
	}
	var b bytes.Buffer
	tableRow(&b, "a", "b c")
	if b.String() != "| a | b c |\n" {
		t.Errorf("tableRow = %q", b.String())
	}
}
