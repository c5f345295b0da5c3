package hedgegrpc

import (
	"context"
	"io"
	"runtime/debug"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/tailcut/hedge"
)

// A stream whose caller sends one message (server-streaming, or a unary
// method called as a stream) of a method hedged at a fixed delay runs its
// primary on the caller's goroutine, as a unary call does (lead.go):
// Stream opens it, SendMsg sends on it (and buffers a copy for hedges),
// RecvMsg and Header receive from it, and a timer waits for the first
// hedge. A primary that answers first commits the call with no goroutine
// of the call's own, where the race through hedge.Do takes four (the
// race, the attempt, its sender and its header watcher), each with a
// stack that grpc-go grows. When the timer fires first, or the primary
// ends with a non-fatal failure, the race goes to hedge.Do, whose attempt
// 0 stands for the primary (follow), while the caller goes on sending on
// the primary itself. A stream whose caller sends many messages goes
// through hedge.Do from the start: a caller whose sends the primary's
// flow control held up would hold up the hedges' too.

// closedDone is the done channel of a stream decided before anything
// could wait for the decision.
var closedDone = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// streamLead is the part of a stream whose primary runs on the caller's
// goroutine (leading is set). Its fields are guarded by the stream's mu,
// except those set before Stream returns.
type streamLead struct {
	leading  bool
	prim     streamAttempt
	phase    leadState
	inline   bool                    // the caller is in a call on the primary's stream (RecvMsg, Header)
	pctx     context.Context         // the primary's stream's context, with the call's deadline
	pcancel  context.CancelCauseFunc // ends pctx, with a cause
	pstop    context.CancelFunc      // releases the timeout's part of pctx; nil: no timeout
	timer    *time.Timer             // fires when the first hedge is due
	begin    time.Time               // the call's start; read only for a report or a timeout
	refusals int                     // the first hedge was refused
	skips    int                     // the first hedge fell due too close to the deadline
}

// lead opens the primary's stream on this goroutine, and arms the first
// hedge's timer.
func (s *stream) lead() (grpc.ClientStream, error) {
	ctx, m := s.ctx.Context, s.m
	if ctx.Err() != nil {
		// As Do: no attempt starts, and OnFinish hears the failure.
		s.mu.Lock()
		return nil, s.settleFirstLocked(nil, callError(ctx, context.Cause(ctx)), hedge.Canceled)
	}
	s.leading = true
	if m.stream.Observer != nil || m.stream.Timeout > 0 {
		s.begin = time.Now()
	}
	s.pctx, s.pcancel = context.WithCancelCause(&s.ctx)
	if m.stream.Timeout > 0 {
		s.pctx, s.pstop = context.WithDeadline(s.pctx, s.begin.Add(m.stream.Timeout))
	}
	a := &s.prim
	a.live, a.drained = true, closedDone // the caller sends on it itself: nothing to drain
	s.attempts = append(s.attempts, a)
	s.started.Add(1)
	opts := s.out.ask(append(make([]grpc.CallOption, 0, len(s.opts)+4), s.opts...), &a.received, false, false)
	opts = append(opts, grpc.OnFinish(func(err error) { s.finished(a, err) }))
	cs, err := s.openFirst(opts)
	s.mu.Lock()
	if err == nil {
		a.cs = cs
		s.opened = true
		s.timer = time.AfterFunc(m.fixed, s.due)
		s.mu.Unlock()
		return s, nil
	}
	a.ended, a.endErr = true, err
	switch {
	case s.cutOff():
		return nil, s.settleFirstLocked(nil, s.firstFailure(err), hedge.Canceled)
	case s.m.isNonFatal(codeOf(err)):
		// The primary failed to open with a non-fatal code: the next
		// attempt starts at once, in a race, and Stream returns once one
		// has opened its stream.
		s.ready = make(chan struct{})
		p := s.handOffLocked(m.fixed)
		s.mu.Unlock()
		go s.race(p)
		return s.opening()
	}
	s.settleFirstLocked(a, nil, hedge.Terminal)
	return nil, err
}

// openFirst opens the primary's stream. If the streamer panics, the call
// fails as Do fails one whose attempt panicked, and the panic goes on as
// a *hedge.PanicError.
func (s *stream) openFirst(opts []grpc.CallOption) (cs grpc.ClientStream, err error) {
	returned := false
	defer func() {
		if returned {
			return
		}
		v := recover()
		var pe *hedge.PanicError
		if v != nil {
			pe = &hedge.PanicError{Attempt: 0, Value: v, Stack: debug.Stack()}
		}
		s.mu.Lock()
		s.panicked = pe
		s.settleFirstLocked(nil, status.Error(codes.Internal, "hedgegrpc: an attempt panicked or called runtime.Goexit"), hedge.Terminal)
		if pe != nil {
			panic(pe)
		}
	}()
	cs, err = s.streamer(withPreviousAttempts(s.pctx, 0), s.desc, s.cc, s.method, opts...)
	returned = true
	return cs, err
}

// cutOff reports whether the caller gave up or the call's deadline
// passed, which Do would end the call with, whatever an attempt said.
// Not pctx.Err(): pctx ends when the primary's stream finishes.
func (s *stream) cutOff() bool {
	if s.ctx.Context.Err() != nil {
		return true
	}
	deadline, ok := s.pctx.Deadline()
	return ok && !time.Now().Before(deadline)
}

// firstFailure is the call's error when the primary ended with err before
// any race: the context's, when the caller gave up or the deadline
// passed, as Do would end the call; err otherwise.
func (s *stream) firstFailure(err error) error {
	if !s.cutOff() {
		return err
	}
	if ctx := s.ctx.Context; ctx.Err() != nil {
		return callError(ctx, context.Cause(ctx))
	}
	return callError(s.ctx.Context, context.DeadlineExceeded)
}

// settleFirstLocked decides the call without a race: for the primary, a,
// or, a nil, with err; o is how Do would have classified the primary's
// outcome. It unlocks s.mu, tells the token bucket and the Observer, and
// returns the call's failure, if it has one.
func (s *stream) settleFirstLocked(a *streamAttempt, err error, o hedge.Outcome) error {
	if s.leading {
		s.phase = led
		if s.timer != nil {
			s.timer.Stop() // if it fired, its func finds the call led and does nothing
		}
	}
	s.decided, s.winner = true, a
	if a == nil {
		s.err, s.sent = err, nil
	} else {
		for i := range min(a.next, len(s.sent)) {
			s.sent[i] = nil
		}
	}
	if s.done == nil {
		s.done = closedDone
	} else {
		close(s.done)
	}
	s.openLocked()
	s.signalLocked()
	deliver := s.deliverLocked()
	pe := s.panicked
	s.mu.Unlock()
	if s.leading {
		if a == nil {
			s.endFirst(context.Canceled)
		}
		s.Done(&s.ctx, 0, o)
	}
	if obs := s.m.stream.Observer; obs != nil && s.leading {
		elapsed := time.Since(s.begin)
		r := hedge.Report{Attempts: int(s.started.Load()), Primary: elapsed, PrimaryAnswered: true, Outcome: o,
			BudgetRefusals: s.refusals, DeadlineSkips: s.skips, Panicked: pe != nil, Elapsed: elapsed}
		if a == nil {
			r.Winner, r.PrimaryAnswered = -1, pe != nil // the context decided the call, or a panic
		}
		obs.Observe(&s.ctx, r)
	}
	deliver()
	if a == nil {
		return err
	}
	return nil
}

// endFirst releases the primary's stream's context, with cause.
func (s *stream) endFirst(cause error) {
	if s.pcancel == nil {
		return
	}
	s.pcancel(cause)
	if s.pstop != nil {
		s.pstop()
	}
}

// recvFirst receives into m from the primary's stream while it leads.
// ok reports whether err is the call's answer; otherwise the call's
// winner, once decided, answers.
func (s *stream) recvFirst(m any) (err error, ok bool) {
	s.mu.Lock()
	if s.phase != leading {
		s.mu.Unlock()
		return nil, false
	}
	s.inline = true
	s.mu.Unlock()
	return s.firstSaid(s.prim.cs.RecvMsg(m))
}

// headerFirst returns the primary's stream's header while it leads; ok
// is false when the call's winner, once decided, answers instead.
func (s *stream) headerFirst() (md metadata.MD, ok bool) {
	s.mu.Lock()
	if s.phase != leading {
		s.mu.Unlock()
		return nil, false
	}
	s.inline = true
	s.mu.Unlock()
	a := &s.prim
	md, _ = a.cs.Header()
	if md == nil {
		// The stream ended without headers: as grpc-go does, Header says
		// nil, and RecvMsg tells how it ended.
		s.firstSaid(a.cs.RecvMsg(new(emptypb.Empty)))
		return nil, false
	}
	if _, ok := s.firstSaid(nil); !ok {
		return nil, false
	}
	return md, true
}

// firstSaid takes what the primary's stream said to the caller while it
// led: a message or headers (err nil), or its end. It reports whether
// err is the call's answer: it is, unless a hedge fell due meanwhile and
// the race committed to another attempt.
func (s *stream) firstSaid(err error) (error, bool) {
	a := &s.prim
	afterHeaders := false
	if err != nil && err != io.EOF {
		md, _ := a.cs.Header() // at once: the stream has ended
		afterHeaders = md != nil
	}
	s.mu.Lock()
	s.inline = false
	if s.phase != leading {
		if a.endToCaller && !a.accepted {
			// The race's header watcher left the end for this call to tell.
			a.seen = true
			a.headerCh <- headerResult{ended: true, err: err}
		}
		s.mu.Unlock()
		s.wait()
		return err, s.winner == a
	}
	switch {
	case err == nil, err == io.EOF, afterHeaders:
		// A message or headers, or the stream's end after them or OK: the
		// call commits to the primary, and a failure is the caller's.
		s.settleFirstLocked(a, nil, hedge.Accept)
		return err, true
	case s.cutOff():
		return s.settleFirstLocked(nil, s.firstFailure(err), hedge.Canceled), true
	}
	a.ended, a.endErr = true, err
	if s.m.isNonFatal(codeOf(err)) {
		// A non-fatal failure with trailers only: the next attempt starts
		// at once, in a race whose attempt 0 is this failure.
		p := s.handOffLocked(s.m.fixed)
		s.mu.Unlock()
		go s.race(p)
		s.wait()
		return err, s.winner == a
	}
	a.endErr = s.pushback(s.pctx, 0, a.cs.Trailer(), err) // never waits: the code is fatal
	s.settleFirstLocked(a, nil, hedge.Terminal)
	return err, true
}

// sendFirst sends m, the message the caller buffered nth, on the
// primary's stream, on this goroutine, as a plain stream sends it, unless
// the race committed to another attempt; hedges replay it from the
// buffer. SendMsg returns once it is sent. It is called with s.mu held,
// and unlocks it.
func (s *stream) sendFirst(m any, n int) error {
	a := &s.prim
	if s.size > s.limit {
		if s.phase == leading {
			// The buffer outgrew its limit: the call commits to the only
			// attempt there is, which sends m next.
			s.settleFirstLocked(a, nil, hedge.Accept)
			s.mu.Lock()
		} else {
			s.forceLocked()
		}
	}
	s.signalLocked()
	live := a.cs != nil && !a.ended && (!s.decided || s.winner == a)
	s.mu.Unlock()
	if !live {
		return nil
	}
	err := a.cs.SendMsg(m)
	s.mu.Lock()
	a.next, a.sendErr = max(a.next, n), err
	if s.decided && s.winner == a {
		s.sent = nil // A6: the winner's sent messages leave the buffer
	}
	s.closeFirst() // unlocks
	return nil
}

// closeFirst sends the buffered CloseSend on the primary's stream, if it
// is due and the primary may still win. It is called with s.mu held, and
// unlocks it.
func (s *stream) closeFirst() {
	a := &s.prim
	due := s.closeBuffered && !a.closeSent && a.sendErr == nil && a.cs != nil && !a.ended && (!s.decided || s.winner == a)
	if due {
		a.closeSent = true
	}
	s.mu.Unlock()
	if due {
		a.cs.CloseSend()
	}
}

// due is the timer's: the first hedge is due. Unless the primary has
// ended, hedge.Do takes the race over on this goroutine, as it would
// have started the hedge: not too close to the deadline, and only as the
// token bucket allows.
func (s *stream) due() {
	s.mu.Lock()
	if s.phase != leading {
		s.mu.Unlock()
		return
	}
	if s.firstHedgeHeld(s.pctx, s.m.fixed, &s.ctx, &s.skips, &s.refusals) {
		s.mu.Unlock()
		return
	}
	p := s.handOffLocked(0)
	s.mu.Unlock()
	s.race(p)
}

// handOffLocked makes the call a race, whose attempt 1 falls due first
// after the primary (see unary's handOff), and returns its policy. Called
// with s.mu held.
func (s *stream) handOffLocked(first time.Duration) hedge.Policy[*streamAttempt] {
	s.phase = handedOff
	if s.timer != nil {
		s.timer.Stop() // moot: the primary has failed, or this is its func
	}
	s.more, s.done = make(chan struct{}), make(chan struct{})
	a := &s.prim
	a.force, a.headerCh = make(chan struct{}), make(chan headerResult, 1)
	p := s.m.stream
	p.Delay = afterLead{first, s.m.fixed}
	var since time.Duration
	if !s.begin.IsZero() {
		since = time.Since(s.begin)
	}
	if p.Timeout > 0 {
		p.Timeout = max(p.Timeout-since, 1)
	}
	if p.Observer != nil {
		p.Observer = &shifted{p.Observer, since, s.refusals, s.skips}
	}
	return p
}

// follow is attempt 0 of a race handed over while the primary led: it
// answers how the primary ended before the race, or waits, as any
// attempt does, for its headers or its end.
func (s *stream) follow(ctx context.Context) (a *streamAttempt, err error) {
	a = &s.prim
	defer s.leave(a, &err)
	s.mu.Lock()
	ended, endErr := a.ended, a.endErr
	s.mu.Unlock()
	if ended {
		var trailer metadata.MD
		if a.cs != nil {
			trailer = a.cs.Trailer()
		}
		return a, s.pushback(ctx, 0, trailer, endErr)
	}
	go s.awaitHeader(a)
	return s.await(ctx, a)
}

// lostFirst ends the primary's stream once the race was decided without
// it, with the cause Do gives its losers.
func (s *stream) lostFirst(a *streamAttempt, pe *hedge.PanicError) {
	switch {
	case a != nil:
		s.endFirst(hedge.ErrSuperseded)
	case pe != nil:
		s.endFirst(context.Canceled)
	case s.ctx.Context.Err() == nil:
		s.endFirst(context.DeadlineExceeded) // the call's timeout
	}
}
