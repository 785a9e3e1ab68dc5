package purity

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// forbiddenImports are packages that reach the outside world.
var forbiddenImports = map[string]bool{"net": true, "os": true, "os/exec": true, "syscall": true, "os/signal": true}

// forbiddenTime are the functions of package time that read the clock or start
// timers; durations and times passed in are fine.
var forbiddenTime = map[string]bool{
	"Now": true, "Since": true, "Until": true, "Sleep": true, "After": true,
	"AfterFunc": true, "NewTimer": true, "NewTicker": true, "Tick": true,
}

func TestStateMachinesArePure(t *testing.T) {
	root := filepath.Join("..", "..")
	for _, pkg := range Pure {
		dir := filepath.Join(root, pkg)
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatalf("%s: %v", pkg, err)
		}
		files := 0
		for _, e := range entries {
			name := e.Name()
			if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
				continue
			}
			files++
			checkFile(t, filepath.Join(dir, name))
		}
		if files == 0 {
			t.Errorf("%s: no Go files", pkg)
		}
	}
}

// reporter is what checkFile reports to: a *testing.T, or a recorder.
type reporter interface {
	Errorf(format string, args ...any)
	Fatal(args ...any)
}

func checkFile(t reporter, path string) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	timeName := ""
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if forbiddenImports[p] || strings.HasPrefix(p, "net/") {
			t.Errorf("%s imports %q", fset.Position(imp.Pos()), p)
		}
		if p == "time" {
			timeName = "time"
			if imp.Name != nil {
				timeName = imp.Name.Name
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			t.Errorf("%s starts a goroutine", fset.Position(n.Pos()))
		case *ast.SelectorExpr:
			if id, ok := n.X.(*ast.Ident); ok && timeName != "" && id.Name == timeName && forbiddenTime[n.Sel.Name] {
				t.Errorf("%s uses time.%s: time must be passed in", fset.Position(n.Pos()), n.Sel.Name)
			}
		}
		return true
	})
}

// TestCheckerCatchesImpurity proves the checker fails on what it forbids.
func TestCheckerCatchesImpurity(t *testing.T) {
	dir := t.TempDir()
	src := `package bad

import (
	"fmt"
	"net"
	clock "time"
)

var _ net.Conn

func f() { go func() {}(); _ = clock.Now() }
`
	path := filepath.Join(dir, "bad.go")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	checkFile(rec, path)
	if len(rec.errs) != 3 {
		t.Fatalf("checker found %d problems in a file with 3: %q", len(rec.errs), rec.errs)
	}
}

type recorder struct{ errs []string }

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *recorder) Fatal(args ...any) { r.errs = append(r.errs, fmt.Sprint(args...)) }
