package hedge_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
)

// discards notes the values a policy hands to Discard.
type discards struct {
	mu   sync.Mutex
	vals []int
}

func (d *discards) discard(v int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.vals = append(d.vals, v)
}

func (d *discards) got() []int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]int(nil), d.vals...)
}

// A primary on the caller's goroutine that calls runtime.Goexit after a
// hedge has won takes the caller's goroutine with it: Do cannot return
// the hedge's value, so it goes to Discard, once.
func TestInlineGoexitAfterTheDecisionDiscardsTheWinner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var d discards
		p := hedge.Policy[int]{Delay: hedge.Fixed(10 * ms), Inline: true, Discard: d.discard}
		returned := false
		done := make(chan struct{})
		go func() {
			defer close(done)
			hedge.Do(t.Context(), p, func(ctx context.Context) (int, error) {
				if hedge.Attempt(ctx) == 1 {
					time.Sleep(5 * ms)
					return 1, nil
				}
				<-ctx.Done() // lost to the hedge
				runtime.Goexit()
				return 0, nil
			})
			returned = true
		}()
		<-done
		synctest.Wait()
		if returned {
			t.Fatal("Do returned; want runtime.Goexit in the caller")
		}
		if diff := cmp.Diff([]int{1}, d.got()); diff != "" {
			t.Errorf("discarded (-want +got):\n%s", diff)
		}
	})
}
