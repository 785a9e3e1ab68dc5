package wire

import "github.com/tern-mq/tern/internal/header"

// Header is an encoded header block as carried in PUB and MSG frames; its format and
// methods are defined by package header, the encoding every front end shares.
type Header = header.Block

// Well-known header keys and values (see package header).
const (
	HeaderStatus       = header.Status
	HeaderDescription  = header.Description
	StatusNoResponders = header.StatusNoResponders
)

// ErrBadHeader reports a header block that does not parse.
var ErrBadHeader = header.ErrMalformed

// AppendHeader appends one key/value pair to an encoded header block.
func AppendHeader[S text](dst []byte, key, value S) []byte { return header.Append(dst, key, value) }
