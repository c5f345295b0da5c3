package hedgehttp_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgehttp"
	"github.com/tailcut/hedge/internal/pipenet"
)

// sent is what a client saw of one attempt: its number, when it was sent
// (virtual time since the test began, in a bubble), and the response's
// status and Retry-After; Status 0 for an error.
type sent struct {
	Attempt    string
	At         time.Duration
	Status     int
	RetryAfter string
}

// attempts records every attempt a Transport sends through it, and
// reports each answer on answered, if set. If hold is set, hedges wait
// for it before they are sent.
type attempts struct {
	base     http.RoundTripper
	t0       time.Time
	answered chan sent
	hold     <-chan struct{}

	mu  sync.Mutex
	log []sent
}

func (a *attempts) RoundTrip(r *http.Request) (*http.Response, error) {
	s := sent{Attempt: r.Header.Get(hedgehttp.DefaultAttemptHeader)}
	if a.hold != nil && s.Attempt != "0" {
		select {
		case <-a.hold:
		case <-r.Context().Done():
			return nil, context.Cause(r.Context())
		}
	}
	s.At = time.Since(a.t0)
	resp, err := a.base.RoundTrip(r)
	if err == nil {
		s.Status, s.RetryAfter = resp.StatusCode, resp.Header.Get("Retry-After")
	}
	a.mu.Lock()
	a.log = append(a.log, s)
	a.mu.Unlock()
	if a.answered != nil {
		a.answered <- s
	}
	return resp, err
}

func (a *attempts) sent() []sent {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]sent(nil), a.log...)
}

// exits serves h and closes a channel each time h has returned, by
// panic or not, so that a test can wait for a handler to be done.
type exits struct {
	h    http.Handler
	done chan struct{}
}

func (e exits) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() { e.done <- struct{}{} }()
	e.h.ServeHTTP(w, r)
}

// Against a real server on 127.0.0.1: a saturated server sheds the hedge
// with a 503 and Retry-After 0, never the primary, and the call returns
// the primary's answer; with a place free, the hedge goes through.
func TestShedderLoopback(t *testing.T) {
	for _, p := range protos {
		t.Run(p.name, func(t *testing.T) {
			t.Run("saturated: the hedge is shed, the primary answers", func(t *testing.T) {
				primaryIn, release := make(chan struct{}), make(chan struct{})
				handled := make(chan string, 2)
				shed := &hedgehttp.Shedder{Limit: 1, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					k := r.Header.Get(hedgehttp.DefaultAttemptHeader)
					handled <- k
					if k == "0" {
						close(primaryIn)
						<-release // holds the one place until the hedge has been shed
					}
					fmt.Fprint(w, "from attempt ", k)
				})}
				served := make(chan struct{}, 2)
				url, base := p.start(t, exits{shed, served})
				rec := &attempts{base: base, answered: make(chan sent, 2), hold: primaryIn}
				tr := &hedgehttp.Transport{Base: rec, Delay: hedge.Fixed(ms), AttemptHeader: hedgehttp.DefaultAttemptHeader}

				type answer struct {
					body string
					err  error
				}
				done := make(chan answer, 1)
				go func() {
					resp, err := tr.RoundTrip(get(t, url))
					if err != nil {
						done <- answer{err: err}
						return
					}
					b, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					done <- answer{string(b), err}
				}()
				hedged := within(t, rec.answered, "the hedge's answer")
				want := sent{Attempt: "1", Status: http.StatusServiceUnavailable, RetryAfter: "0"}
				if diff := cmp.Diff(want, hedged, ignoreAt); diff != "" {
					t.Errorf("the hedge (-want +got):\n%s", diff)
				}
				close(release)
				if got := within(t, done, "the call"); got.err != nil || got.body != "from attempt 0" {
					t.Errorf("the call returned %q, %v; want the primary's answer", got.body, got.err)
				}
				within(t, served, "the hedge's handler")
				within(t, served, "the primary's handler")
				want = sent{Attempt: "0", Status: http.StatusOK}
				if diff := cmp.Diff([]sent{hedged, want}, rec.sent(), ignoreAt); diff != "" {
					t.Errorf("attempts sent (-want +got):\n%s", diff)
				}
				if k := within(t, handled, "the primary's handler"); k != "0" || len(handled) != 0 {
					t.Errorf("the handler saw attempt %s and %d more, want the primary only", k, len(handled))
				}
				if n, s := shed.InFlight(), shed.Shed(); n != 0 || s != 1 {
					t.Errorf("in flight %d, shed %d; want 0 and 1", n, s)
				}
			})

			t.Run("a place free: the hedge goes through and wins", func(t *testing.T) {
				primaryIn := make(chan struct{})
				shed := &hedgehttp.Shedder{Limit: 2, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					k := r.Header.Get(hedgehttp.DefaultAttemptHeader)
					if k == "0" {
						close(primaryIn)
						<-r.Context().Done() // stuck until the hedge wins
						return
					}
					fmt.Fprint(w, "from attempt ", k)
				})}
				served := make(chan struct{}, 2)
				url, base := p.start(t, exits{shed, served})
				// The hedge waits for the primary to be in: both reach the
				// server, and the hedge finds one place taken, one free.
				rec := &attempts{base: base, hold: primaryIn}
				tr := &hedgehttp.Transport{Base: rec, Delay: hedge.Fixed(ms), AttemptHeader: hedgehttp.DefaultAttemptHeader}
				resp, err := tr.RoundTrip(get(t, url))
				if err != nil {
					t.Fatal(err)
				}
				if got := readAll(t, resp); got != "from attempt 1" {
					t.Errorf("got %q, want the hedge's answer", got)
				}
				within(t, served, "a handler")
				within(t, served, "the other handler")
				if n, s := shed.InFlight(), shed.Shed(); n != 0 || s != 0 {
					t.Errorf("in flight %d, shed %d; want 0 and 0", n, s)
				}
			})
		})
	}
}

var ignoreAt = cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".At" }, cmp.Ignore())

// A handler that panics, or aborts with http.ErrAbortHandler, gives its
// place back: the count is back at zero, and the next hedge goes through.
func TestShedderReleasesOnPanic(t *testing.T) {
	for _, p := range protos {
		t.Run(p.name, func(t *testing.T) {
			for _, v := range []any{http.ErrAbortHandler, "boom"} {
				t.Run(fmt.Sprint(v), func(t *testing.T) {
					shed := &hedgehttp.Shedder{Limit: 1, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						if r.URL.Query().Has("panic") {
							panic(v)
						}
						fmt.Fprint(w, "ok")
					})}
					served := make(chan struct{}, 1)
					srv := httptest.NewUnstartedServer(exits{shed, served})
					srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the panic's stack
					if p.major == 2 {
						srv.EnableHTTP2 = true
						srv.StartTLS()
					} else {
						srv.Start()
					}
					t.Cleanup(srv.Close)
					client := srv.Client()
					for _, attempt := range []string{"0", "1"} {
						req := get(t, srv.URL+"/?panic")
						req.Header.Set(hedgehttp.DefaultAttemptHeader, attempt)
						if resp, err := client.Do(req); err == nil {
							resp.Body.Close()
							t.Errorf("attempt %s: %s, want the connection aborted", attempt, resp.Status)
						}
						within(t, served, "the panicking handler")
						if n := shed.InFlight(); n != 0 {
							t.Fatalf("after attempt %s panicked, %d in flight, want 0", attempt, n)
						}
					}
					req := get(t, srv.URL)
					req.Header.Set(hedgehttp.DefaultAttemptHeader, "1")
					resp, err := client.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					if got := readAll(t, resp); resp.StatusCode != http.StatusOK || got != "ok" {
						t.Errorf("a hedge after the panics: %s %q, want 200 ok", resp.Status, got)
					}
				})
			}
		})
	}
}

// The rule, request by request, on a Shedder whose Limit is already
// taken: what is a hedge, and what a shed hedge gets.
func TestShedderRule(t *testing.T) {
	tests := []struct {
		name   string
		header string // the Shedder's AttemptHeader
		sent   []string
		shed   bool
	}{
		{"no header: a primary", "", nil, false},
		{"attempt 0: a primary", "", []string{"0"}, false},
		{"attempt 1: a hedge", "", []string{"1"}, true},
		{"attempt 9: a hedge", "", []string{"9"}, true},
		{"a leading zero: a hedge", "", []string{"01"}, true},
		{"empty: a primary", "", []string{""}, false},
		{"negative: a primary", "", []string{"-1"}, false},
		{"not a number: a primary", "", []string{"one"}, false},
		{"a fraction: a primary", "", []string{"1.5"}, false},
		{"past a uint64: a hedge", "", []string{"99999999999999999999"}, true},
		{"zeros: a primary", "", []string{"000"}, false},
		{"a sign: a primary", "", []string{"+1"}, false},
		{"the first of two values counts", "", []string{"0", "1"}, false},
		{"a header of the service's naming", "X-Attempt", []string{"1"}, true},
		{"not the header the service named", "X-Attempt", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			release := make(chan struct{})
			busy := make(chan struct{})
			s := &hedgehttp.Shedder{Limit: 1, AttemptHeader: tt.header, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/busy" {
					close(busy)
					<-release
				}
				w.Header().Set("Served", "yes")
			})}
			var wg sync.WaitGroup
			defer wg.Wait()
			defer close(release)
			wg.Go(func() { s.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/busy", nil)) })
			<-busy // the one place is taken

			req := httptest.NewRequest("GET", "/", nil)
			req.Header[headerOf(tt.header)] = tt.sent
			if tt.header != "" && tt.sent == nil {
				req.Header.Set(hedgehttp.DefaultAttemptHeader, "1")
			}
			w := httptest.NewRecorder()
			s.ServeHTTP(w, req)
			type result struct {
				Status     int
				RetryAfter string
				Served     bool
				Shed       uint64
			}
			want := result{Status: 200, Served: true}
			if tt.shed {
				want = result{Status: 503, RetryAfter: "0", Shed: 1}
			}
			got := result{w.Code, w.Header().Get("Retry-After"), w.Header().Get("Served") == "yes", s.Shed()}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// headerOf is the header name a Shedder with AttemptHeader h reads.
func headerOf(h string) string {
	if h == "" {
		return hedgehttp.DefaultAttemptHeader
	}
	return http.CanonicalHeaderKey(h)
}

// The zero Shedder passes primaries to http.DefaultServeMux and sheds
// every hedge; so does any Limit of zero or less.
func TestShedderZeroValue(t *testing.T) {
	for _, limit := range []int{0, -1} {
		s := &hedgehttp.Shedder{Limit: limit}
		for _, k := range []string{"0", "1"} {
			req := httptest.NewRequest("GET", "/nothing/registered/here", nil)
			req.Header.Set(hedgehttp.DefaultAttemptHeader, k)
			w := httptest.NewRecorder()
			s.ServeHTTP(w, req)
			want := http.StatusNotFound // from http.DefaultServeMux
			if k == "1" {
				want = http.StatusServiceUnavailable
			}
			if w.Code != want {
				t.Errorf("Limit %d, attempt %s: %d, want %d", limit, k, w.Code, want)
			}
		}
		if s.InFlight() != 0 || s.Shed() != 1 {
			t.Errorf("Limit %d: in flight %d, shed %d; want 0 and 1", limit, s.InFlight(), s.Shed())
		}
	}
}

// Hedges racing for the places left get exactly those places; primaries
// are admitted past the limit, and hedges then shed. Run with -race
// -cpu 1,2,4.
func TestShedderExactUnderRace(t *testing.T) {
	const limit, hedges, primaries = 4, 64, 6
	release := make(chan struct{})
	entered := make(chan string, 1+hedges+primaries)
	s := &hedgehttp.Shedder{Limit: limit, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- r.Header.Get(hedgehttp.DefaultAttemptHeader)
		<-release
	})}
	codes := make(chan int, hedges+1)
	serve := func(k string) {
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set(hedgehttp.DefaultAttemptHeader, k)
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
		if k != "0" {
			codes <- w.Code
		}
	}
	var wg sync.WaitGroup
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	defer wg.Wait()
	defer free() // on a failure, before the wait

	wg.Go(func() { serve("0") })
	<-entered // one primary in: limit-1 places are left
	start := make(chan struct{})
	for range hedges {
		wg.Go(func() { <-start; serve("1") })
	}
	close(start)
	for range limit - 1 {
		if k := <-entered; k != "1" {
			t.Fatalf("attempt %s entered, want a hedge", k)
		}
	}
	for range hedges - (limit - 1) {
		if c := <-codes; c != http.StatusServiceUnavailable {
			t.Errorf("a hedge got %d with every place taken, want 503", c)
		}
	}
	if n, shed := s.InFlight(), s.Shed(); n != limit || shed != hedges-(limit-1) {
		t.Errorf("in flight %d, shed %d; want %d and %d", n, shed, limit, hedges-(limit-1))
	}

	for range primaries {
		wg.Go(func() { serve("0") })
	}
	for range primaries {
		if k := <-entered; k != "0" {
			t.Fatalf("attempt %s entered, want a primary", k)
		}
	}
	serve("2")
	if c := <-codes; c != http.StatusServiceUnavailable {
		t.Errorf("a hedge got %d past the limit, want 503", c)
	}
	if n := s.InFlight(); n != limit+primaries {
		t.Errorf("in flight %d, want %d", n, limit+primaries)
	}
	free()
	wg.Wait()
	if n := s.InFlight(); n != 0 {
		t.Errorf("in flight %d after every handler returned, want 0", n)
	}
}

// servePipes serves h in the test's bubble and returns a transport to it.
// Both are closed when the test ends.
func servePipes(t *testing.T, h http.Handler) http.RoundTripper {
	l := pipenet.Serve(t, &http.Server{Handler: h})
	tr := &http.Transport{DialContext: l.Dial, MaxIdleConnsPerHost: 1000}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// In virtual time, the exact course of a call whose hedge is shed: the
// hedge is answered at once and the call returns the primary's answer
// when the primary gives it, even with the deadline less than a second
// away. Further hedges, where allowed, are shed at once as well; a token bucket
// stops hedging across calls.
func TestShedderInVirtualTime(t *testing.T) {
	const primary, delay = 100 * ms, 10 * ms
	bucket := func() hedge.Budget {
		// Two failures leave a third, and a success refills a tenth of a
		// token: the next call does not hedge.
		b := &hedge.TokenBucket{MaxTokens: 3, TokenRatio: 0.1}
		return b
	}
	tests := []struct {
		name        string
		maxAttempts int
		budget      func() hedge.Budget
		calls       int
		want        [][]sent // per call
	}{{
		name:  "one hedge, shed",
		calls: 1,
		want: [][]sent{{
			{Attempt: "1", At: delay, Status: 503, RetryAfter: "0"},
			{Attempt: "0", At: 0, Status: 200},
		}},
	}, {
		name:        "every hedge is shed while the server is saturated",
		maxAttempts: 3,
		calls:       1,
		want: [][]sent{{
			{Attempt: "1", At: delay, Status: 503, RetryAfter: "0"},
			{Attempt: "2", At: delay, Status: 503, RetryAfter: "0"},
			{Attempt: "0", At: 0, Status: 200},
		}},
	}, {
		name:        "a token bucket stops hedging after sheds",
		maxAttempts: 3,
		budget:      bucket,
		calls:       2,
		want: [][]sent{{
			{Attempt: "1", At: delay, Status: 503, RetryAfter: "0"},
			{Attempt: "2", At: delay, Status: 503, RetryAfter: "0"},
			{Attempt: "0", At: 0, Status: 200},
		}, {
			{Attempt: "0", At: primary, Status: 200},
		}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				shed := &hedgehttp.Shedder{Limit: 1, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					select {
					case <-time.After(primary): // the upstream's latency, in virtual time
						fmt.Fprint(w, "from attempt ", r.Header.Get(hedgehttp.DefaultAttemptHeader))
					case <-r.Context().Done():
					}
				})}
				rec := &attempts{base: servePipes(t, shed), t0: time.Now()}
				tr := &hedgehttp.Transport{
					Base: rec, Delay: hedge.Fixed(delay), MaxAttempts: tt.maxAttempts,
					AttemptHeader: hedgehttp.DefaultAttemptHeader,
				}
				if tt.budget != nil {
					tr.Budget = tt.budget()
				}
				for i := range tt.calls {
					start := time.Now()
					ctx, cancel := context.WithTimeout(t.Context(), 500*ms) // less than a Retry-After of 1
					resp, err := tr.RoundTrip(get(t, "http://upstream.test/").WithContext(ctx))
					if err != nil {
						t.Fatal(err)
					}
					if got := readAll(t, resp); got != "from attempt 0" || time.Since(start) != primary {
						t.Errorf("call %d returned %q after %v, want the primary's answer after %v", i, got, time.Since(start), primary)
					}
					cancel()
				}
				synctest.Wait()
				var want []sent
				for _, c := range tt.want {
					want = append(want, c...)
				}
				if diff := cmp.Diff(want, rec.sent()); diff != "" {
					t.Errorf("attempts in the order answered (-want +got):\n%s", diff)
				}
				if n := shed.InFlight(); n != 0 {
					t.Errorf("in flight %d, want 0", n)
				}
			})
		})
	}
}

// nopWriter is a ResponseWriter that allocates nothing.
type nopWriter struct{ h http.Header }

func (w nopWriter) Header() http.Header       { return w.h }
func (nopWriter) Write(b []byte) (int, error) { return len(b), nil }
func (nopWriter) WriteHeader(int)             {}

// What a Shedder lets through costs no allocation: primaries and admitted
// hedges pay two atomic operations.
func TestShedderAllocations(t *testing.T) {
	s := &hedgehttp.Shedder{Limit: 1, Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})}
	w := nopWriter{http.Header{}}
	for _, k := range []string{"", "0", "1"} {
		req := httptest.NewRequest("GET", "/", nil)
		if k != "" {
			req.Header.Set(hedgehttp.DefaultAttemptHeader, k)
		}
		if n := testing.AllocsPerRun(100, func() { s.ServeHTTP(w, req) }); n != 0 {
			t.Errorf("attempt %q: %v allocations, want 0", k, n)
		}
	}
	if s.Shed() != 0 {
		t.Errorf("shed %d, want 0", s.Shed())
	}
}
