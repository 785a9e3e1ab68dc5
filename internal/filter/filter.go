// Package filter owns receiver-side subscription filters: boolean expressions a
// subscriber attaches so that it receives only the messages it asked for, such as
//
//	hdr.sender == "s1" && size <= 512
//
// Expressions are compiled once with github.com/expr-lang/expr and evaluated per
// message. Visible to an expression:
//
//	size      int     payload length in bytes
//	subject   string  the message subject
//	hdr.KEY   string  first value of header KEY ("" when absent); hdr["any-key"] too
//	"k" in hdr        whether header k is present
//
// plus expr's operators and built-ins (matches, startsWith, contains, len, ...).
// Expressions longer than MaxLen bytes or with more than MaxNodes syntax nodes are
// refused. The package knows nothing of the wire format: callers adapt their header
// encoding to the Headers interface.
package filter

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/vm"
)

// Limits of a filter expression.
const (
	MaxLen   = 1024 // bytes of source
	MaxNodes = 256  // syntax tree nodes
)

// Errors from Compile; callers branch with errors.Is.
var (
	ErrInvalid = errors.New("invalid filter")
	ErrTooLong = errors.New("filter too long")
)

// Headers is read access to a message's headers without copying them.
type Headers interface {
	// Lookup returns the first value of key.
	Lookup(key string) (value string, ok bool)
}

// Message is what a filter sees of a message.
type Message struct {
	Subject []byte
	Size    int
	Headers Headers // nil: no headers
}

// Filter is a compiled expression, immutable and safe for concurrent use.
type Filter struct {
	src     string
	program *vm.Program
	vms     sync.Pool // *runner
}

// env is the evaluation environment. Hdr exists only so the checker knows `hdr`;
// compile rewrites every use of it into calls of the methods below.
//
// The header functions are func-typed fields bound once per pooled runner: expr calls
// functions of these common signatures without reflection, which methods would need.
type env struct {
	Size          int                 `expr:"size"`
	Subject       string              `expr:"subject"`
	Hdr           map[string]string   `expr:"hdr"`
	HeaderValue   func(string) string `expr:"hdrValue"`
	HeaderPresent func(string) bool   `expr:"hdrPresent"`
	headers       Headers
}

func newRunner() *runner {
	r := &runner{}
	r.env.HeaderValue = r.env.headerValue
	r.env.HeaderPresent = r.env.headerPresent
	return r
}

// headerValue is what hdr.KEY and hdr["KEY"] compile to.
func (e *env) headerValue(key string) string {
	if e.headers == nil {
		return ""
	}
	v, _ := e.headers.Lookup(key)
	return v
}

// headerPresent is what `"KEY" in hdr` compiles to.
func (e *env) headerPresent(key string) bool {
	if e.headers == nil {
		return false
	}
	_, ok := e.headers.Lookup(key)
	return ok
}

type runner struct {
	vm  vm.VM
	env env
}

// hdrRewriter turns header access on the `hdr` identifier into method calls.
type hdrRewriter struct{}

func isHdr(n ast.Node) bool {
	id, ok := n.(*ast.IdentifierNode)
	return ok && id.Value == "hdr"
}

func (hdrRewriter) Visit(node *ast.Node) {
	switch n := (*node).(type) {
	case *ast.MemberNode:
		if isHdr(n.Node) && !n.Method {
			ast.Patch(node, &ast.CallNode{
				Callee:    &ast.IdentifierNode{Value: "hdrValue"},
				Arguments: []ast.Node{n.Property},
			})
		}
	case *ast.BinaryNode:
		if n.Operator == "in" && isHdr(n.Right) {
			ast.Patch(node, &ast.CallNode{
				Callee:    &ast.IdentifierNode{Value: "hdrPresent"},
				Arguments: []ast.Node{n.Left},
			})
		}
	}
}

// Compile parses and type-checks src. The expression must yield a boolean.
func Compile(src string) (*Filter, error) {
	if len(src) > MaxLen {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLong, len(src), MaxLen)
	}
	program, err := expr.Compile(src,
		expr.Env(&env{}),
		expr.AsBool(),
		expr.Patch(hdrRewriter{}),
		expr.MaxNodes(MaxNodes),
	)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %v", ErrInvalid, src, err)
	}
	return &Filter{src: src, program: program}, nil
}

// Match reports whether m passes the filter. A runtime error (such as a failed
// conversion) counts as no match.
func (f *Filter) Match(m *Message) bool {
	r, _ := f.vms.Get().(*runner)
	if r == nil {
		r = newRunner()
	}
	r.env.Size = m.Size
	r.env.Subject = ""
	if len(m.Subject) > 0 {
		// Evaluation is synchronous; the string never outlives m.
		r.env.Subject = unsafe.String(&m.Subject[0], len(m.Subject))
	}
	r.env.headers = m.Headers
	out, err := r.vm.Run(f.program, &r.env)
	r.env.headers = nil
	r.env.Subject = ""
	f.vms.Put(r)
	if err != nil {
		return false
	}
	ok, _ := out.(bool)
	return ok
}

// String returns the source expression.
func (f *Filter) String() string { return f.src }
