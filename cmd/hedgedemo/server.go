package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tailcut/hedge/hedgehttp"
)

// span is a range of latencies, drawn uniformly. It is a flag.Value, so
// "-fast 20ms-40ms" sets it.
type span struct{ min, max time.Duration }

func (s *span) String() string { return s.min.String() + "-" + s.max.String() }

// Set accepts "20ms-40ms", or a single duration for a constant latency.
func (s *span) Set(text string) error {
	loText, hiText, isRange := strings.Cut(text, "-")
	if !isRange {
		hiText = loText
	}
	lo, err := time.ParseDuration(loText)
	if err != nil {
		return err
	}
	hi, err := time.ParseDuration(hiText)
	if err != nil {
		return err
	}
	if lo < 0 || hi < lo {
		return fmt.Errorf("want 0 <= low <= high, got %s", text)
	}
	s.min, s.max = lo, hi
	return nil
}

// profile is the server's latency distribution: mostly fast, sometimes
// slow, like a replica that stalls now and then on GC or a cold cache.
type profile struct {
	fast, slow span
	slowFrac   float64
}

// latencies draws from a profile. One seeded source serves every request,
// so a seed fixes the sequence drawn, though not which request gets which.
type latencies struct {
	profile profile
	mu      sync.Mutex // rand.Rand is not safe for concurrent use
	rng     *rand.Rand
}

func newLatencies(p profile, seed uint64) *latencies {
	return &latencies{profile: p, rng: rand.New(rand.NewPCG(seed, seed))}
}

func (l *latencies) draw() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.profile.draw(l.rng)
}

// draw draws one latency from p with r.
func (p profile) draw(r *rand.Rand) time.Duration {
	s := p.fast
	if r.Float64() < p.slowFrac {
		s = p.slow
	}
	return s.min + time.Duration(r.Int64N(int64(s.max-s.min)+1))
}

// server is a loopback HTTP server with a skewed latency profile.
type server struct {
	url      string
	requests atomic.Int64 // requests received, cancelled ones included
	http     *http.Server
	served   chan error

	closeOnce sync.Once
	closeErr  error
}

// startServer listens on a free loopback port; it never listens beyond
// this machine.
func startServer(p profile, seed uint64) (*server, error) {
	lat := newLatencies(p, seed)
	return listen(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sleep(r.Context(), lat.draw()) == nil {
			w.Write([]byte("ok\n"))
		}
		// Otherwise the client gave up (a hedge won, or the deadline
		// passed): stop working on its behalf, as a real replica should.
	}))
}

// sleep waits for d, or until ctx is done and returns its error.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// listen serves h on a free loopback port, over HTTP/1.1 and over HTTP/2
// without TLS, whichever the client speaks.
func listen(h http.Handler) (*server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &server{url: "http://" + ln.Addr().String() + "/", served: make(chan error, 1)}
	s.http = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		h.ServeHTTP(w, r)
	}), Protocols: new(http.Protocols)}
	s.http.Protocols.SetHTTP1(true)
	s.http.Protocols.SetUnencryptedHTTP2(true)
	go func() { s.served <- s.http.Serve(ln) }()
	return s, nil
}

// close shuts the server down gracefully, and waits until it has
// stopped serving. Calls after the first return the first one's error,
// as do calls after abort.
func (s *server) close() error { return s.shut(true) }

// abort closes the server and its connections at once, without waiting
// for the requests in flight, whose contexts end, and waits until it has
// stopped serving. Calls after the first return the first one's error,
// as do calls after close.
func (s *server) abort() error { return s.shut(false) }

func (s *server) shut(graceful bool) error {
	s.closeOnce.Do(func() {
		var err error
		if graceful {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err = s.http.Shutdown(ctx)
		}
		if err != nil || !graceful {
			err = errors.Join(err, s.http.Close())
		}
		if serveErr := <-s.served; !errors.Is(serveErr, http.ErrServerClosed) {
			err = errors.Join(err, serveErr)
		}
		s.closeErr = err
	})
	return s.closeErr
}

// startLoadServer serves the profile's service times on a pool of
// workers; see loadHandler.
func startLoadServer(p profile, seed uint64, workers int, stopWork, shed bool) (*server, error) {
	lat := newLatencies(p, seed)
	return listen(loadHandler(newPool(workers), stopWork, shed,
		func(ctx context.Context) error { return sleep(ctx, lat.draw()) }))
}

// loadHandler serves each request on a worker of p, for as long as work
// takes (see poolHandler). With shed, a hedgehttp.Shedder in front lets a
// hedge in only while a worker is free and nobody waits.
func loadHandler(p *pool, stopWork, shed bool, work func(context.Context) error) http.Handler {
	var h http.Handler = &poolHandler{pool: p, work: work, stopWork: stopWork}
	if shed {
		h = &hedgehttp.Shedder{Handler: h, Limit: p.workers}
	}
	return h
}

// scaled returns p with every latency multiplied by f.
func (p profile) scaled(f float64) profile {
	s := func(sp span) span { return span{scaleDuration(sp.min, f), scaleDuration(sp.max, f)} }
	return profile{fast: s(p.fast), slow: s(p.slow), slowFrac: p.slowFrac}
}

// mean is the mean of the profile's latencies.
func (p profile) mean() time.Duration {
	mid := func(sp span) float64 { return float64(sp.min+sp.max) / 2 }
	return time.Duration((1-p.slowFrac)*mid(p.fast) + p.slowFrac*mid(p.slow))
}

func scaleDuration(d time.Duration, f float64) time.Duration {
	return time.Duration(float64(d) * f)
}
