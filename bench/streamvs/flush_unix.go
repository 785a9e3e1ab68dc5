//go:build unix

package main

import "syscall"

// flushDisk asks the kernel to write every dirty page back (sync(2)), so what one
// run left in the page cache is not written back during the next.
func flushDisk() { syscall.Sync() }
