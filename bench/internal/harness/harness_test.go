package harness

import (
	"bytes"
	"context"
	"io"
	"slices"
	"strings"
	"testing"
)

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"1GiB": 1 << 30, "256MiB": 256 << 20, "4 MiB": 4 << 20, "512KiB": 512 << 10, "4194304": 4 << 20, "1.5G": 3 << 29, "100B": 100} {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "lots", "-1MiB", "0"} {
		if _, err := ParseBytes(in); err == nil {
			t.Errorf("ParseBytes(%q): no error", in)
		}
	}
}

func TestLists(t *testing.T) {
	if got := SplitList(" a, ,b,"); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("SplitList = %q", got)
	}
	if got, err := ParsePIDs("12, 34"); err != nil || !slices.Equal(got, []int{12, 34}) {
		t.Errorf("ParsePIDs = %v, %v", got, err)
	}
	for _, bad := range []string{"0", "x", "-3"} {
		if _, err := ParsePIDs(bad); err == nil {
			t.Errorf("ParsePIDs(%q): no error", bad)
		}
	}
	if got, err := ParseInts("1000,-1"); err != nil || !slices.Equal(got, []int{1000, -1}) {
		t.Errorf("ParseInts = %v, %v", got, err)
	}
}

func TestDispatch(t *testing.T) {
	var ran []string
	cmds := map[string]Func{"a": func(_ context.Context, args []string, _, _ io.Writer) error {
		ran = append(ran, strings.Join(args, " "))
		return nil
	}}
	var out, errw bytes.Buffer
	if err := Dispatch(context.Background(), []string{"a", "x", "y"}, &out, &errw, "USAGE\n", cmds); err != nil || !slices.Equal(ran, []string{"x y"}) {
		t.Fatalf("Dispatch a: %v, ran %q", err, ran)
	}
	if err := Dispatch(context.Background(), []string{"--help"}, &out, &errw, "USAGE\n", cmds); err != nil || out.String() != "USAGE\n" {
		t.Errorf("--help: %v, stdout %q", err, out.String())
	}
	if err := Dispatch(context.Background(), nil, &out, &errw, "USAGE\n", cmds); err == nil || errw.String() != "USAGE\n" {
		t.Errorf("no command: %v, stderr %q", err, errw.String())
	}
	if err := Dispatch(context.Background(), []string{"b"}, &out, &errw, "USAGE\n", cmds); err == nil || !strings.Contains(err.Error(), `"b"`) {
		t.Errorf("unknown command: %v", err)
	}
}

func TestRunOrder(t *testing.T) {
	systems := []string{"tern", "js"}
	if got := RunOrder(systems, 0); !slices.Equal(got, systems) {
		t.Errorf("run 0: %q", got)
	}
	if got := RunOrder(systems, 1); !slices.Equal(got, []string{"js", "tern"}) || systems[0] != "tern" {
		t.Errorf("run 1: %q (systems now %q)", got, systems)
	}
}
