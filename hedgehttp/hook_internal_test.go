package hedgehttp

import (
	"context"
	"net/http/httptrace"
	"net/textproto"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Each attempt's hook is built in the attempt itself, from a method value
// laid out as the toolchain lays it out, and reaches its own attempt: an
// informational response that is no start signal goes, through the
// attempt's call, to that call's caller's hook and no other.
func TestHookLayout(t *testing.T) {
	if got1xxCode == 0 {
		t.Fatal("a method value's closure is not laid out as code and receiver: every attempt's hook allocates")
	}
	var heard []string
	attemptOf := func(name string) *attempt {
		c := &call{Context: httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			Got1xxResponse: func(int, textproto.MIMEHeader) error {
				heard = append(heard, name)
				return nil
			},
		})}
		a := &attempt{hctx: c}
		a.trace.Got1xxResponse = a.got1xxHook()
		return a
	}
	first, second := attemptOf("first"), attemptOf("second")
	for _, a := range []*attempt{second, first, second} {
		if err := a.trace.Got1xxResponse(103, textproto.MIMEHeader{"Link": {"</style.css>"}}); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff([]string{"second", "first", "second"}, heard); diff != "" {
		t.Errorf("the callers' hooks heard (-want +got):\n%s", diff)
	}
	if n := testing.AllocsPerRun(100, func() { first.trace.Got1xxResponse = first.got1xxHook() }); n != 0 {
		t.Errorf("building a hook: %v allocations, want 0", n)
	}
}
