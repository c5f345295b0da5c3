package hedgehttp

import (
	"testing"
	"unsafe"
)

// Every hedged request allocates a call, which holds the copy of the
// request its attempts send and the primary's attempt. An object of more
// than 512 bytes that holds pointers takes an 8-byte header, so a call of
// at most 760 bytes fits the allocator's size class of 768; a field more,
// or a flag out of its shared word, moves it to the class of 896.
func TestCallFitsItsSizeClass(t *testing.T) {
	if size := unsafe.Sizeof(call{}); size > 768-8 {
		t.Errorf("a call takes %d bytes, want at most %d", size, 768-8)
	}
}
