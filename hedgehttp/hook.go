package hedgehttp

import (
	"net/textproto"
	"unsafe"
)

// An attempt's Got1xxResponse hook must know its attempt, and a func
// value that carries a pointer is a closure: made with a.got1xx, it is an
// allocation of its own on every attempt, which a call whose first
// attempt answers (most calls) pays for nothing. The gc toolchain lays
// out a method value's closure as two words, the code of the method's
// wrapper and the receiver, so the attempt holds those two words itself
// (hook1xx) and its hook points at them: the same func value the
// compiler would build, inside an allocation the call makes anyway.
//
// got1xxCode is that wrapper's code, read once from a method value the
// compiler built, and only if its layout is the one above: otherwise it
// is 0, and every attempt makes its hook with a.got1xx as before.
// TestHookLayout fails on a toolchain where it is 0.
var got1xxCode = func() uintptr {
	probe := new(attempt)
	f := probe.got1xx
	words := (*[2]uintptr)(*(*unsafe.Pointer)(unsafe.Pointer(&f)))
	if words[1] != uintptr(unsafe.Pointer(probe)) {
		return 0
	}
	return words[0]
}()

// hook1xx is the closure of attempt a's Got1xxResponse hook, laid out as
// the compiler lays out a.got1xx's: see got1xxCode.
type hook1xx struct {
	code uintptr
	a    *attempt
}

// got1xxHook returns a's Got1xxResponse hook, built in a.hook.
func (a *attempt) got1xxHook() func(int, textproto.MIMEHeader) error {
	if got1xxCode == 0 {
		return a.got1xx
	}
	a.hook = hook1xx{got1xxCode, a}
	closure := &a.hook
	return *(*func(int, textproto.MIMEHeader) error)(unsafe.Pointer(&closure))
}
