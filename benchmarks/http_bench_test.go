package benchmarks

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	"github.com/cristalhq/hedgedhttp"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgehttp"
	"github.com/tailcut/hedge/internal/baseline"
	"github.com/tailcut/hedge/internal/pipenet"
)

// canned is an in-memory RoundTripper: a 200 with a short body, at once,
// so the benchmark measures the hedging layer and not a network.
type canned struct{}

func (canned) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{
		StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{}, Body: io.NopCloser(strings.NewReader("ok")), Request: req,
	}, nil
}

// floor sends each request through baseline.Floor: the least a hedging
// RoundTripper that returns at the deadline pays per request.
type floor struct{ base http.RoundTripper }

func (f floor) RoundTrip(req *http.Request) (*http.Response, error) {
	return baseline.Floor(req.Context(), time.Hour, func(context.Context) (*http.Response, error) {
		return f.base.RoundTrip(req)
	})
}

// layers runs req, read to the end and closed, through each layer over a
// RoundTripper of its own from base: base itself, the floor, hedgedhttp
// and hedgehttp, the zero value's delay (learned per route: it hedges the
// calls slower than the route's p95, and never sooner than 1 ms), the
// same with the first attempt sent from the caller's goroutine (Inline),
// and hedgedhttp's (an hour: it never hedges). hedgehttp's row reports the
// hedges it sent per request.
func layers(b *testing.B, req *http.Request, base func(*testing.B) http.RoundTripper) {
	roundTrip := func(b *testing.B, rt http.RoundTripper) {
		b.ReportAllocs()
		for b.Loop() {
			resp, err := rt.RoundTrip(req)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	b.Run("bare", func(b *testing.B) { roundTrip(b, base(b)) })
	b.Run("floor", func(b *testing.B) { roundTrip(b, floor{base(b)}) })
	b.Run("hedgedhttp", func(b *testing.B) {
		rt, err := hedgedhttp.NewRoundTripper(time.Hour, 2, base(b))
		if err != nil {
			b.Fatal(err)
		}
		roundTrip(b, rt)
	})
	b.Run("hedgehttp", func(b *testing.B) {
		tr := &hedgehttp.Transport{Base: base(b)}
		roundTrip(b, tr)
		var hedged int64
		for _, s := range tr.Stats() {
			hedged += s.Hedged
		}
		b.ReportMetric(float64(hedged)/float64(b.N), "hedges/op")
	})
	b.Run("hedgehttp-inline", func(b *testing.B) {
		roundTrip(b, &hedgehttp.Transport{Base: base(b), Inline: true})
	})
	b.Run("hedgehttp-fixed", func(b *testing.B) {
		roundTrip(b, &hedgehttp.Transport{Base: base(b), MaxAttempts: 2, Delay: hedge.Fixed(time.Hour)})
	})
}

// BenchmarkHTTPFastPath: a GET that answers long before its hedge is due,
// from memory. hedgedhttp's pooled workers outlive their benchmark and
// slow down whatever runs after it in the same process: run each
// sub-benchmark in a process of its own (scripts/bench does).
func BenchmarkHTTPFastPath(b *testing.B) {
	req, _ := http.NewRequest(http.MethodGet, "http://upstream.test/users/7", nil)
	layers(b, req, func(*testing.B) http.RoundTripper { return canned{} })
}

// BenchmarkHTTPLoopback: the same GET to a real server on 127.0.0.1 over
// HTTP/1.1 keep-alive. The network and the server dominate; the rows show
// what each layer adds to a real http.Transport, whose deep frames make
// every attempt on a fresh goroutine grow its stack.
func BenchmarkHTTPLoopback(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok")
	}))
	b.Cleanup(srv.Close)
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/users/7", nil)
	// Each row gets a Transport of its own, so that no row reuses
	// another's connections.
	layers(b, req, func(b *testing.B) http.RoundTripper {
		t := srv.Client().Transport.(*http.Transport).Clone()
		b.Cleanup(t.CloseIdleConnections)
		return t
	})
}

// BenchmarkHTTPPipe: the same GET to a real http.Server over net.Pipe.
// Without the kernel, whose reads and writes are a third of a loopback
// call's CPU time and the noisiest part of it on a shared machine, what
// each layer adds to net/http stands out.
func BenchmarkHTTPPipe(b *testing.B) {
	l := pipenet.Serve(b, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok")
	})})
	req, _ := http.NewRequest(http.MethodGet, "http://upstream.test/users/7", nil)
	layers(b, req, func(b *testing.B) http.RoundTripper {
		t := &http.Transport{DialContext: l.Dial}
		b.Cleanup(t.CloseIdleConnections)
		return t
	})
}

// BenchmarkHTTPPipeStartingStack is BenchmarkHTTPPipe in a process whose
// new goroutines start with stacks of 8 KiB or more, which an
// http.Transport needs, instead of 2 KiB. The runtime starts a goroutine
// with the average stack it found at the last collection, mostly of
// parked, shallow goroutines; goroutines parked 7 KiB deep, at least 64
// and twice as many as there are already, raise it. Every row pays alike
// for scanning them. Beside BenchmarkHTTPPipe, it shows what the first
// stack of a goroutine per attempt costs each row.
func BenchmarkHTTPPipeStartingStack(b *testing.B) {
	stop := make(chan struct{})
	defer close(stop)
	n := max(64, 2*runtime.NumGoroutine())
	deep := make(chan struct{}, n)
	for range n {
		go parkDeep(7, deep, stop)
	}
	for range n {
		<-deep // a goroutine not yet run would count as a shallow one
	}
	// The starting size follows the stacks one collection scanned; a
	// collection already under way when they parked may have missed them.
	for range 4 {
		if startingStack() >= 8<<10 {
			break
		}
		runtime.GC()
	}
	if size := startingStack(); size < 8<<10 {
		// GODEBUG=adaptivestackstart=0 turns the rise off.
		b.Skipf("new goroutines start with %d bytes of stack, not the 8 KiB or more this row is about", size)
	}
	BenchmarkHTTPPipe(b)
}

// parkDeep blocks on stop under depth frames of 1 KiB each, once it has
// said on deep that it is that deep.
//
//go:noinline
func parkDeep(depth int, deep, stop chan struct{}) byte {
	var frame [1 << 10]byte
	if depth == 0 {
		deep <- struct{}{}
		<-stop
		return frame[0]
	}
	return parkDeep(depth-1, deep, stop) + frame[depth]
}

// startingStack is the size of the stack that new goroutines start with.
func startingStack() uint64 {
	s := []metrics.Sample{{Name: "/gc/stack/starting-size:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
