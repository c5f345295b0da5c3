package hedgehttp_test

// Ties over real servers on 127.0.0.1: HTTP/1.1, HTTP/2 over TLS, h2c,
// and through httputil.ReverseProxy. Handlers wait on each other with
// channels, so no outcome depends on timing.

import (
	"bufio"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/admit"
	"github.com/tailcut/hedge/hedgehttp"
)

// route is how the tests reach a server: directly over a protocol, or
// through a ReverseProxy that speaks it to the server and HTTP/1.1 to
// the client.
type route struct {
	name  string
	start func(t *testing.T, h http.Handler) (string, http.RoundTripper)
}

func routes() []route {
	var rs []route
	for _, p := range protos {
		rs = append(rs, route{p.name, p.start})
	}
	for _, p := range protos {
		rs = append(rs, route{"ReverseProxy to " + p.name, func(t *testing.T, h http.Handler) (string, http.RoundTripper) {
			backend, tr := p.start(t, h)
			u, err := url.Parse(backend)
			if err != nil {
				t.Fatal(err)
			}
			rp := httputil.NewSingleHostReverseProxy(u)
			rp.Transport = tr
			rp.ErrorLog = log.New(io.Discard, "", 0) // a cancelled attempt is no news
			front := httptest.NewServer(rp)
			t.Cleanup(front.Close)
			return front.URL, front.Client().Transport
		}})
	}
	return rs
}

// replicas sends the primary to one server and the hedges to another,
// as a load balancer would.
type replicas struct {
	primary, hedges         string // URLs
	primaryBase, hedgesBase http.RoundTripper
}

func (rp *replicas) RoundTrip(r *http.Request) (*http.Response, error) {
	to, base := rp.primary, rp.primaryBase
	if hedge.Attempt(r.Context()) > 0 {
		to, base = rp.hedges, rp.hedgesBase
	}
	u, err := url.Parse(to)
	if err != nil {
		return nil, err
	}
	r = r.Clone(r.Context())
	r.URL.Scheme, r.URL.Host, r.Host = u.Scheme, u.Host, ""
	return base.RoundTrip(r)
}

// The primary waits in the queue of a busy replica; the hedge starts at
// an idle one once it does, whose start signal crosses the protocol (and the proxy)
// and cancels the primary: the busy replica sees it leave its queue
// without running, while the hedge is still running, which answers only
// then.
func TestTieAcrossProtocols(t *testing.T) {
	for _, rt := range routes() {
		t.Run(rt.name, func(t *testing.T) {
			holdBusy := make(chan struct{})
			busyIn := make(chan struct{})
			primaryLeft := make(chan error, 1)
			busyAdm := &hedgehttp.Admission{Gate: &admit.Gate{Limit: 1}, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Blocker") == "" {
					t.Errorf("attempt %q ran at the busy replica", r.Header.Get(attemptHeader))
					return
				}
				close(busyIn)
				<-holdBusy
			})}
			primaryIn := make(chan struct{})
			busyURL, busyBase := rt.start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Blocker") == "" {
					close(primaryIn)
				}
				busyAdm.ServeHTTP(w, r)
				if r.Header.Get("Blocker") == "" {
					primaryLeft <- r.Context().Err()
				}
			}))
			idleAdm := &hedgehttp.Admission{Gate: &admit.Gate{Limit: 1}, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				select {
				case err := <-primaryLeft:
					if err == nil {
						t.Error("the primary left the busy replica's queue with its context alive")
					}
				case <-time.After(10 * time.Second):
					t.Error("the primary never left the busy replica's queue")
				}
				fmt.Fprint(w, "from attempt ", r.Header.Get(attemptHeader))
			})}
			idleURL, idleBase := rt.start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				// The hedge starts only once the primary waits at the busy
				// replica: a primary cancelled sooner is never seen there.
				awaitPrimary(t, primaryIn)
				idleAdm.ServeHTTP(w, r)
			}))

			blockerDone := holdWithBlocker(t, busyURL, busyBase, busyIn)
			defer func() {
				close(holdBusy)
				blockerDone()
			}()

			obs := &reports{}
			tr := &hedgehttp.Transport{
				Base:          &replicas{busyURL, idleURL, busyBase, idleBase},
				Delay:         hedge.Fixed(ms),
				AttemptHeader: attemptHeader,
				Observer:      obs,
			}
			resp, err := tr.RoundTrip(get(t, busyURL))
			if err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, resp); got != "from attempt 1" {
				t.Errorf("got %q, want the hedge's answer", got)
			}
			r := obs.last(t)
			if r.Attempts != 2 || r.Tied != 1 || r.Winner != 1 {
				t.Errorf("report: %d attempts, %d tied, won by %d; want 2, 1 tied, won by 1", r.Attempts, r.Tied, r.Winner)
			}
		})
	}
}

// holdWithBlocker sends a request marked Blocker to the busy replica at
// url, through base, and returns once its handler has closed in: it then
// holds the replica's one place. The func it returns waits for the
// blocker's answer, once the test lets the handler go.
func holdWithBlocker(t *testing.T, url string, base http.RoundTripper, in <-chan struct{}) (done func()) {
	t.Helper()
	blocked := make(chan error, 1)
	go func() {
		req := get(t, url)
		req.Header.Set("Blocker", "1")
		resp, err := base.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		blocked <- err
	}()
	within(t, in, "the blocker to hold the busy replica")
	return func() {
		if err := within(t, blocked, "the blocker's answer"); err != nil {
			t.Errorf("the blocker: %v", err)
		}
	}
}

// informational records the 1xx responses a request hears.
type informational struct {
	mu  sync.Mutex
	got []string
}

func (i *informational) trace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		i.mu.Lock()
		defer i.mu.Unlock()
		i.got = append(i.got, fmt.Sprint(code, " ", h))
		return nil
	}}
}

func (i *informational) heard() []string {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.got
}

// A request that asks (TieHeader) hears one 103 with StartedHeader and
// nothing else in it, before the final response, which carries the
// headers set before the Admission and not StartedHeader. A request that
// does not ask hears no 1xx: a plain client sees nothing new.
func TestStartSignalOnlyWhenAsked(t *testing.T) {
	for _, rt := range routes() {
		t.Run(rt.name, func(t *testing.T) {
			adm := &hedgehttp.Admission{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprint(w, "ok")
			})}
			url, base := rt.start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Outer", "set before the Admission")
				adm.ServeHTTP(w, r)
			}))
			for _, ask := range []bool{false, true} {
				var heard informational
				req := get(t, url)
				if ask {
					req.Header.Set(hedgehttp.TieHeader, "1")
				}
				req = req.WithContext(httptrace.WithClientTrace(req.Context(), heard.trace()))
				resp, err := base.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				readAll(t, resp)
				var want []string
				if ask {
					want = []string{"103 map[Hedge-Started:[1]]"}
				}
				if diff := cmp.Diff(want, heard.heard()); diff != "" {
					t.Errorf("asked %v: informational responses (-want +got):\n%s", ask, diff)
				}
				if got := resp.Header.Get("Outer"); got == "" || resp.Header.Get(hedgehttp.StartedHeader) != "" {
					t.Errorf("asked %v: final response's header %v, want Outer and no %s", ask, resp.Header, hedgehttp.StartedHeader)
				}
			}
		})
	}
}

// An HTTP/1.0 client cannot read a 1xx: it gets none, though it asks.
func TestStartSignalNotToHTTP10(t *testing.T) {
	srv := httptest.NewServer(&hedgehttp.Admission{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "ok")
	})})
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET / HTTP/1.0\r\nHost: x\r\n%s: 1\r\n\r\n", hedgehttp.TieHeader)
	status, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(status, " 200 ") {
		t.Errorf("first status line %q, want the final 200", status)
	}
}

// A server without an Admission sees what it saw before ties, with
// TieHeader besides (none with DisableTies), and sends no signal: the
// call is never tied.
func TestPlainServerSeesTieHeaderOnly(t *testing.T) {
	for _, disable := range []bool{false, true} {
		t.Run(fmt.Sprint("DisableTies=", disable), func(t *testing.T) {
			var mu sync.Mutex
			seen := map[string]http.Header{}
			primaryIn := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				k := r.Header.Get(hedgehttp.DefaultAttemptHeader)
				mu.Lock()
				seen[k] = r.Header.Clone()
				mu.Unlock()
				if k == "" {
					close(primaryIn)
					<-r.Context().Done()
					return
				}
				awaitPrimary(t, primaryIn)
				fmt.Fprint(w, "ok")
			}))
			defer srv.Close()
			obs := &reports{}
			tr := &hedgehttp.Transport{Base: srv.Client().Transport, Delay: hedge.Fixed(ms), Observer: obs, DisableTies: disable}
			resp, err := tr.RoundTrip(get(t, srv.URL))
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
			plain := http.Header{"Accept-Encoding": {"gzip"}, "User-Agent": {"Go-http-client/1.1"}}
			if !disable {
				plain.Set(hedgehttp.TieHeader, "1")
			}
			hedged := plain.Clone()
			hedged.Set(hedgehttp.DefaultAttemptHeader, "1")
			mu.Lock()
			defer mu.Unlock()
			if diff := cmp.Diff(map[string]http.Header{"": plain, "1": hedged}, seen); diff != "" {
				t.Errorf("headers the server saw, by attempt (-want +got):\n%s", diff)
			}
			if r := obs.last(t); r.Tied != 0 || r.Winner != 1 {
				t.Errorf("report: %d tied, won by %d; want none tied, won by 1", r.Tied, r.Winner)
			}
		})
	}
}

// The caller's own trace still hears what it heard before: its hooks
// run, and informational responses reach it, the start signal only when
// the caller asked for it. So a hedging ReverseProxy forwards the signal
// to a client that asked, and to no other.
func TestTieKeepsCallersTrace(t *testing.T) {
	backend := httptest.NewServer(&hedgehttp.Admission{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints) // the handler's own hint
		fmt.Fprint(w, "ok")
	})})
	defer backend.Close()
	u, _ := url.Parse(backend.URL)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = &hedgehttp.Transport{Base: backend.Client().Transport}
	front := httptest.NewServer(rp)
	defer front.Close()

	for _, via := range []struct {
		name string
		url  string
		rt   http.RoundTripper
	}{
		{"Transport", backend.URL, &hedgehttp.Transport{Base: backend.Client().Transport}},
		{"hedging ReverseProxy", front.URL, front.Client().Transport},
	} {
		for _, ask := range []bool{false, true} {
			t.Run(fmt.Sprint(via.name, "/asked=", ask), func(t *testing.T) {
				var heard informational
				trace := heard.trace()
				var conns atomic.Int32
				trace.GotConn = func(httptrace.GotConnInfo) { conns.Add(1) }
				req := get(t, via.url)
				if ask {
					req.Header.Set(hedgehttp.TieHeader, "1")
				}
				req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
				resp, err := via.rt.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				readAll(t, resp)
				want := []string{"103 map[Link:[</style.css>; rel=preload]]"}
				if ask {
					want = append([]string{"103 map[Hedge-Started:[1]]"}, want...)
				}
				if diff := cmp.Diff(want, heard.heard()); diff != "" {
					t.Errorf("informational responses (-want +got):\n%s", diff)
				}
				if n := conns.Load(); n != 1 {
					t.Errorf("GotConn ran %d times, want 1", n)
				}
			})
		}
	}
}
