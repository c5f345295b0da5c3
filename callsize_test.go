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

// The call of a one-word result fits the runtime's 448-byte size class,
// one below 512: on the fast path the call is most of the bytes Do
// allocates, and the collector's pace and the sweeping of its spans
// follow those bytes. A policy's own clock lives behind a pointer and
// the counts of attempts are bytes, which keeps it there.
func TestCallFitsSizeClass448(t *testing.T) {
	const limit = 448
	if n := unsafe.Sizeof(call[int]{}); n > limit {
		t.Errorf("call[int] is %d bytes, over %d", n, limit)
	}
}
