package hedgehttp_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/hedgehttp"
	"github.com/tailcut/hedge/internal/baseline"
)

// memory is an in-memory upstream that answers at once with a fresh
// response (a RoundTripper's response is its caller's to keep), so that
// the benchmarks measure the transports, not a network.
type memory struct{}

func (memory) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("ok")), ContentLength: 2, Request: r}, nil
}

// stuckPrimary hangs the first attempt until it is cancelled: every call
// pays for a hedge.
type stuckPrimary struct{}

func (stuckPrimary) RoundTrip(r *http.Request) (*http.Response, error) {
	if hedge.Attempt(r.Context()) == 0 {
		return hang(r)
	}
	return memory{}.RoundTrip(r)
}

// floor sends each request through baseline.Floor: the least a hedging
// RoundTripper that returns at the deadline pays per request.
type floor struct{}

func (floor) RoundTrip(r *http.Request) (*http.Response, error) {
	return baseline.Floor(r.Context(), time.Hour, func(context.Context) (*http.Response, error) {
		return memory{}.RoundTrip(r)
	})
}

func roundTrip(b *testing.B, rt http.RoundTripper, req *http.Request) {
	resp, err := rt.RoundTrip(req)
	if err != nil {
		b.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// The fast path: the first attempt answers before its hedge is due, with
// the zero Transport's own delay (learned per route) and with a fixed one,
// beside Base called directly and through the floor, and a request that
// passes through. A call copies its request's header, so a request with a
// few headers costs more. Ties (TieHeader, whose entry costs the copy of
// an empty header its first group, and the attempt's hook) are what
// hedgehttp-untied leaves out.
func BenchmarkFastPath(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background()) // as a server's request context
	defer cancel()
	get, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://upstream.test/", nil)
	user, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://upstream.test/users/7", nil)
	routes := []string{"GET /users/{id}", "GET /users/{id}/orders", "GET /orders/{id}", "upstream.test/export/"}
	post, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://upstream.test/", http.NoBody)
	headers := get.Clone(ctx)
	headers.Header.Set("Accept", "application/json")
	headers.Header.Set("Authorization", "Bearer token")
	headers.Header.Set("Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	for _, bm := range []struct {
		name string
		rt   http.RoundTripper
		req  *http.Request
	}{
		{"bare", memory{}, get},
		{"floor", floor{}, get},
		{"hedgehttp", &hedgehttp.Transport{Base: memory{}}, get},
		{"hedgehttp-untied", &hedgehttp.Transport{Base: memory{}, DisableTies: true}, get},
		{"hedgehttp-fixed", &hedgehttp.Transport{Base: memory{}, Delay: hedge.Fixed(time.Hour)}, get},
		{"hedgehttp-headers", &hedgehttp.Transport{Base: memory{}}, headers},
		{"hedgehttp-routes", &hedgehttp.Transport{Base: memory{}, Routes: routes}, user},
		{"passthrough", &hedgehttp.Transport{Base: memory{}}, post},
	} {
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				roundTrip(b, bm.rt, bm.req)
			}
		})
		b.Run(bm.name+"-parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					roundTrip(b, bm.rt, bm.req)
				}
			})
		})
	}
}

// The hedge fires at once and wins; the primary is cancelled.
func BenchmarkHedgeFires(b *testing.B) {
	req, _ := http.NewRequest(http.MethodGet, "http://upstream.test/", nil)
	tr := &hedgehttp.Transport{Base: stuckPrimary{}, Delay: hedge.Fixed(0)}
	b.ReportAllocs()
	for b.Loop() {
		roundTrip(b, tr, req)
	}
}
