package hedge

import (
	"context"
	"math"
	"sync/atomic"
)

// Bounds and defaults of TokenBucket's fields: maxBucketTokens bounds
// MaxTokens as gRPC bounds retryThrottling.maxTokens; the defaults are
// those of gRPC's own example.
const (
	maxBucketTokens     = 1000
	defaultBucketTokens = 10
	defaultTokenRatio   = 0.1
)

// TokenBucket throttles extra attempts as gRPC's retry throttling (A6)
// does: a failed attempt drains a token, a success refills TokenRatio of
// one, and hedges and retries stop while half of the bucket or less is
// left. It starts full. Tokens are counted in thousandths, so the
// threshold is exact.
//
// The zero value is ready: 10 tokens, a tenth of one per success. The
// fields are read once, on first use, under the bucket's lock; set them
// before. A field out of range is an error wrapping ErrInvalidBudget,
// which Policy.Validate and Do report; such a bucket refuses every extra
// attempt. A TokenBucket is safe for concurrent use and must not be
// copied after first use. Allow is one atomic load; Done is a
// compare-and-swap.
type TokenBucket struct {
	// MaxTokens is the bucket's size, in (0, 1000]. 0 means 10.
	MaxTokens int
	// TokenRatio is what one success refills, in tokens, rounded to
	// thousandths as gRPC keeps three decimals of it; it must not round
	// to 0, and a ratio above MaxTokens refills the bucket in one
	// success. 0 means 0.1.
	TokenRatio float64

	settings settings[bucketSettings]
	tokens   atomic.Int64 // thousandths of a token
}

// bucketSettings is what a TokenBucket reads from its fields.
type bucketSettings struct {
	err   error
	max   int64 // thousandths of a token
	ratio int64 // thousandths of a token per success
}

// load returns the bucket's settings, reading its fields and filling it on
// first use.
func (b *TokenBucket) load() *bucketSettings { return b.settings.load(b.read) }

func (b *TokenBucket) read() *bucketSettings {
	maxTokens, tokenRatio := orDefault(b.MaxTokens, defaultBucketTokens), orDefault(b.TokenRatio, defaultTokenRatio)
	if maxTokens < 0 || maxTokens > maxBucketTokens {
		return &bucketSettings{err: fieldError("TokenBucket.MaxTokens", "%d is outside (0, %d]", maxTokens, maxBucketTokens)}
	}
	full := int64(maxTokens) * milli
	// Clamped in float64 first: a huge ratio must not overflow the int64.
	r := math.Min(math.Round(tokenRatio*milli), float64(full))
	if !(r > 0) || math.IsInf(tokenRatio, 0) { // !(r > 0) also catches NaN
		return &bucketSettings{err: fieldError("TokenBucket.TokenRatio", "%v is not a finite number that rounds above 0 in thousandths", tokenRatio)}
	}
	b.tokens.Store(full)
	return &bucketSettings{max: full, ratio: int64(r)}
}

func (b *TokenBucket) check() error { return b.load().err }

// Allow grants extra attempt k (k ≥ 1) while more than half of the bucket
// is left, and takes nothing: the attempt pays only if it fails. It grants
// the primary (k < 1) always.
func (b *TokenBucket) Allow(_ context.Context, k int) bool {
	if primary(k) {
		return true
	}
	s := b.load()
	return s.err == nil && 2*b.tokens.Load() > s.max
}

// Done drains a token when attempt k, whichever it is, failed retryably
// (Retryable or Failed), and refills tokenRatio of one when it was
// accepted. Terminal and cancelled attempts say nothing about the
// upstream's health, so they change nothing. The bucket stays within
// [0, MaxTokens].
func (b *TokenBucket) Done(_ context.Context, _ int, o Outcome) {
	s := b.load()
	var delta int64
	switch {
	case s.err != nil:
		return
	case o == Retryable || o == Failed:
		delta = -milli
	case o == Accept:
		delta = s.ratio
	default:
		return
	}
	for {
		v := b.tokens.Load()
		n := min(max(v+delta, 0), s.max)
		if n == v || b.tokens.CompareAndSwap(v, n) {
			return
		}
	}
}

// Release does nothing: Allow took nothing, and an attempt that never
// started says nothing about the upstream's health.
func (b *TokenBucket) Release(context.Context, int) {}

// Tokens returns how many tokens are left, to three decimals: MaxTokens
// before first use, 0 for fields out of range.
func (b *TokenBucket) Tokens() float64 {
	b.load()
	return float64(b.tokens.Load()) / milli
}
