package hedgehttp_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgehttp"
)

// Tests of what happens to a hedged request under the routes' own delay
// first let the route learn when to hedge: learnTail sends the requests,
// and the test's Base answers them with tailing until the test arms it.

// tailing answers a request as an upstream with a tail that hedges cut:
// every tenth first attempt (counted in calls) takes 50 ms unless it is
// cancelled first, every other request 1 ms.
func tailing(r *http.Request, calls *atomic.Int32) (*http.Response, error) {
	if hedge.Attempt(r.Context()) == 0 && calls.Add(1)%10 == 0 {
		select {
		case <-time.After(50 * ms):
		case <-r.Context().Done():
			return nil, context.Cause(r.Context())
		}
	} else {
		time.Sleep(ms)
	}
	resp, _ := respond(200, "ok")
	return resp, nil
}

// learnTail sends tr the 1,000 requests after which its route's learned
// delay hedges the slow first attempts of tailing.
func learnTail(t *testing.T, tr *hedgehttp.Transport) {
	t.Helper()
	for range 1000 {
		resp, err := tr.RoundTrip(get(t, "http://upstream.test/"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
}
