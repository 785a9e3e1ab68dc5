package records

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type run struct {
	System string `json:"system"`
	N      int    `json:"n"`
}

func TestAppendAndRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runs.jsonl")
	for i := range 3 {
		if err := Append(path, run{System: "tern", N: i}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ReadLines[run](path)
	if err != nil || len(got) != 3 || got[2].N != 2 {
		t.Fatalf("ReadLines = %+v, %v", got, err)
	}
	if err := os.WriteFile(path, []byte("{\"n\":1}\n\n{bad\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadLines[run](path); err == nil || !strings.Contains(err.Error(), ":3:") {
		t.Errorf("a bad line: %v, want an error naming line 3", err)
	}
}

func TestJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "summary.json")
	if err := WriteJSON(path, run{System: "js", N: 7}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if !strings.HasSuffix(string(b), "}\n") || !strings.Contains(string(b), "\n  \"n\": 7") {
		t.Errorf("WriteJSON wrote %q", b)
	}
	var r run
	if err := ReadJSON(path, &r); err != nil || r != (run{System: "js", N: 7}) {
		t.Errorf("ReadJSON = %+v, %v", r, err)
	}
}
