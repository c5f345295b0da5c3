package hedge

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkReplan measures one plan over two full windows of the 90/10
// upstream: the cost that one call in Window/2 pays.
func BenchmarkReplan(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	p := &Planner{Window: 1 << 30} // never plans by itself
	for range 4000 {
		d := 20*time.Millisecond + time.Duration(r.Int64N(int64(25*time.Millisecond)))
		if r.Float64() < 0.1 {
			d = 450*time.Millisecond + time.Duration(r.Int64N(int64(150*time.Millisecond)))
		}
		p.Learn(context.Background(), d, true)
	}
	s := p.load()
	b.ReportAllocs()
	for b.Loop() {
		s.replan(newSurvival([]*histogram{&s.done[0], &s.done[2]}, []*histogram{&s.cut[0], &s.cut[2]}))
	}
}
