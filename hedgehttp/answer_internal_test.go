package hedgehttp

import (
	"testing"

	"github.com/tailcut/hedge"
)

// An attempt keeps its outcome in a byte. An answer of a classifier that
// does not fit one, which hedge.Do would treat as Terminal, stays
// Terminal: 256 must not come back as Accept, its low byte.
func TestAnswerKeepsOutcome(t *testing.T) {
	for _, tt := range []struct{ o, want hedge.Outcome }{
		{hedge.Accept, hedge.Accept},
		{hedge.Retryable, hedge.Retryable},
		{hedge.Terminal, hedge.Terminal},
		{hedge.Failed, hedge.Failed},
		{100, 100}, // hedge.Do's to treat as Terminal
		{256, hedge.Terminal},
		{-129, hedge.Terminal},
		{1 << 40, hedge.Terminal},
	} {
		if got := outcome(new(attempt).answer(nil, tt.o), nil); got != tt.want {
			t.Errorf("answer(%d): outcome %d, want %d", tt.o, got, tt.want)
		}
	}
}
