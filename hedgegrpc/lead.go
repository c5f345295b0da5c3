package hedgegrpc

import (
	"context"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/tailcut/hedge"
)

// A unary call of a method hedged at a fixed delay runs its primary on
// the caller's goroutine, and a timer waits for the first hedge (unless
// its context carries an attempt number, as a later try of a retry loop
// does: hedge.Do then numbers its attempts from it, and the handover
// below knows Do's first attempt as 0, so the call races through Do). Most
// calls end before it fires, and then cost what the call itself costs,
// a cancellable context and a timer. hedge.Do would add a goroutine for
// the primary, whose stack grpc-go's call grows from 2 KiB to 8 KiB by
// copying it, the handoffs between that goroutine and the caller's, and
// the copies of the request and the reply that its losers need: about a
// sixth of a plain call over loopback (BENCHMARKS.md). When the timer
// fires first, the race goes to hedge.Do, whose attempt 0 stands for the
// primary (follow): from then on, the call is a hedge.Do call like any
// other, one delay late, whose report counts from the call's start. A
// primary that fails with a non-fatal code before the first hedge is due
// hands the race over the same way, at once.

// leadState is how far a call whose primary runs on the caller's
// goroutine has got.
type leadState int8

const (
	leading   leadState = iota // the primary runs, and no hedge has been due
	led                        // the primary ended first: the caller's goroutine ends the call
	handedOff                  // a hedge fell due while the primary ran: hedge.Do races on (handoff)
)

// primary is the part of a call whose primary runs on the caller's
// goroutine (leading is set).
type primary struct {
	leading      bool
	first        unaryAttempt            // the primary's; its reply is the caller's
	buf          [4]grpc.CallOption      // the primary's options, as long as they fit
	pctx         context.Context         // the primary's context, with the call's deadline
	cancel       context.CancelCauseFunc // ends pctx, with a cause
	stopDeadline context.CancelFunc      // releases the timeout's part of pctx; nil: no timeout
	timer        *time.Timer             // fires when the first hedge is due
	begin        time.Time               // the call's start; read only for a report or a timeout

	// How the primary ended, written on the caller's goroutine before
	// state leaves leading or, after a handoff, before handoff.ended
	// closes.
	firstErr error             // what its invoker returned
	broke    *hedge.PanicError // its panic, if it panicked
	exited   bool              // it called runtime.Goexit

	// tied: the method's servers signal starts (method.signals), so the
	// primary asks for the signal, and watches its headers. Set before it
	// starts.
	tied bool

	mu    sync.Mutex
	state leadState
	// The tie, when the primary is tied: began says that its server
	// signalled its start, and following is attempt 0's context once a
	// hedge handed the race to hedge.Do, which then hears of the start.
	began bool
	// startedFirst: the primary's server had signalled its start before
	// the race was handed over. Set before hedge.Do starts; read-only
	// after. The race's hedges then neither ask for the signal nor hear
	// it: Do learns of the primary's start only once its attempt 0 runs,
	// and a hedge it started at once would be tied by a start that came
	// before the hedge was sent.
	startedFirst bool
	refusals     int             // the first hedge was refused: by the token bucket, or after a commit
	skips        int             // the first hedge fell due too close to the deadline
	h            *handoff        // set with handedOff
	following    context.Context // attempt 0's context once the race is handed over (see began)
}

// handoff is the race a hedge started while the primary ran.
type handoff struct {
	ended chan struct{} // closed once the primary's invoker returned, or broke
	// followed is closed once attempt 0 follows the primary (follow),
	// having told hedge.Do of a start that came before: a hedge reports
	// its own start only then (hedgeStarted).
	followed chan struct{}
	done     chan struct{} // closed once hedge.Do returned, or broke
	a        *unaryAttempt // what hedge.Do returned
	err      error
	panic    any  // what hedge.Do panicked with
	exit     bool // hedge.Do called runtime.Goexit
}

// cutShort is what follow returns for a primary whose call was decided
// before it answered: nothing, since that answer decides nothing. It is
// never returned by Do, nor written.
var cutShort = &unaryAttempt{}

// lead runs the call with its primary on this goroutine, and returns the
// attempt whose answer the call returns (nil for a context's error) and
// the call's error.
func (c *call) lead() (*unaryAttempt, error) {
	ctx, m := c.ctx.Context, c.m
	if ctx.Err() != nil {
		return nil, callError(ctx, context.Cause(ctx)) // as Do: fn is never called
	}
	c.leading = true
	if m.unary.Observer != nil || m.unary.Timeout > 0 {
		c.begin = time.Now()
	}
	// The primary's context ends when the call ends without it, with the
	// cause an attempt of Do would see: hedge.ErrSuperseded for a loser.
	c.pctx, c.cancel = context.WithCancelCause(&c.ctx)
	if m.unary.Timeout > 0 {
		c.pctx, c.stopDeadline = context.WithDeadline(c.pctx, c.begin.Add(m.unary.Timeout))
	}
	c.first.reply = c.reply
	c.started.Add(1)
	c.timer = time.AfterFunc(m.fixed, c.due)
	c.tied = !c.untied && m.signals.Load()
	opts := c.ask(c.buf[:0], c.rest, &c.first, c.tied)
	var pctx context.Context
	if c.tied {
		pctx = askStart(c.pctx, 0)
	} else {
		pctx = withPreviousAttempts(c.pctx, 0)
	}
	err := c.runFirst(pctx, opts)
	return c.afterFirst(err)
}

// runFirst calls the invoker for the primary. If the invoker panics or
// calls runtime.Goexit, the call ends as Do ends one whose attempt did,
// before the panic (as a *hedge.PanicError) or the Goexit goes on.
func (c *call) runFirst(ctx context.Context, opts []grpc.CallOption) (err error) {
	returned := false
	defer func() {
		if returned {
			return
		}
		if v := recover(); v != nil {
			c.broke = &hedge.PanicError{Attempt: 0, Value: v, Stack: debug.Stack()}
			return // afterFirst ends the call, and panics
		}
		c.exited = true
		c.afterFirst(nil) // and runtime.Goexit goes on
	}()
	if c.tied {
		err = c.invokeTied(ctx, c.callerReq, c.reply, opts, true)
	} else {
		err = c.invoker(ctx, c.method, c.callerReq, c.reply, c.cc, opts...)
	}
	returned = true
	return err
}

// afterFirst ends the call once the primary has ended with err, or broke.
func (c *call) afterFirst(err error) (*unaryAttempt, error) {
	c.untag(0)
	a := &c.first
	c.firstErr = err
	intact := c.broke == nil && !c.exited
	if intact {
		c.committed(0, a)
	}
	c.mu.Lock()
	h := c.h
	if h == nil {
		c.state = led
	}
	c.mu.Unlock()
	if h != nil {
		close(h.ended)
		<-h.done
		c.endFirst(nil)
		return c.handedBack(h)
	}
	c.timer.Stop() // if it fired, its func finds the primary ended and does nothing
	o := hedge.Terminal
	if intact {
		o = c.m.classifyUnary(a, err)
	}
	switch {
	case !intact:
	case o != hedge.Accept && c.pctx.Err() != nil:
		// The caller gave up or the call's deadline passed, which Do would
		// answer with the context's error, whatever the primary said.
		o, err = hedge.Canceled, context.DeadlineExceeded
		if ctx := c.ctx.Context; ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		a, err = nil, callError(c.ctx.Context, err)
	case o == hedge.Retryable:
		// A non-fatal failure before the first hedge was due: the next
		// attempt starts at once, in a race hedge.Do runs on this
		// goroutine, where the primary's outcome is attempt 0's.
		b, berr := c.handOff(c.m.fixed)
		c.endFirst(nil)
		return b, berr
	default:
		err = c.settle(c.pctx, 0, a, err) // never waits: a wait is for a failure that lets the call go on
	}
	c.endFirst(nil)
	c.throttle.Done(&c.ctx, 0, o)
	if obs := c.m.unary.Observer; obs != nil {
		elapsed := time.Since(c.begin)
		r := hedge.Report{Attempts: 1, Winner: 0, Primary: elapsed, PrimaryAnswered: true, Outcome: o,
			BudgetRefusals: c.refusals, DeadlineSkips: c.skips, Panicked: !intact, Elapsed: elapsed}
		switch {
		case !intact:
			r.Winner = -1
		case o == hedge.Canceled:
			r.Winner, r.PrimaryAnswered = -1, false // the context decided the call
		}
		obs.Observe(&c.ctx, r)
	}
	if c.broke != nil {
		panic(c.broke)
	}
	return a, err
}

// endFirst releases the primary's context and timer, with cause.
func (c *call) endFirst(cause error) {
	c.cancel(cause)
	if c.stopDeadline != nil {
		c.stopDeadline()
	}
}

// handedBack returns what the race that a hedge started decided, or
// re-raises its panic or runtime.Goexit. A panic of the primary that the
// race did not see, since it came after the decision, is dropped, as Do
// drops the panics of its losers.
func (c *call) handedBack(h *handoff) (*unaryAttempt, error) {
	switch {
	case h.panic != nil:
		if pe, ok := h.panic.(*hedge.PanicError); ok && c.broke != nil && pe.Value == c.broke {
			panic(c.broke) // follow re-raised the primary's own: the stack is the primary's
		}
		panic(h.panic)
	case h.exit && !c.exited: // when the primary exited, runtime.Goexit is under way
		runtime.Goexit()
	}
	return h.a, h.err
}

// due is the timer's: the first hedge is due. Unless the primary has
// ended, hedge.Do takes the race over here, as it would have started the
// hedge: not too close to the deadline, and only as the token bucket
// allows (and not after the primary committed the call).
func (c *call) due() {
	c.mu.Lock()
	if c.state != leading {
		c.mu.Unlock()
		return
	}
	if c.firstHedgeHeld(c.pctx, c.m.fixed, &c.ctx, &c.skips, &c.refusals) {
		c.mu.Unlock()
		return
	}
	h := &handoff{ended: make(chan struct{}), followed: make(chan struct{}), done: make(chan struct{})}
	c.h, c.state = h, handedOff
	c.mu.Unlock()
	returned := false
	defer func() {
		if !returned {
			h.panic = recover()
			h.exit = h.panic == nil
			c.cancel(context.Canceled)
		}
		close(h.done)
	}()
	h.a, h.err = c.handOff(0)
	returned = true
	switch {
	case h.a == &c.first:
	case h.a != nil:
		c.cancel(hedge.ErrSuperseded) // follow did, unless Do decided before it ran
	case c.ctx.Context.Err() == nil:
		c.cancel(context.DeadlineExceeded) // the call's timeout
	}
}

// handOff runs the rest of the race through hedge.Do, whose attempt 0 is
// the primary (follow) and whose attempt 1 falls due first after it: at
// once, when the timer fired, or after a whole delay when the primary has
// already failed, which makes attempt 1 start at once in its place. The
// call's timeout, and the Observer's report, count from the call's start.
func (c *call) handOff(first time.Duration) (*unaryAttempt, error) {
	c.copyForAttempts()
	p := c.m.unary
	p.Delay = afterLead{first, c.m.fixed}
	var since time.Duration
	if !c.begin.IsZero() {
		since = time.Since(c.begin)
	}
	if p.Timeout > 0 {
		p.Timeout = max(p.Timeout-since, 1) // > 0: the primary saw the deadline before it passed
	}
	if p.Observer != nil {
		p.Observer = &shifted{p.Observer, since, c.refusals, c.skips}
	}
	c.mu.Lock()
	c.startedFirst = c.began
	c.mu.Unlock()
	return c.race(p)
}

// follow is attempt 0 of a race handed over while the primary ran on the
// caller's goroutine: it waits for the primary's end and answers with its
// outcome, or, when the call is decided first, ends the primary's RPC
// with the cause Do gave it.
func (c *call) follow(ctx context.Context) (*unaryAttempt, error) {
	c.mu.Lock()
	h := c.h
	c.following = ctx
	began := c.began
	c.mu.Unlock()
	if began && h != nil && !c.startedFirst {
		// The primary's start came after the handover, after the
		// hedges that asked: those still queued are tied.
		c.reportStart(ctx, 0)
	}
	if h != nil {
		close(h.followed)
		select {
		case <-h.ended:
		case <-ctx.Done():
			c.cancel(context.Cause(ctx))
			return cutShort, status.FromContextError(ctx.Err()).Err()
		}
	}
	switch {
	case c.broke != nil:
		panic(c.broke)
	case c.exited:
		runtime.Goexit()
	case c.firstErr != nil && c.pctx.Err() != nil:
		// The caller gave up or the deadline passed, which ended the
		// primary's RPC before Do heard of it: as with an attempt of Do,
		// whose RPC ends only once Do has cancelled it, the call ends with
		// the context's error, which Do is about to decide on.
		<-ctx.Done()
		return cutShort, status.FromContextError(ctx.Err()).Err()
	}
	a := &c.first
	if a.commit == committedElsewhere {
		return a, c.firstErr
	}
	return a, c.settle(ctx, 0, a, c.firstErr)
}

// leadStarted records that the primary's server signalled its start, and
// tells hedge.Do if the race is its already (follow tells it otherwise).
func (c *call) leadStarted() {
	c.mu.Lock()
	c.began = true
	ctx := c.following
	c.mu.Unlock()
	if ctx != nil {
		c.reportStart(ctx, 0)
	}
}

// hedgeStarted reports to hedge.Do that attempt ctx, a hedge, has
// started. In a race handed over by a primary that still runs, it waits
// first for attempt 0 to follow the primary, or for ctx to end: Do
// cancels an attempt that a tie finds claimed but not yet running
// without ever calling it, and the primary's RPC, whose context only
// follow ends, would then wait in its server's queue until the call
// ended, and could run there.
func (c *call) hedgeStarted(ctx context.Context) {
	c.mu.Lock()
	h := c.h
	c.mu.Unlock()
	if h != nil {
		select {
		case <-h.followed:
		case <-ctx.Done():
			return // the attempt was cancelled, and its start ties nothing
		}
	}
	c.reportStart(ctx, hedge.Attempt(ctx))
}

// afterLead is the Delay of a race handed over by a primary: first for
// attempt 1, after the primary, then every hedge at next.
type afterLead struct{ first, next time.Duration }

func (d afterLead) Next(_ context.Context, k int) time.Duration {
	if k == 0 {
		return d.first
	}
	return d.next
}

// shifted is the Observer of a race handed over since after the call
// started: its report counts times from the call's start, not the
// race's, with what the first hedge's timer refused or skipped.
type shifted struct {
	hedge.Observer
	since           time.Duration
	refusals, skips int
}

func (s *shifted) Observe(ctx context.Context, r hedge.Report) {
	for k := 1; k < r.Attempts; k++ {
		r.Started[k] += s.since
	}
	r.Primary += s.since
	r.Elapsed += s.since
	r.BudgetRefusals += s.refusals
	r.DeadlineSkips += s.skips
	s.Observer.Observe(ctx, r)
}
