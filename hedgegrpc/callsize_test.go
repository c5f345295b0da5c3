package hedgegrpc

import (
	"testing"
	"unsafe"
)

// A hedged unary call allocates its state on every call. Up to 512 bytes
// the runtime allocates an object that holds pointers without a malloc
// header, and the collector's work follows the bytes: a field that pushes
// the call past 512 costs every call. The peer an attempt collects for a
// caller that asks lives behind a pointer for that reason.
func TestCallFitsWithoutMallocHeader(t *testing.T) {
	const limit = 512
	if n := unsafe.Sizeof(call{}); n > limit {
		t.Errorf("call is %d bytes, over %d", n, limit)
	}
}
