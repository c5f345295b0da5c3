package hedgehttp

import (
	"context"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strconv"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/internal/lab"
)

type baseFunc func(*http.Request) (*http.Response, error)

func (f baseFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A zero Transport's route learns from its servers' start signals where
// its primaries' time goes, as a tied hedge.Auto does: while they spend a
// third or more of it waiting for a worker, no hedge is sent against a
// primary that has started. A route whose primaries start at once hedges
// running work.
func TestTiedRouteHoldsHedgesAgainstRunningWork(t *testing.T) {
	for _, tc := range []struct {
		name    string
		waiting float64 // the share of its latency a primary waits before its start
		hedged  bool
	}{
		{"primaries start at once", 0, true},
		{"primaries wait two thirds of their time", 2.0 / 3, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const ms = time.Millisecond
				var probing, hedged atomic.Bool
				var work atomic.Int64 // the probe's primary's work
				started := func(r *http.Request) {
					httptrace.ContextClientTrace(r.Context()).Got1xxResponse(http.StatusEarlyHints,
						textproto.MIMEHeader{StartedHeader: {tieValue}})
				}
				base := baseFunc(func(r *http.Request) (*http.Response, error) {
					k := hedge.Attempt(r.Context())
					ok := &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}
					if probing.Load() {
						if k > 0 {
							hedged.Store(true)
							started(r)
							return ok, lab.Wait(r.Context(), ms)
						}
						started(r)
						return ok, lab.Wait(r.Context(), time.Duration(work.Load()))
					}
					i, _ := strconv.Atoi(r.Header.Get("Call"))
					d := lab.FastSlow.Latency(i, k)
					var queue time.Duration
					if k == 0 {
						queue = time.Duration(tc.waiting * float64(d))
					}
					if err := lab.Wait(r.Context(), queue); err != nil {
						return nil, err
					}
					started(r)
					return ok, lab.Wait(r.Context(), d-queue)
				})
				tr := &Transport{Base: base}
				call := func(i int) {
					req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://upstream.test/", nil)
					req.Header.Set("Call", strconv.Itoa(i))
					resp, err := tr.RoundTrip(req)
					if err != nil {
						t.Fatal(err)
					}
					resp.Body.Close()
					synctest.Wait()
				}
				tr.once.Do(tr.init)
				probe, _ := http.NewRequest(http.MethodGet, "http://upstream.test/", nil)
				a := tr.routes.of(probe).learned
				// A clock that stands still: calls one after another are no surge.
				a.Clock = clock.NewMock()
				ctx := context.Background()
				for i := range 750 {
					a.Learn(ctx, lab.FastSlow.Latency(i, 0), true)
				}
				for i := range 1000 {
					call(i)
				}
				for range 1000 {
					a.Allow(ctx, 0)
				}
				plan := a.Plan(ctx)
				if plan.Hedges == 0 {
					t.Fatalf("plan %+v, want hedges", plan)
				}
				probing.Store(true)
				work.Store(int64(10 * plan.Delay))
				call(0)
				if got := hedged.Load(); got != tc.hedged {
					t.Errorf("a primary that started at once: hedged %v, want %v", got, tc.hedged)
				}
			})
		})
	}
}
