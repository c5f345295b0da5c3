package hedgehttp

import (
	"reflect"
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

// hedge.Do's state holds a copy of the value run returns: of one word, it
// fits the allocator's size class of 448 bytes (the core's
// TestCallFitsSizeClass448), where the three words of a response, an
// outcome and an attempt took it to 480 on every hedged request.
func TestResultIsOneWord(t *testing.T) {
	if size, word := reflect.TypeOf(run).Out(0).Size(), unsafe.Sizeof(uintptr(0)); size > word {
		t.Errorf("run returns %d bytes to hedge.Do, want at most one word (%d)", size, word)
	}
}
