package benchmarks

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/DataDog/sketches-go/ddsketch"

	"github.com/tailcut/hedge"
)

// lockedSketch is what a learned delay built on DDSketch would be: the
// sketch is not safe for concurrent use, so every sample takes a mutex,
// and the quantile is read back every 32 samples as Percentile does.
type lockedSketch struct {
	mu sync.Mutex
	s  *ddsketch.DDSketch
	n  int
	d  time.Duration
}

func (l *lockedSketch) learn(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.s.Add(float64(d))
	if l.n++; l.n%32 == 0 {
		q, _ := l.s.GetValueAtQuantile(0.95)
		l.d = time.Duration(q)
	}
}

// BenchmarkLearn records one primary latency, from every P at once: the
// hot path a learned delay adds to each call. It is how Percentile's
// log-bucketed histogram of atomic counters was chosen over DDSketch.
func BenchmarkLearn(b *testing.B) {
	lat := []time.Duration{21 * time.Millisecond, 34 * time.Millisecond, 480 * time.Millisecond, 28 * time.Millisecond}
	b.Run("ddsketch-mutex", func(b *testing.B) {
		s, err := ddsketch.NewDefaultDDSketch(0.02)
		if err != nil {
			b.Fatal(err)
		}
		l := &lockedSketch{s: s}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for i := 0; pb.Next(); i++ {
				l.learn(lat[i%len(lat)])
			}
		})
	})
	b.Run("percentile", func(b *testing.B) {
		p := &hedge.Percentile{}
		ctx := context.Background()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for i := 0; pb.Next(); i++ {
				p.Learn(ctx, lat[i%len(lat)], true)
			}
		})
	})
}
