package hedgehttp_test

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgehttp"
)

// A Base that calls runtime.Goexit in one attempt (t.FailNow in a test's
// Base does) ends the call the same way: RoundTrip's goroutine exits,
// and the other attempt's request, still waiting for its header, is
// cancelled. With Inline the first attempt runs on the caller's
// goroutine, where hedge.Do waits for it before it exits.
func TestBaseGoexitEndsTheCall(t *testing.T) {
	for _, inline := range []bool{false, true} {
		for _, who := range []string{"primary", "hedge"} {
			name := who + " exits"
			if inline {
				name += ", Inline"
			}
			t.Run(name, func(t *testing.T) {
				baseGoexitEndsTheCall(t, inline, who)
			})
		}
	}
}

func baseGoexitEndsTheCall(t *testing.T, inline bool, who string) {
	synctest.Test(t, func(t *testing.T) {
		var armed atomic.Bool
		var calls atomic.Int32
		hedged := make(chan struct{}) // the hedge has been sent
		other := make(chan error, 1)  // how the attempt that did not exit ended
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			first := hedge.Attempt(r.Context()) == 0
			switch {
			case !armed.Load():
				return tailing(r, &calls)
			case !first:
				close(hedged)
			}
			if first == (who == "primary") {
				if first {
					<-hedged
				}
				runtime.Goexit()
			}
			resp, err := hang(r)
			other <- err
			return resp, err
		})
		tr := &hedgehttp.Transport{Base: base, Inline: inline}
		learnTail(t, tr)
		armed.Store(true)
		exited := make(chan bool)
		go func() {
			returned := false
			defer func() { exited <- !returned }()
			tr.RoundTrip(get(t, "http://upstream.test/"))
			returned = true
		}()
		if !<-exited {
			t.Error("RoundTrip returned; want its goroutine to exit")
		}
		synctest.Wait()
		select {
		case err := <-other:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("the other attempt ended with %v, want context.Canceled", err)
			}
		default:
			t.Error("the other attempt is still waiting for its header")
		}
	})
}
