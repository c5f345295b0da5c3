// Package goid tells goroutines apart, for the tests of hedge and its
// adapters that check which goroutine runs an attempt.
package goid

import (
	"bytes"
	"runtime"
	"strconv"
)

// Current returns the calling goroutine's number, as its stack's header
// ("goroutine N [running]:") gives it. It is for tests: it costs a stack
// trace.
func Current() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	id, _ := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return id
}
