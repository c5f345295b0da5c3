package hedgegrpc

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/tailcut/hedge"
)

// The metadata keys of A6.
const (
	previousAttemptsKey = "grpc-previous-rpc-attempts"
	pushbackKey         = "grpc-retry-pushback-ms"
)

// stopBit in throttle.held means pushback said: no more hedges for this
// call.
const stopBit = 1 << 31

// throttle is the part of one hedged call's hedge.Budget that unary calls
// and streams share: the channel's token bucket with A6's server
// pushback, which the core's Budget contract makes race-free. Do calls
// Allow and Done outside its lock, and calls Done for an attempt before
// it starts the attempt that a retryable result lets start at once; so an
// attempt that waits out a pushback holds every other start back until
// its Done, and the next attempt starts exactly when the wait ends.
type throttle struct {
	m       *method
	bucket  *hedge.TokenBucket // nil: no throttling
	started atomic.Int32       // attempts that have started
	held    atomic.Uint32      // bit k: attempt k waits out a pushback; stopBit: no more hedges
	// drains has bit k set when attempt k's failure ends the call and
	// yet drains the bucket: its pushback said stop (A6), or its code was
	// non-fatal but it came after response headers, which committed the
	// call to it.
	drains atomic.Uint32
	// commit is k+1 once attempt k received response headers and so
	// committed the call (A6), 0 before; only CommitOnHeaders sets it.
	commit atomic.Int32
	lost   atomic.Uint32 // bit k: attempt k ended after the call committed to another
}

// Allow grants an extra attempt unless the call has committed, pushback
// holds it back, the method's guard (a learned delay's own budget)
// refuses it or the token bucket does. Both hear the primary too.
func (t *throttle) Allow(ctx context.Context, k int) bool {
	if k >= 1 && (t.held.Load() != 0 || t.commit.Load() != 0) {
		return false
	}
	g := t.m.guard
	if g != nil && !g.Allow(ctx, k) && k >= 1 {
		return false
	}
	if t.bucket == nil || t.bucket.Allow(ctx, k) {
		return true
	}
	if g != nil && k >= 1 {
		g.Release(ctx, k) // the bucket refused what the guard granted
	}
	return false
}

// Done ends attempt k's pushback hold and tells the token bucket and the
// method's guard how it ended.
func (t *throttle) Done(ctx context.Context, k int, o hedge.Outcome) {
	t.release(k)
	t.count(ctx, k, o)
	if g := t.m.guard; g != nil {
		g.Done(ctx, k, o)
	}
}

// Release gives the method's guard back what it granted for attempt k,
// which never started. The token bucket takes nothing on a grant.
func (t *throttle) Release(ctx context.Context, k int) {
	if g := t.m.guard; g != nil {
		g.Release(ctx, k)
	}
}

// release ends attempt k's pushback hold, if it has one.
func (t *throttle) release(k int) {
	bit := uint32(1) << k
	if t.held.Load()&bit != 0 {
		t.held.And(^bit)
	}
}

// count tells the token bucket how attempt k ended. A failure whose
// pushback said stop counts as a failure even when its code was fatal
// (A6), and so does one with a non-fatal code that ended the call because
// it came after headers.
func (t *throttle) count(ctx context.Context, k int, o hedge.Outcome) {
	if t.bucket == nil || t.lost.Load()&(1<<k) != 0 {
		return // a loser to a commit says nothing of the server, as a cancelled one does not
	}
	if o == hedge.Terminal && t.drains.Load()&(1<<k) != 0 {
		o = hedge.Retryable
	}
	t.bucket.Done(ctx, k, o)
}

// pushback applies the server's grpc-retry-pushback-ms, if attempt k's
// trailer holds one, and returns err. For a pushback of n ms after a
// non-fatal failure, it returns only after n ms (or when the call ends),
// holding every other start back meanwhile: the core then starts the next
// attempt at once, as for any non-fatal failure, which is n ms after the
// failure came, and schedules the ones after it from there.
func (t *throttle) pushback(ctx context.Context, k int, trailer metadata.MD, err error) error {
	d, ok := pushbackOf(trailer)
	switch {
	case !ok:
		return err
	case d < 0:
		t.drains.Or(1 << k)
		t.held.Or(stopBit)
		return err
	}
	if !t.m.isNonFatal(codeOf(err)) || d == 0 || int(t.started.Load()) >= t.m.max || t.held.Load()&stopBit != 0 {
		return err // nothing to wait for: no attempt will follow this one
	}
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) <= d {
		// No attempt could start before the deadline: waiting would only
		// turn the server's answer into DeadlineExceeded.
		t.held.Or(stopBit)
		return err
	}
	t.held.Or(1 << k)
	timer := time.NewTimer(d)
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
	timer.Stop()
	return err
}

// pushbackOf returns the pushback of trailer: the wait
// grpc-retry-pushback-ms asks for, or -1 for a negative or malformed
// value, which says not to retry; ok is false when there is none.
func pushbackOf(trailer metadata.MD) (d time.Duration, ok bool) {
	v := trailer[pushbackKey]
	if len(v) == 0 {
		return 0, false
	}
	ms, err := strconv.ParseInt(v[0], 10, 32)
	if err != nil || ms < 0 {
		return -1, true
	}
	return time.Duration(ms) * time.Millisecond, true
}

// stopsHedging reports whether trailer holds a pushback that says not to
// retry.
func stopsHedging(trailer metadata.MD) bool {
	d, ok := pushbackOf(trailer)
	return ok && d < 0
}

// withPreviousAttempts sets grpc-previous-rpc-attempts to k on attempt k's
// outgoing metadata: absent on the first attempt, 1 on the second, and so
// on. A value already there (a proxy forwarding its incoming metadata) is
// replaced, so each attempt says what it is.
func withPreviousAttempts(ctx context.Context, k int) context.Context {
	stale := metadata.ValueFromOutgoingContext(ctx, previousAttemptsKey) != nil
	switch {
	case !stale && k == 0:
		return ctx
	case !stale:
		return metadata.AppendToOutgoingContext(ctx, previousAttemptsKey, strconv.Itoa(k))
	}
	md, _ := metadata.FromOutgoingContext(ctx) // a copy
	if k == 0 {
		delete(md, previousAttemptsKey)
	} else {
		md.Set(previousAttemptsKey, strconv.Itoa(k))
	}
	return metadata.NewOutgoingContext(ctx, md)
}

// firstHedgeHeld reports whether the first hedge of a call whose primary
// leads, due now, must not start, as hedge.Do would decide: it is
// skipped (*skips = 1) when less than half the delay is left before
// pctx's deadline, and refused (*refusals = 1) when the token bucket says
// no. The caller holds its call's lock.
func (t *throttle) firstHedgeHeld(pctx context.Context, fixed time.Duration, ctx *callCtx, skips, refusals *int) bool {
	if deadline, ok := pctx.Deadline(); ok {
		if left := time.Until(deadline); left <= 0 || left < fixed/2 {
			*skips = 1
			return true
		}
	}
	if !t.Allow(ctx, 1) {
		*refusals = 1
		return true
	}
	return false
}
