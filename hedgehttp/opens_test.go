package hedgehttp_test

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgehttp"
)

// breakerHearing is an Observer that, as hedgeotel's does, also hears
// when a route's breaker opens.
type breakerHearing struct {
	mu       sync.Mutex
	reported []string // the routes of the reports, one entry per route
	opened   []string // the routes whose breaker opened, in order
}

func (o *breakerHearing) Observe(ctx context.Context, _ hedge.Report) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if r := hedgehttp.Route(ctx); !slices.Contains(o.reported, r) {
		o.reported = append(o.reported, r)
	}
}

func (o *breakerHearing) BreakerOpened(route string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.opened = append(o.opened, route)
}

func (o *breakerHearing) heard() (reported, opened []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.reported), slices.Clone(o.opened)
}

// The breaker of each route's own Adaptive reports its openings to an
// Observer that hears them, under the route's name, as Route gives it to
// the Observer's reports: once per opening, whether the route is a
// method and host, a pattern or the overflow route. Against an upstream
// that answers 503, a route's breaker opens at its 100th request, when
// it has judged 100 first attempts, all failed.
func TestBreakerOpeningsReachTheObserver(t *testing.T) {
	tests := []struct {
		name      string
		routes    []string
		maxRoutes int
		before    string // a request that takes the only route of its own, if set
		url       string
		want      string
	}{
		{name: "method and host", url: "http://upstream.test/users/7", want: "GET upstream.test"},
		{name: "pattern", routes: []string{"GET /users/{id}"}, url: "http://upstream.test/users/7", want: "GET /users/{id}"},
		{name: "overflow", maxRoutes: 1, before: "http://first.test/", url: "http://upstream.test/users/7", want: "(other)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				base := servePipes(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					http.Error(w, "down", http.StatusServiceUnavailable)
				}))
				obs := &breakerHearing{}
				tr := &hedgehttp.Transport{Base: base, Observer: obs, Routes: tt.routes, MaxRoutes: tt.maxRoutes}
				send := func(url string) {
					t.Helper()
					resp, err := tr.RoundTrip(get(t, url))
					if err != nil {
						t.Fatal(err)
					}
					resp.Body.Close()
				}
				if tt.before != "" {
					send(tt.before)
				}
				for i := range 100 {
					send(tt.url)
					if _, opened := obs.heard(); len(opened) > 0 && i < 99 {
						t.Fatalf("the breaker opened at request %d, before 100 first attempts had failed", i)
					}
				}
				// While it is open, failures open nothing more.
				for range 100 {
					send(tt.url)
				}
				reported, opened := obs.heard()
				if !slices.Contains(reported, tt.want) {
					t.Errorf("the reports' routes are %q, want %q among them", reported, tt.want)
				}
				if diff := cmp.Diff([]string{tt.want}, opened); diff != "" {
					t.Errorf("BreakerOpened heard (-want +got):\n%s", diff)
				}
			})
		})
	}
}
