package hedge

import (
	"testing"
	"unsafe"
)

// The runtime gives objects of up to 512 bytes that hold pointers a
// cheaper allocation, without a malloc header; the call is allocated on
// every Do, and the collector's work follows its bytes. A field that
// pushes the call of a result of up to two words past 512 bytes costs
// the fast path.
func TestCallFitsWithoutMallocHeader(t *testing.T) {
	const limit = 512
	if n := unsafe.Sizeof(call[int]{}); n > limit {
		t.Errorf("call[int] is %d bytes, over %d", n, limit)
	}
	if n := unsafe.Sizeof(call[string]{}); n > limit {
		t.Errorf("call[string] is %d bytes, over %d", n, limit)
	}
}
