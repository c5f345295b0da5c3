package hedgeotel_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgehttp"
	"github.com/tailcut/hedge/hedgeotel"
)

// spans is a real SDK TracerProvider whose ended spans a test can wait
// for.
type spans struct {
	*tracetest.SpanRecorder
	tp    *sdktrace.TracerProvider
	ended chan struct{}
}

func newSpans(t *testing.T) *spans {
	s := &spans{SpanRecorder: tracetest.NewSpanRecorder(), ended: make(chan struct{}, 64)}
	s.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(s))
	t.Cleanup(func() { s.tp.Shutdown(context.Background()) })
	return s
}

func (s *spans) OnEnd(span sdktrace.ReadOnlySpan) {
	s.SpanRecorder.OnEnd(span)
	s.ended <- struct{}{}
}

// await waits until n spans have ended and returns them. The timeout
// only keeps a broken test from hanging; it orders nothing.
func (s *spans) await(t *testing.T, n int) []sdktrace.ReadOnlySpan {
	t.Helper()
	for range n {
		select {
		case <-s.ended:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d spans ended", len(s.Ended()), n)
		}
	}
	return s.Ended()
}

// spanSummary is what a test checks of a span: its hedge attributes and
// its status.
type spanSummary struct {
	Name       string
	Attempt    string // hedge.attempt, "" when absent
	Resend     string // http.request.resend_count, "" when absent
	Superseded string // hedge.superseded, "" when absent
	Status     codes.Code
}

func summarize(list []sdktrace.ReadOnlySpan) map[string]spanSummary {
	got := map[string]spanSummary{}
	for _, s := range list {
		sum := spanSummary{Name: s.Name(), Status: s.Status().Code}
		for _, kv := range s.Attributes() {
			switch kv.Key {
			case hedgeotel.AttemptAttr:
				sum.Attempt = kv.Value.String()
			case hedgeotel.SupersededAttr:
				sum.Superseded = kv.Value.String()
			case "http.request.resend_count":
				sum.Resend = kv.Value.String()
			}
		}
		got[sum.Name+"#"+sum.Attempt] = sum
	}
	return got
}

const attemptHeader = "Hedge-Attempt"

// server starts a real server on 127.0.0.1, over HTTP/1.1 or HTTP/2, and
// returns its URL and a transport that speaks to it.
func server(t *testing.T, http2 bool, h http.HandlerFunc) (string, http.RoundTripper) {
	srv := httptest.NewUnstartedServer(h)
	if http2 {
		srv.EnableHTTP2 = true
		srv.Config.ErrorLog = log.New(io.Discard, "", 0)
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv.URL, srv.Client().Transport
}

// racing is a handler whose primaries hang until cancelled and whose
// hedges answer once their primary has arrived: the hedge always wins.
func racing() http.HandlerFunc {
	primaryIn := make(chan struct{}, 16)
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(attemptHeader) == "0" {
			primaryIn <- struct{}{}
			<-r.Context().Done()
			return
		}
		select {
		case <-primaryIn:
			fmt.Fprint(w, "from the hedge")
		case <-r.Context().Done():
		}
	}
}

func get(t *testing.T, ctx context.Context, url string) *http.Request {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// Over real connections and the real otelhttp, each attempt's span
// carries hedge.attempt, and the attempts after the first
// http.request.resend_count; the loser's says hedge.superseded and is not an
// error, the winner's is left as otelhttp made it, and attempts that the
// caller cut off stay errors.
func TestAttemptTransportMarksSpans(t *testing.T) {
	for _, http2 := range []bool{false, true} {
		name := "HTTP/1.1"
		if http2 {
			name = "HTTP/2"
		}
		t.Run(name+"/the hedge wins", func(t *testing.T) {
			sp := newSpans(t)
			url, base := server(t, http2, racing())
			tr := &hedgehttp.Transport{
				Base:          otelhttp.NewTransport(&hedgeotel.AttemptTransport{Base: base}, otelhttp.WithTracerProvider(sp.tp)),
				Delay:         hedge.Fixed(0),
				AttemptHeader: attemptHeader,
			}
			resp, err := tr.RoundTrip(get(t, t.Context(), url))
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			want := map[string]spanSummary{
				"HTTP GET#0": {Name: "HTTP GET", Attempt: "0", Superseded: "true", Status: codes.Ok},
				"HTTP GET#1": {Name: "HTTP GET", Attempt: "1", Resend: "1", Status: codes.Unset},
			}
			if diff := cmp.Diff(want, summarize(sp.await(t, 2))); diff != "" {
				t.Errorf("spans (-want +got)\n%s", diff)
			}
		})

		t.Run(name+"/the caller cancels", func(t *testing.T) {
			sp := newSpans(t)
			arrived := make(chan struct{}, 2)
			url, base := server(t, http2, func(w http.ResponseWriter, r *http.Request) {
				arrived <- struct{}{}
				<-r.Context().Done()
			})
			tr := &hedgehttp.Transport{
				Base:  otelhttp.NewTransport(&hedgeotel.AttemptTransport{Base: base}, otelhttp.WithTracerProvider(sp.tp)),
				Delay: hedge.Fixed(0),
			}
			ctx, cancel := context.WithCancel(t.Context())
			errc := make(chan error, 1)
			go func() {
				_, err := tr.RoundTrip(get(t, ctx, url))
				errc <- err
			}()
			<-arrived
			<-arrived
			cancel()
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Errorf("RoundTrip: %v, want context.Canceled", err)
			}
			want := map[string]spanSummary{
				"HTTP GET#0": {Name: "HTTP GET", Attempt: "0", Status: codes.Error},
				"HTTP GET#1": {Name: "HTTP GET", Attempt: "1", Resend: "1", Status: codes.Error},
			}
			if diff := cmp.Diff(want, summarize(sp.await(t, 2))); diff != "" {
				t.Errorf("spans (-want +got)\n%s", diff)
			}
		})
	}

	t.Run("a request that is not hedged", func(t *testing.T) {
		sp := newSpans(t)
		url, base := server(t, false, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "posted") })
		tr := &hedgehttp.Transport{Base: otelhttp.NewTransport(&hedgeotel.AttemptTransport{Base: base}, otelhttp.WithTracerProvider(sp.tp))}
		post, err := http.NewRequest(http.MethodPost, url, strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		post.GetBody = nil // one body: never hedged
		resp, err := tr.RoundTrip(post)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		want := map[string]spanSummary{"HTTP POST#": {Name: "HTTP POST"}}
		if diff := cmp.Diff(want, summarize(sp.await(t, 1))); diff != "" {
			t.Errorf("spans (-want +got)\n%s", diff)
		}
	})

	t.Run("outside otelhttp, the caller's span is left alone", func(t *testing.T) {
		sp := newSpans(t)
		url, base := server(t, false, racing())
		tr := &hedgehttp.Transport{Base: &hedgeotel.AttemptTransport{Base: base}, Delay: hedge.Fixed(0), AttemptHeader: attemptHeader}
		ctx, caller := sp.tp.Tracer("test").Start(t.Context(), "caller")
		resp, err := tr.RoundTrip(get(t, ctx, url))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		caller.End()
		want := map[string]spanSummary{"caller#": {Name: "caller"}}
		if diff := cmp.Diff(want, summarize(sp.await(t, 1))); diff != "" {
			t.Errorf("spans (-want +got)\n%s", diff)
		}
	})
}

// Within a hedge.Do of your own, the hedge's span carries hedge.attempt,
// and the loser's, found by hedge.ErrSuperseded as its context's cause,
// is marked superseded.
func TestAttemptTransportInDo(t *testing.T) {
	sp := newSpans(t)
	url, base := server(t, false, racing())
	client := &http.Client{Transport: otelhttp.NewTransport(&hedgeotel.AttemptTransport{Base: base}, otelhttp.WithTracerProvider(sp.tp))}
	p := hedge.Policy[string]{Delay: hedge.Fixed(0)}
	got, err := hedge.Do(t.Context(), p, func(ctx context.Context) (string, error) {
		req := get(t, ctx, url)
		req.Header.Set(attemptHeader, strconv.Itoa(hedge.Attempt(ctx)))
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	})
	if err != nil || got != "from the hedge" {
		t.Fatalf("Do: %q, %v", got, err)
	}
	want := map[string]spanSummary{
		"HTTP GET#":  {Name: "HTTP GET", Superseded: "true", Status: codes.Ok}, // the primary: no hedge.attempt
		"HTTP GET#1": {Name: "HTTP GET", Attempt: "1", Resend: "1", Status: codes.Unset},
	}
	if diff := cmp.Diff(want, summarize(sp.await(t, 2))); diff != "" {
		t.Errorf("spans (-want +got)\n%s", diff)
	}
}

// A Transport past its MaxRoutes counts the requests of new hosts under
// the route the Observer calls OverflowKey: the two spell it alike.
func TestOverflowKeyIsHedgehttps(t *testing.T) {
	tr := &hedgehttp.Transport{MaxRoutes: 1}
	for range 2 {
		url, _ := server(t, false, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
		resp, err := tr.RoundTrip(get(t, t.Context(), url))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	tr.CloseIdleConnections()
	if _, ok := tr.Stats()[hedgeotel.OverflowKey]; !ok {
		t.Errorf("routes %v, want one named %q", slices.Sorted(maps.Keys(tr.Stats())), hedgeotel.OverflowKey)
	}
}
