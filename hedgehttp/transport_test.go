package hedgehttp_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgehttp"
	"github.com/tailcut/hedge/internal/ctxtest"
)

// Only requests safe to send twice are hedged; everything else reaches
// Base as the very request and response, untouched.
func TestWhatIsHedged(t *testing.T) {
	always := func(*http.Request) bool { return true }
	never := func(*http.Request) bool { return false }
	req := func(method string, body io.Reader, header ...string) *http.Request {
		r, err := http.NewRequest(method, "http://upstream.test/", body)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		return r
	}
	oneShot := func() io.Reader { return io.NopCloser(strings.NewReader("x")) } // no GetBody
	tests := []struct {
		name        string
		maxAttempts int
		idempotent  func(*http.Request) bool
		req         *http.Request
		hedged      bool
	}{
		{"GET", 0, nil, req("GET", nil), true},
		{"HEAD", 0, nil, req("HEAD", nil), true},
		{"OPTIONS", 0, nil, req("OPTIONS", nil), true},
		{"empty method", 0, nil, &http.Request{URL: req("GET", nil).URL, Header: http.Header{}}, true},
		{"POST", 0, nil, req("POST", strings.NewReader("x")), false},
		{"POST with Idempotency-Key", 0, nil, req("POST", strings.NewReader("x"), "Idempotency-Key", "k"), true},
		{"POST with Idempotency-Key, one-shot body", 0, nil, req("POST", oneShot(), "Idempotency-Key", "k"), false},
		{"DELETE with Idempotency-Key", 0, nil, req("DELETE", nil, "Idempotency-Key", "k"), true},
		{"GET with a one-shot body", 0, nil, req("GET", oneShot()), false},
		{"GET asking for an upgrade", 0, nil, req("GET", nil, "Connection", "Upgrade", "Upgrade", "websocket"), false},
		{"GET with MaxAttempts 1", 1, nil, req("GET", nil), false},
		{"PUT by Idempotent", 0, always, req("PUT", strings.NewReader("x")), true},
		{"upgrade whatever Idempotent says", 0, always, req("GET", nil, "Upgrade", "h2c"), false},
		{"GET refused by Idempotent", 0, never, req("GET", nil), false},
		{"no URL", 0, nil, &http.Request{Method: "GET", Header: http.Header{}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			canned := &http.Response{StatusCode: 200, Body: http.NoBody}
			var got []*http.Request
			var mu sync.Mutex
			base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				mu.Lock()
				got = append(got, r)
				mu.Unlock()
				return canned, nil
			})
			tr := &hedgehttp.Transport{Base: base, MaxAttempts: tt.maxAttempts, Idempotent: tt.idempotent, Delay: hedge.Fixed(time.Hour)}
			resp, err := tr.RoundTrip(tt.req)
			if err != nil || resp != canned {
				t.Fatalf("RoundTrip = %v, %v; want the canned response", resp, err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(got) != 1 {
				t.Fatalf("Base got %d requests, want 1", len(got))
			}
			if hedged := got[0] != tt.req; hedged != tt.hedged {
				t.Errorf("hedged: %v, want %v", hedged, tt.hedged)
			}
		})
	}
}

// Passing through costs nothing beyond Base's own work.
func TestPassThroughAllocations(t *testing.T) {
	canned := &http.Response{StatusCode: 200, Body: http.NoBody}
	base := roundTripFunc(func(*http.Request) (*http.Response, error) { return canned, nil })
	post, _ := http.NewRequest(http.MethodPost, "http://upstream.test/", http.NoBody)
	get, _ := http.NewRequest(http.MethodGet, "http://upstream.test/", nil)
	for _, tt := range []struct {
		name string
		tr   *hedgehttp.Transport
		req  *http.Request
	}{
		{"POST", &hedgehttp.Transport{Base: base}, post},
		{"MaxAttempts 1", &hedgehttp.Transport{Base: base, MaxAttempts: 1}, get},
	} {
		if n := testing.AllocsPerRun(1000, func() { tt.tr.RoundTrip(tt.req) }); n != 0 {
			t.Errorf("%s: %v allocations per pass-through, want 0", tt.name, n)
		}
	}
}

// Each attempt is its own request: numbered in AttemptHeader (hedges only
// by default, every attempt when a name is set, none for "-"), carrying hedge.Attempt and Route in its context; the caller's request
// is left as it was.
func TestAttemptRequests(t *testing.T) {
	type seen struct {
		Header  string
		Attempt int
		Route   string
	}
	for _, header := range []string{"", attemptHeader, "-"} {
		t.Run("AttemptHeader="+header, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var mu sync.Mutex
				var got []seen
				base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
					mu.Lock()
					got = append(got, seen{r.Header.Get(attemptHeader), hedge.Attempt(r.Context()), hedgehttp.Route(r.Context())})
					mu.Unlock()
					if hedge.Attempt(r.Context()) == 0 {
						return hang(r)
					}
					resp, _ := respond(200, "ok")
					return resp, nil
				})
				tr := &hedgehttp.Transport{Base: base, Delay: hedge.Fixed(10 * ms), AttemptHeader: header}
				req := get(t, "http://upstream.test/")
				req.Header.Set("Accept", "text/plain")
				before := req.Header.Clone()
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				synctest.Wait()
				want := []seen{{"", 0, "GET upstream.test"}, {"", 1, "GET upstream.test"}}
				switch header {
				case "":
					want[1].Header = "1"
				case attemptHeader:
					want[0].Header, want[1].Header = "0", "1"
				}
				mu.Lock()
				defer mu.Unlock()
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("attempts as Base saw them (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(before, req.Header); diff != "" {
					t.Errorf("the caller's header changed (-want +got):\n%s", diff)
				}
			})
		})
	}
}

// The winner's body stays linked to the request's context, so that
// cancelling it reaches the body, until the body is closed: then a
// long-lived parent context retains nothing of the call.
func TestLongLivedParentRetainsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := &ctxtest.Registry{}
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if hedge.Attempt(r.Context()) == 0 {
				return hang(r)
			}
			resp, _ := respond(200, "ok")
			return resp, nil
		})
		tr := &hedgehttp.Transport{Base: base, Delay: hedge.Fixed(0)}
		for i := range 1000 {
			req, _ := http.NewRequestWithContext(reg, http.MethodGet, "http://upstream.test/", nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			synctest.Wait() // the loser has given up
			if n := reg.Live(); n != 1 {
				t.Fatalf("call %d: %d registrations while the body is open, want 1: the winner's", i, n)
			}
			if got := readAll(t, resp); got != "ok" {
				t.Fatalf("call %d: body %q", i, got)
			}
			if n := reg.Live(); n != 0 {
				t.Fatalf("call %d: %d registrations after Close, want 0", i, n)
			}
		}
	})
}

// Routes get their own stats: patterns first, then method and host, up to
// MaxRoutes, then the overflow.
func TestRoutes(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		mu.Lock()
		seen = append(seen, hedgehttp.Route(r.Context()))
		mu.Unlock()
		return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
	})
	tr := &hedgehttp.Transport{
		Base: base, Delay: hedge.Fixed(time.Hour), MaxRoutes: 1,
		Routes: []string{"GET /users/{id}", "GET /export/", "POST api.test/orders"},
	}
	for _, r := range []struct{ method, url string }{
		{"GET", "http://a.test/users/7"},
		{"HEAD", "http://b.test/users/8"}, // a GET pattern serves HEAD too
		{"GET", "http://a.test/export/all"},
		{"POST", "http://api.test/orders"}, // hedged by its key; matched by host
		{"GET", "http://a.test/other"},
		{"GET", "http://a.test/more"},
		{"GET", "http://c.test/"}, // past MaxRoutes
		{"OPTIONS", "http://a.test/"},
	} {
		req, _ := http.NewRequest(r.method, r.url, nil)
		req.Header.Set("Idempotency-Key", "k")
		if _, err := tr.RoundTrip(req); err != nil {
			t.Fatal(err)
		}
	}
	wantSeen := []string{"GET /users/{id}", "GET /users/{id}", "GET /export/", "POST api.test/orders", "GET a.test", "GET a.test", "(other)", "(other)"}
	if diff := cmp.Diff(wantSeen, seen); diff != "" {
		t.Errorf("Route as Base saw it (-want +got):\n%s", diff)
	}
	calls := map[string]int64{}
	for route, s := range tr.Stats() {
		calls[route] = s.Calls
	}
	want := map[string]int64{"GET /users/{id}": 2, "GET /export/": 1, "POST api.test/orders": 1, "GET a.test": 2, "(other)": 2}
	if diff := cmp.Diff(want, calls); diff != "" {
		t.Errorf("requests per route (-want +got):\n%s", diff)
	}
}

// With the default Delay, each route learns its own plan: a slow export
// does not make a fast lookup on the same host wait, and Range shows each
// route's delay.
func TestRouteDelaysLearnApart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Nineteen requests in twenty take the route's fast time, one its slow.
		latency := map[string][2]time.Duration{
			"/lookup": {10 * ms, 200 * ms},
			"/export": {time.Second, 20 * time.Second},
		}
		var mu sync.Mutex
		n := map[string]int{}
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			mu.Lock()
			i := n[r.URL.Path]
			n[r.URL.Path]++
			mu.Unlock()
			d := latency[r.URL.Path][0]
			if i%20 == 19 {
				d = latency[r.URL.Path][1]
			}
			select {
			case <-time.After(d):
				return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
			case <-r.Context().Done():
				return nil, r.Context().Err()
			}
		})
		tr := &hedgehttp.Transport{Base: base, Routes: []string{"GET /lookup", "GET /export"}}
		for range 1500 {
			for path := range latency {
				resp, err := tr.RoundTrip(get(t, "http://a.test"+path))
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
			}
		}
		got := map[string]time.Duration{}
		tr.Range(func(route string, d hedge.Delay) bool {
			if c, ok := d.(interface{ Current() time.Duration }); ok && route != "(other)" {
				got[route] = c.Current()
			}
			return true
		})
		for _, tt := range []struct {
			route  string
			lo, hi time.Duration
		}{
			{"GET /lookup", 10 * ms, 200 * ms},
			{"GET /export", time.Second, 20 * time.Second},
		} {
			if d, ok := got[tt.route]; !ok || d < tt.lo || d >= tt.hi {
				t.Errorf("%s hedges after %v, want between its fast and its slow time, [%v, %v)", tt.route, d, tt.lo, tt.hi)
			}
		}
	})
}

// Stats count per route: requests, hedges, wins by attempt, budget
// refusals.
func TestStats(t *testing.T) {
	for _, tt := range []struct {
		name   string
		budget hedge.Budget
		want   hedge.Snapshot
	}{
		{"hedge wins", nil, hedge.Snapshot{Calls: 1, Attempts: 2, Hedged: 1, Wins: [hedge.MaxAttemptsLimit]int64{1: 1}}},
		{"budget refuses", fullLimit(), hedge.Snapshot{Calls: 1, Attempts: 1, Wins: [hedge.MaxAttemptsLimit]int64{0: 1}, BudgetRefusals: 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newScript(answer{after: 50 * ms, status: 200}, answer{status: 200})
				tr := &hedgehttp.Transport{Base: s, Delay: hedge.Fixed(10 * ms), Budget: tt.budget}
				resp, err := tr.RoundTrip(get(t, "http://upstream.test/"))
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				synctest.Wait()
				want := map[string]hedge.Snapshot{"GET upstream.test": tt.want}
				if diff := cmp.Diff(want, tr.Stats()); diff != "" {
					t.Errorf("Stats (-want +got):\n%s", diff)
				}
				if n := s.unclosed(); n != 0 {
					t.Errorf("%d bodies not closed exactly once", n)
				}
			})
		})
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		status int
		err    error
		want   hedge.Outcome
	}{
		{200, nil, hedge.Accept},
		{204, nil, hedge.Accept},
		{304, nil, hedge.Accept},
		{404, nil, hedge.Accept},
		{500, nil, hedge.Accept},
		{429, nil, hedge.Retryable},
		{502, nil, hedge.Retryable},
		{503, nil, hedge.Retryable},
		{504, nil, hedge.Retryable},
		{0, errors.New("connection reset"), hedge.Retryable},
	}
	for _, tt := range tests {
		var resp *http.Response
		if tt.err == nil {
			resp = &http.Response{StatusCode: tt.status}
		}
		if got := hedgehttp.Classify(resp, tt.err); got != tt.want {
			t.Errorf("Classify(%d, %v) = %v, want %v", tt.status, tt.err, got, tt.want)
		}
	}
}

// A classifier that panics reaches the caller as a *hedge.PanicError, and
// the response it panicked on is closed.
func TestClassifierPanicClosesResponse(t *testing.T) {
	resp, b := respond(200, "ok")
	tr := &hedgehttp.Transport{
		Base:     roundTripFunc(func(*http.Request) (*http.Response, error) { return resp, nil }),
		Delay:    hedge.Fixed(time.Hour),
		Classify: func(*http.Response, error) hedge.Outcome { panic("classifier bug") },
	}
	defer func() {
		pe, ok := recover().(*hedge.PanicError)
		if !ok || pe.Value != "classifier bug" {
			t.Errorf("recovered %v, want a *hedge.PanicError of the classifier's panic", pe)
		}
		if n := b.closes.Load(); n != 1 {
			t.Errorf("response closed %d times, want 1", n)
		}
	}()
	tr.RoundTrip(get(t, "http://upstream.test/"))
}

// fullLimit returns an InflightLimit whose one permit is taken: it refuses
// every hedge.
func fullLimit() *hedge.InflightLimit {
	l := &hedge.InflightLimit{Max: 1}
	l.Allow(context.Background(), 1)
	return l
}

// Settings RoundTrip cannot run with fail Validate, and every hedged
// request with the same error, which names the field, closing its body,
// without calling Base.
func TestInvalidSettings(t *testing.T) {
	for _, tt := range []struct {
		name  string
		tr    *hedgehttp.Transport
		field string // what the error names
	}{
		{"Percentile out of range", &hedgehttp.Transport{Delay: &hedge.Percentile{Quantile: 2}}, "Percentile.Quantile 2"},
		{"Adaptive cut by MaxAttempts", &hedgehttp.Transport{Delay: &hedge.Adaptive{}, MaxAttempts: 2}, "(Transport.Delay)"},
		{"MaxAttempts over the limit", &hedgehttp.Transport{MaxAttempts: hedge.MaxAttemptsLimit + 1}, "Transport.MaxAttempts 11"},
		{"negative MaxAttempts", &hedgehttp.Transport{MaxAttempts: -1}, "Transport.MaxAttempts -1"},
		{"Budget out of range", &hedgehttp.Transport{Budget: &hedge.RatioBudget{Ratio: -1}}, "RatioBudget.Ratio -1"},
		{"negative MaxRoutes", &hedgehttp.Transport{MaxRoutes: -1}, "Transport.MaxRoutes -1"},
		{"Inline with a Delay", &hedgehttp.Transport{Inline: true, Delay: hedge.Fixed(ms)}, "Transport.Inline"},
		{"Inline with a Budget", &hedgehttp.Transport{Inline: true, Budget: &hedge.RatioBudget{}}, "Transport.Inline"},
		{"bad pattern", &hedgehttp.Transport{Routes: []string{"GET /{"}}, `Transport.Routes[0] "GET /{"`},
		{"conflicting patterns", &hedgehttp.Transport{Routes: []string{"GET /a", "GET /a"}}, `Transport.Routes[1] "GET /a"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			called := false
			tr := tt.tr
			tr.Base = roundTripFunc(func(*http.Request) (*http.Response, error) {
				called = true
				return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
			})
			verr := tr.Validate()
			if !errors.Is(verr, hedge.ErrInvalidPolicy) || !strings.Contains(verr.Error(), tt.field) {
				t.Errorf("Validate = %v, want an error wrapping hedge.ErrInvalidPolicy that names %s", verr, tt.field)
			}
			body := &fakeBody{Reader: bytes.NewReader([]byte("x"))}
			req, _ := http.NewRequest(http.MethodPut, "http://upstream.test/", body)
			req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader("x")), nil }
			req.Header.Set("Idempotency-Key", "k")
			_, err := tr.RoundTrip(req)
			if err == nil || verr == nil || err.Error() != verr.Error() || called {
				t.Errorf("RoundTrip = %v (Base called: %v), want Validate's error", err, called)
			}
			if n := body.closes.Load(); n != 1 {
				t.Errorf("request body closed %d times, want 1", n)
			}
		})
	}
}

// The zero Transport, and one set up as a service would, are valid.
func TestValidSettings(t *testing.T) {
	for name, tr := range map[string]*hedgehttp.Transport{
		"zero":      {},
		"inline":    {Inline: true},
		"budgeted":  {Routes: []string{"GET /users/{id}"}, MaxAttempts: 3, Budget: hedge.AllOf(&hedge.RatioBudget{}, &hedge.Breaker{Key: hedgehttp.Route})},
		"fixed":     {Delay: hedge.Fixed(-1), MaxAttempts: 2},
		"one hedge": {MaxAttempts: 2}, // the routes' plans send one hedge at most
	} {
		if err := tr.Validate(); err != nil {
			t.Errorf("%s: Validate = %v, want nil", name, err)
		}
	}
}

var errShutdown = errors.New("shutting down")

// The caller's cancellation ends the call at once with its cause, and
// reaches every attempt in flight.
func TestCallerCancelsDuringCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(t.Context())
		time.AfterFunc(30*ms, func() { cancel(errShutdown) })
		s := newScript() // every attempt hangs until cancelled
		tr := &hedgehttp.Transport{Base: s, Delay: hedge.Fixed(10 * ms)}
		start := time.Now()
		_, err := tr.RoundTrip(get(t, "http://upstream.test/").WithContext(ctx))
		if !errors.Is(err, errShutdown) || time.Since(start) != 30*ms {
			t.Errorf("RoundTrip returned %v after %v, want %v after 30ms", err, time.Since(start), errShutdown)
		}
		synctest.Wait() // every attempt has returned: none outlives the call
		if diff := cmp.Diff([]time.Duration{0, 10 * ms}, s.sends()); diff != "" {
			t.Errorf("attempts sent at (-want +got):\n%s", diff)
		}
	})
}

// RoundTrip closes the request's body exactly once, also when no attempt
// ever takes it.
func TestRequestBodyClosedOnce(t *testing.T) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tt := range []struct {
		name string
		ctx  context.Context
		base http.RoundTripper
	}{
		{"sent", context.Background(), roundTripFunc(func(r *http.Request) (*http.Response, error) {
			io.Copy(io.Discard, r.Body)
			r.Body.Close() // as a RoundTripper must
			return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
		})},
		{"context done before the call", done, roundTripFunc(func(*http.Request) (*http.Response, error) {
			t.Error("Base called with a done context")
			return nil, errors.New("unreachable")
		})},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body := &fakeBody{Reader: strings.NewReader("order")}
			req, _ := http.NewRequestWithContext(tt.ctx, http.MethodPost, "http://upstream.test/", body)
			req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader("order")), nil }
			req.Header.Set("Idempotency-Key", "k")
			(&hedgehttp.Transport{Base: tt.base, Delay: hedge.Fixed(time.Hour)}).RoundTrip(req)
			if n := body.closes.Load(); n != 1 {
				t.Errorf("request body closed %d times, want 1", n)
			}
		})
	}
}
