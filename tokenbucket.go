package hedge

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
)

// maxBucketTokens bounds NewTokenBucket's maxTokens, as gRPC bounds
// retryThrottling.maxTokens.
const maxBucketTokens = 1000

// TokenBucket throttles extra attempts as gRPC's retry throttling (A6)
// does: a failed attempt drains a token, a success refills tokenRatio of
// one, and hedges and retries stop while half of the bucket or less is
// left. It starts full. Tokens are counted in thousandths, so the
// threshold is exact.
//
// The zero value holds no tokens and refuses every extra attempt. A
// TokenBucket is safe for concurrent use and must not be copied after
// first use. Allow is one atomic load; Done is a compare-and-swap.
type TokenBucket struct {
	max    int64 // thousandths of a token
	ratio  int64 // thousandths of a token per success
	tokens atomic.Int64
}

// NewTokenBucket returns a full TokenBucket of maxTokens tokens, in
// (0, 1000], that refills tokenRatio tokens per success. tokenRatio is
// rounded to thousandths, as gRPC keeps three decimals of it, and must
// not round to 0; a ratio above maxTokens refills the bucket in one
// success.
//
// For other parameters it returns nil and an error wrapping
// ErrInvalidBudget.
func NewTokenBucket(maxTokens int, tokenRatio float64) (*TokenBucket, error) {
	if maxTokens <= 0 || maxTokens > maxBucketTokens {
		return nil, fmt.Errorf("%w: maxTokens %d is outside (0, %d]", ErrInvalidBudget, maxTokens, maxBucketTokens)
	}
	full := int64(maxTokens) * milli
	// Clamped in float64 first: a huge ratio must not overflow the int64.
	r := math.Min(math.Round(tokenRatio*milli), float64(full))
	if !(r > 0) || math.IsInf(tokenRatio, 0) { // !(r > 0) also catches NaN
		return nil, fmt.Errorf("%w: tokenRatio %v is not a finite number that rounds above 0 in thousandths", ErrInvalidBudget, tokenRatio)
	}
	b := &TokenBucket{max: full, ratio: int64(r)}
	b.tokens.Store(full)
	return b, nil
}

// Allow grants extra attempt k (k ≥ 1) while more than half of the bucket
// is left, and takes nothing: the attempt pays only if it fails. It grants
// the primary (k < 1) always.
func (b *TokenBucket) Allow(_ context.Context, k int) bool {
	return primary(k) || 2*b.tokens.Load() > b.max
}

// Done drains a token when attempt k, whichever it is, failed retryably
// (Retryable or Failed), and refills tokenRatio of one when it was
// accepted. Terminal and
// cancelled attempts say nothing about the upstream's health, so they
// change nothing. The bucket stays within [0, maxTokens].
func (b *TokenBucket) Done(_ context.Context, _ int, o Outcome) {
	var delta int64
	switch o {
	case Retryable, Failed:
		delta = -milli
	case Accept:
		delta = b.ratio
	default:
		return
	}
	for {
		v := b.tokens.Load()
		n := min(max(v+delta, 0), b.max)
		if n == v || b.tokens.CompareAndSwap(v, n) {
			return
		}
	}
}

// Release does nothing: Allow took nothing, and an attempt that never
// started says nothing about the upstream's health.
func (b *TokenBucket) Release(context.Context, int) {}

// Tokens returns how many tokens are left, to three decimals.
func (b *TokenBucket) Tokens() float64 {
	return float64(b.tokens.Load()) / milli
}
