package hedge

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
)

// do says how the result it returns was classified: what a retry loop of
// Tries decides from.
func TestDoReportsOutcome(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		errBusy := errors.New("busy")
		failed := func(_ int, err error) Outcome {
			if err != nil {
				return Failed
			}
			return Accept
		}
		ended, cancel := context.WithCancel(t.Context())
		cancel()
		tests := []struct {
			name string
			ctx  context.Context
			p    Policy[int]
			err  error
			want Outcome
		}{
			{"accepted", t.Context(), Policy[int]{}, nil, Accept},
			{"ran out retryable", t.Context(), Policy[int]{MaxAttempts: 1}, errBusy, Retryable},
			{"ran out failed", t.Context(), Policy[int]{Classify: failed}, errBusy, Failed},
			{"terminal", t.Context(), Policy[int]{}, Permanent(errBusy), Terminal},
			{"cancelled", ended, Policy[int]{}, nil, Canceled},
			{"invalid", t.Context(), Policy[int]{MaxAttempts: -1}, nil, Terminal},
			{"invalid budget", t.Context(), Policy[int]{Budget: &InflightLimit{Max: -1}}, nil, Terminal},
		}
		for _, tt := range tests {
			var o Outcome
			do(tt.ctx, tt.p, func(context.Context) (int, error) { return 1, tt.err }, &o)
			if o != tt.want {
				t.Errorf("%s: outcome %v, want %v", tt.name, o, tt.want)
			}
		}
	})
}
