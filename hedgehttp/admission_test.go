package hedgehttp_test

// Admission's queue and its start signal, in virtual time: a real
// http.Server and http.Transport talk through in-memory connections
// (pipes) inside a synctest bubble, over HTTP/1.1 and over HTTP/2
// without TLS, so that the test knows when every request waits.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/admit"
	"github.com/tailcut/hedge/hedgehttp"
	"github.com/tailcut/hedge/internal/pipenet"
)

var pipeProtos = []struct {
	name string
	h2   bool
}{{"HTTP/1.1", false}, {"h2c", true}}

// servePipesOver serves h in the test's bubble, over HTTP/2 without TLS
// if h2, and returns a transport to it. Both close when the test ends.
func servePipesOver(t *testing.T, h http.Handler, h2 bool) http.RoundTripper {
	if !h2 {
		return servePipes(t, h)
	}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	l := pipenet.Serve(t, &http.Server{Handler: h, Protocols: &p})
	tr := &http.Transport{Protocols: &p, DialContext: l.Dial}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// queued is a server behind an Admission, whose requests say what
// became of them: which ran their handler, which left the queue because
// their client had gone, which the Admission turned away. A request
// names itself by its attempt header, or as "blocker", a plain request;
// the handler of a request whose name has a channel in hold waits for it
// to close.
type queued struct {
	adm  *hedgehttp.Admission
	hold map[string]chan struct{}

	mu                   sync.Mutex
	ran, left, turnedOff []string
}

func newQueued(g *admit.Gate) *queued {
	q := &queued{hold: map[string]chan struct{}{"blocker": make(chan struct{})}}
	q.adm = &hedgehttp.Admission{Gate: g, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Context().Value(ranKey{}).(*atomic.Bool).Store(true)
		name := nameOf(r)
		q.note(&q.ran, name)
		if ch := q.hold[name]; ch != nil {
			<-ch
		}
		fmt.Fprint(w, "from ", name)
	})}
	return q
}

type ranKey struct{}

func nameOf(r *http.Request) string {
	if r.Header.Get("Blocker") != "" {
		return "blocker"
	}
	return r.Header.Get(attemptHeader)
}

func (q *queued) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ran := new(atomic.Bool)
	q.adm.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ranKey{}, ran)))
	switch {
	case ran.Load():
	case r.Context().Err() != nil:
		q.note(&q.left, nameOf(r))
	default:
		q.note(&q.turnedOff, nameOf(r))
	}
}

func (q *queued) note(list *[]string, name string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	*list = append(*list, name)
}

// seen returns, sorted, what became of the requests so far.
func (q *queued) seen() (ran, left, turnedOff []string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return slices.Sorted(slices.Values(q.ran)), slices.Sorted(slices.Values(q.left)), slices.Sorted(slices.Values(q.turnedOff))
}

// block sends a plain request that holds the worker, and returns a
// function that lets it finish and waits for its answer.
func (q *queued) block(t *testing.T, base http.RoundTripper) (finish func()) {
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, "http://pipe/", nil)
		req.Header.Set("Blocker", "1")
		resp, err := base.RoundTrip(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		done <- err
	}()
	synctest.Wait()
	return func() {
		close(q.hold["blocker"])
		if err := <-done; err != nil {
			t.Errorf("the blocker: %v", err)
		}
	}
}

// reports keeps the hedge.Report of every call.
type reports struct {
	mu   sync.Mutex
	list []hedge.Report
}

func (o *reports) Observe(_ context.Context, r hedge.Report) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.list = append(o.list, r)
}

func (o *reports) last(t *testing.T) hedge.Report {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.list) == 0 {
		t.Fatal("no call reported")
	}
	return o.list[len(o.list)-1]
}

type outcomeAt struct {
	body string
	err  error
	at   time.Duration
}

// call sends a hedged GET through tr at once, and returns where its
// answer will come, with the virtual time it came at.
func call(t *testing.T, tr http.RoundTripper) <-chan outcomeAt {
	start := time.Now()
	got := make(chan outcomeAt, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, "http://pipe/", nil)
		resp, err := tr.RoundTrip(req)
		a := outcomeAt{err: err, at: time.Since(start)}
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			a.body = string(b)
		}
		got <- a
	}()
	return got
}

// Both attempts of a call wait for the one worker, the hedge sent at
// 10 ms. When the worker frees at 20 ms the primary goes first, though
// both wait, and its start cancels the hedge, which leaves the queue
// without running while the primary runs: the call is answered at 20
// ms, one attempt tied.
func TestAdmissionPrimaryFirstTiesQueuedHedge(t *testing.T) {
	for _, p := range pipeProtos {
		t.Run(p.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := newQueued(&admit.Gate{Limit: 1, HedgeWait: time.Hour})
				q.hold["0"] = make(chan struct{})
				base := servePipesOver(t, q, p.h2)
				finish := q.block(t, base)
				obs := &reports{}
				tr := &hedgehttp.Transport{Base: base, Delay: hedge.Fixed(10 * ms), AttemptHeader: attemptHeader, Observer: obs}
				got := call(t, tr)
				time.Sleep(20 * ms)
				synctest.Wait()
				ran, left, _ := q.seen()
				if diff := cmp.Diff([]string{"blocker"}, ran); diff != "" || len(left) > 0 {
					t.Fatalf("before the worker frees: ran (-want +got):\n%s; left %v", diff, left)
				}
				finish()
				synctest.Wait() // the primary runs, and holds the worker
				ran, left, turnedOff := q.seen()
				if diff := cmp.Diff([]string{"0", "blocker"}, ran); diff != "" {
					t.Errorf("handlers run (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff([]string{"1"}, left); diff != "" || len(turnedOff) > 0 {
					t.Errorf("left the queue (-want +got):\n%s; turned away %v", diff, turnedOff)
				}
				close(q.hold["0"])
				if a := <-got; a.err != nil || a.body != "from 0" || a.at != 20*ms {
					t.Errorf("answer %q, %v at %v, want the primary's at 20ms", a.body, a.err, a.at)
				}
				r := obs.last(t)
				if r.Attempts != 2 || r.Tied != 1 || r.Winner != 0 {
					t.Errorf("report: %d attempts, %d tied, won by %d; want 2, 1 tied, won by 0", r.Attempts, r.Tied, r.Winner)
				}
			})
		})
	}
}

// A hedge the Gate turns away, because it waited past HedgeWait or found
// the queue full (the primary waits in its one place), gets a 503 with "Retry-After: 0" at once, as a
// Shedder's; the call goes on and the primary answers it when the worker
// frees. Nothing is tied: the hedge never started.
func TestAdmissionTurnsHedgeAway(t *testing.T) {
	for _, tt := range []struct {
		name string
		gate func() *admit.Gate
		at   time.Duration // when the hedge is turned away
	}{
		{"past HedgeWait", func() *admit.Gate { return &admit.Gate{Limit: 1, HedgeWait: 5 * ms} }, 15 * ms},
		{"queue full", func() *admit.Gate { return &admit.Gate{Limit: 1, Queue: 1, HedgeWait: time.Hour} }, 10 * ms},
	} {
		for _, p := range pipeProtos {
			t.Run(tt.name+"/"+p.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					q := newQueued(tt.gate())
					base := servePipesOver(t, q, p.h2)
					finish := q.block(t, base)
					type heard struct {
						at         time.Duration
						status     int
						retryAfter string
					}
					var (
						mu         sync.Mutex
						hedgeHeard []heard
					)
					start := time.Now()
					watch := roundTripFunc(func(r *http.Request) (*http.Response, error) {
						resp, err := base.RoundTrip(r)
						if err == nil && hedge.Attempt(r.Context()) == 1 {
							mu.Lock()
							hedgeHeard = append(hedgeHeard, heard{time.Since(start), resp.StatusCode, resp.Header.Get("Retry-After")})
							mu.Unlock()
						}
						return resp, err
					})
					obs := &reports{}
					tr := &hedgehttp.Transport{Base: watch, Delay: hedge.Fixed(10 * ms), AttemptHeader: attemptHeader, Observer: obs}
					got := call(t, tr)
					time.Sleep(20 * ms)
					synctest.Wait()
					mu.Lock()
					if diff := cmp.Diff([]heard{{tt.at, http.StatusServiceUnavailable, "0"}}, hedgeHeard, cmp.AllowUnexported(heard{})); diff != "" {
						t.Errorf("the hedge heard (-want +got):\n%s", diff)
					}
					mu.Unlock()
					finish()
					a := <-got
					synctest.Wait()
					if a.err != nil || a.body != "from 0" || a.at != 20*ms {
						t.Errorf("answer %q, %v at %v, want the primary's at 20ms", a.body, a.err, a.at)
					}
					if _, _, turnedOff := q.seen(); !cmp.Equal([]string{"1"}, turnedOff) || q.adm.TurnedAway() != 1 {
						t.Errorf("turned away %v, counted %d; want the hedge, once", turnedOff, q.adm.TurnedAway())
					}
					r := obs.last(t)
					if r.Attempts != 2 || r.Tied != 0 || r.Winner != 0 {
						t.Errorf("report: %d attempts, %d tied, won by %d; want 2, none tied, won by 0", r.Attempts, r.Tied, r.Winner)
					}
				})
			})
		}
	}
}

// A hedge that has waited since 0 ms and a primary that has waited since
// 5 ms: when the worker frees, the primary goes first, and the hedge
// only when no primary waits. The class is the attempt header's.
func TestAdmissionPrimariesFirst(t *testing.T) {
	for _, p := range pipeProtos {
		t.Run(p.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := newQueued(&admit.Gate{Limit: 1, HedgeWait: time.Hour})
				q.hold["0"] = make(chan struct{})
				base := servePipesOver(t, q, p.h2)
				finish := q.block(t, base)
				send := func(attempt string) <-chan error {
					done := make(chan error, 1)
					go func() {
						req, _ := http.NewRequest(http.MethodGet, "http://pipe/", nil)
						req.Header.Set(attemptHeader, attempt)
						resp, err := base.RoundTrip(req)
						if err == nil {
							io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
						}
						done <- err
					}()
					return done
				}
				hedgeDone := send("1")
				time.Sleep(5 * ms)
				primaryDone := send("0")
				time.Sleep(5 * ms)
				finish()
				synctest.Wait()
				if ran, _, _ := q.seen(); !cmp.Equal([]string{"0", "blocker"}, ran) {
					t.Errorf("ran %v when the worker freed, want the primary", ran)
				}
				close(q.hold["0"])
				if err := <-primaryDone; err != nil {
					t.Errorf("the primary: %v", err)
				}
				if err := <-hedgeDone; err != nil {
					t.Errorf("the hedge: %v", err)
				}
				if ran, left, turnedOff := q.seen(); !cmp.Equal([]string{"0", "1", "blocker"}, ran) || len(left)+len(turnedOff) > 0 {
					t.Errorf("ran %v, left %v, turned away %v; want every one run", ran, left, turnedOff)
				}
			})
		})
	}
}

// A primary that has started is never tied: it runs slowly, the hedge
// sent at 10 ms starts at once beside it and answers, and the primary
// loses the race as before, uncounted in Report.Tied.
func TestAdmissionStartedPrimaryRacesOn(t *testing.T) {
	for _, p := range pipeProtos {
		t.Run(p.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := newQueued(&admit.Gate{Limit: 2})
				q.hold["0"] = make(chan struct{})
				defer close(q.hold["0"])
				base := servePipesOver(t, q, p.h2)
				obs := &reports{}
				tr := &hedgehttp.Transport{Base: base, Delay: hedge.Fixed(10 * ms), AttemptHeader: attemptHeader, Observer: obs}
				if a := <-call(t, tr); a.err != nil || a.body != "from 1" || a.at != 10*ms {
					t.Errorf("answer %q, %v at %v, want the hedge's at 10ms", a.body, a.err, a.at)
				}
				if ran, left, _ := q.seen(); !cmp.Equal([]string{"0", "1"}, ran) || len(left) > 0 {
					t.Errorf("ran %v, left %v; want both run", ran, left)
				}
				r := obs.last(t)
				if r.Attempts != 2 || r.Tied != 0 || r.Winner != 1 {
					t.Errorf("report: %d attempts, %d tied, won by %d; want 2, none tied, won by 1", r.Attempts, r.Tied, r.Winner)
				}
			})
		})
	}
}

// What an Admission lets through at once costs no allocation of its own,
// and neither does the start signal it sends.
func TestAdmissionAllocations(t *testing.T) {
	a := &hedgehttp.Admission{Gate: &admit.Gate{Limit: 1}, Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})}
	w := nopWriter{http.Header{}}
	for _, tt := range []struct{ attempt, tie string }{{"", ""}, {"1", ""}, {"", "1"}, {"1", "1"}} {
		req := httptest.NewRequest("GET", "/", nil)
		if tt.attempt != "" {
			req.Header.Set(hedgehttp.DefaultAttemptHeader, tt.attempt)
		}
		if tt.tie != "" {
			req.Header.Set(hedgehttp.TieHeader, tt.tie)
		}
		if n := testing.AllocsPerRun(100, func() { a.ServeHTTP(w, req) }); n != 0 {
			t.Errorf("attempt %q, %s %q: %v allocations, want 0", tt.attempt, hedgehttp.TieHeader, tt.tie, n)
		}
	}
	if len(w.h) != 0 || a.TurnedAway() != 0 {
		t.Errorf("left %v in the response's header, turned %d away; want nothing", w.h, a.TurnedAway())
	}
}
