package benchmarks

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cristalhq/hedgedhttp"

	"github.com/tailcut/hedge/hedgehttp"
	"github.com/tailcut/hedge/internal/baseline"
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

// BenchmarkHTTPFastPath: a GET that answers long before its hedge is due,
// read to the end and closed. hedgedhttp's pooled workers outlive their
// benchmark and slow down whatever runs after it in the same process: run
// each sub-benchmark in a process of its own (BENCHMARKS.md does).
func BenchmarkHTTPFastPath(b *testing.B) {
	req, _ := http.NewRequest(http.MethodGet, "http://upstream.test/users/7", nil)
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
	b.Run("bare", func(b *testing.B) { roundTrip(b, canned{}) })
	b.Run("floor", func(b *testing.B) { roundTrip(b, floor{canned{}}) })
	b.Run("hedgedhttp", func(b *testing.B) {
		rt, err := hedgedhttp.NewRoundTripper(time.Hour, 2, canned{})
		if err != nil {
			b.Fatal(err)
		}
		roundTrip(b, rt)
	})
	b.Run("hedgehttp", func(b *testing.B) {
		roundTrip(b, &hedgehttp.Transport{Base: canned{}, MaxAttempts: 2})
	})
}

// BenchmarkHTTPLoopback: the same GET to a real server on 127.0.0.1 over
// HTTP/1.1 keep-alive, answered long before any hedge is due. The
// network and the server dominate; the rows show what each layer adds to
// a real http.Transport, whose deep frames make every attempt on a fresh
// goroutine grow its stack.
func BenchmarkHTTPLoopback(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok")
	}))
	b.Cleanup(srv.Close)
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/users/7", nil)
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
	// Each row gets a Transport of its own, so that no row reuses
	// another's connections.
	base := func(b *testing.B) http.RoundTripper {
		t := srv.Client().Transport.(*http.Transport).Clone()
		b.Cleanup(t.CloseIdleConnections)
		return t
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
		roundTrip(b, &hedgehttp.Transport{Base: base(b), MaxAttempts: 2})
	})
}
