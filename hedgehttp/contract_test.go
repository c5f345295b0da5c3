package hedgehttp_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgehttp"
)

// A Base that breaks the RoundTripper contract by returning neither a
// response nor an error makes RoundTrip fail with an error that says so,
// as http.Client does, not panic.
func TestBaseReturnsNothing(t *testing.T) {
	var calls atomic.Int32
	tr := &hedgehttp.Transport{
		Base:  roundTripFunc(func(*http.Request) (*http.Response, error) { calls.Add(1); return nil, nil }),
		Delay: hedge.Fixed(time.Hour),
	}
	resp, err := tr.RoundTrip(get(t, "http://upstream.test/"))
	if resp != nil || err == nil || !strings.Contains(err.Error(), "nil *http.Response") {
		t.Fatalf("RoundTrip = %v, %v; want no response and an error naming the nil response", resp, err)
	}
	// The error is retryable, as any failure of Base's: both attempts ran.
	if n := calls.Load(); n != 2 {
		t.Errorf("Base called %d times, want 2", n)
	}
}

// A classifier that panics on a response without a body reaches the
// caller with its own panic value.
func TestClassifierPanicWithoutBody(t *testing.T) {
	tr := &hedgehttp.Transport{
		Base: roundTripFunc(func(*http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: 204}, nil
		}),
		Delay:    hedge.Fixed(time.Hour),
		Classify: func(*http.Response, error) hedge.Outcome { panic("classifier bug") },
	}
	defer func() {
		v := recover()
		if pe, ok := v.(*hedge.PanicError); !ok || pe.Value != "classifier bug" {
			t.Errorf("recovered %v, want a *hedge.PanicError of the classifier's panic", v)
		}
	}()
	tr.RoundTrip(get(t, "http://upstream.test/"))
}
