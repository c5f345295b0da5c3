package admit_test

import (
	"context"
	"testing"

	"github.com/tailcut/hedge/admit"
)

// Enter and Leave with a slot free, beside a buffered channel used as a
// semaphore, the plainest limit on concurrent work.
func BenchmarkEnter(b *testing.B) {
	ctx := context.Background()
	b.Run("channel", func(b *testing.B) {
		b.ReportAllocs()
		sem := make(chan struct{}, 64)
		for b.Loop() {
			sem <- struct{}{}
			<-sem
		}
	})
	b.Run("gate", func(b *testing.B) {
		b.ReportAllocs()
		g := &admit.Gate{Limit: 64}
		for b.Loop() {
			pass, _ := g.Enter(ctx, false)
			pass.Leave()
		}
	})
	b.Run("gate-parallel", func(b *testing.B) {
		b.ReportAllocs()
		g := &admit.Gate{Limit: 64}
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				pass, _ := g.Enter(ctx, false)
				pass.Leave()
			}
		})
	})
}
