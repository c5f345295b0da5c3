package admit

import (
	"context"
	"testing"
)

// A waiter granted its slot as its context ends finds both ready at
// once, and select picks either: given the grant, it returns the Pass;
// given the context, it hands the slot on, and no slot is lost. Both
// branches, a hundred times over: the chance that one never comes is
// 2⁻¹⁰⁰.
func TestWaitGrantedAndCanceledAtOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var admitted, handed int
	for range 100 {
		g := &Gate{Limit: 1, running: 1}
		w := &waiter{ready: make(chan struct{})}
		close(w.ready) // granted: the slot is w's now
		pass, err := g.wait(ctx, w, false)
		switch {
		case err == nil:
			admitted++
			if g.running != 1 {
				t.Fatalf("admitted, with %d running, want 1", g.running)
			}
			pass.Leave()
		case err != context.Canceled:
			t.Fatalf("wait = %v, want the Pass or context.Canceled", err)
		default:
			handed++
		}
		if g.running != 0 {
			t.Fatalf("%d running after the waiter was done, want 0", g.running)
		}
	}
	if admitted == 0 || handed == 0 {
		t.Errorf("admitted %d times, handed on %d times, want both", admitted, handed)
	}
}
