package hedgegrpc

import (
	"context"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/tailcut/hedge"
)

// streamAttempt is one attempt of a hedged stream. Its fields are
// guarded by the stream's mu, except those set before the attempt's
// goroutines start.
type streamAttempt struct {
	k         int
	cancel    context.CancelFunc // ends the attempt's stream
	unlink    func() bool        // the winner's: stops the caller's context from ending it
	cs        grpc.ClientStream  // nil until opened, or if it never was
	force     chan struct{}      // closed: commit to this attempt now
	headerCh  chan headerResult  // the header goroutine's one result
	drained   chan struct{}      // closed when the sender stops: after the commit, the winner has sent the whole buffer
	next      int                // messages of the buffer sent: SendMsg returned
	closeSent bool               // the buffered CloseSend went out
	sendErr   error              // the sender's failure, if it stopped on one
	live      bool               // its function has not returned: a forced commit may pick it
	accepted  bool               // a forced commit accepted it before its header came
	seen      bool               // its header goroutine has its result: a forced commit waits for it
	ended     bool               // it ended before sending headers, with endErr
	endErr    error              // io.EOF for OK; the status otherwise, or the streamer's error
	finished  bool               // gRPC finished its stream (OnFinish ran), with finishErr
	finishErr error
	// endToCaller says that its stream ended without headers while the
	// caller was in a call on it (a primary that led), which tells how
	// it ended: the header goroutine leaves that to the caller.
	endToCaller bool
	received    // what the caller's Header, Trailer and Peer options get if it wins
}

// headerResult is what an attempt's header goroutine saw: headers, or
// the end of a stream that sent none, with its status.
type headerResult struct {
	ended   bool
	err     error // io.EOF: ended OK
	started bool  // the headers were an Admission's start signal
}

// race runs the call through hedge.Do under p until it commits, on a
// goroutine of its own: the caller sends and receives meanwhile.
func (s *stream) race(p hedge.Policy[*streamAttempt]) {
	growStack(0) // Do's frames and the decision's outgrow a new goroutine's stack
	decided := false
	defer func() {
		if decided {
			return
		}
		// Do re-raised an attempt's panic, or an attempt called
		// runtime.Goexit: the caller must not wait forever.
		pe, _ := recover().(*hedge.PanicError)
		s.decide(nil, status.Error(codes.Internal, "hedgegrpc: an attempt panicked or called runtime.Goexit"), pe)
	}()
	p.Budget = s
	a, err := hedge.Do(&s.ctx, p, s.attempt)
	decided = true
	if err != nil {
		if cerr := callError(s.ctx.Context, err); cerr != nil {
			a, err = nil, cerr // no attempt's answer: the call's deadline passed, or the caller gave up
		}
	}
	s.decide(a, err, nil)
}

// Allow grants an extra attempt unless a commit is under way, pushback
// holds it back or the token bucket refuses it.
func (s *stream) Allow(ctx context.Context, k int) bool {
	if k >= 1 {
		s.mu.Lock()
		forced := s.forced
		s.mu.Unlock()
		if forced {
			return false
		}
	}
	return s.throttle.Allow(ctx, k)
}

// Done is the throttle's, except for the attempt the call commits to:
// the bucket hears of it when its stream ends, OK or not.
func (s *stream) Done(ctx context.Context, k int, o hedge.Outcome) {
	s.release(k)
	if o != hedge.Accept {
		s.count(ctx, k, o)
	}
}

// attempt is the function hedge.Do runs for each attempt: it opens a
// stream, replays the buffer on it and returns when the stream has
// headers or has ended, or when a forced commit picks it.
func (s *stream) attempt(ctx context.Context) (a *streamAttempt, err error) {
	if s.leading && hedge.Attempt(ctx) == 0 {
		return s.follow(ctx)
	}
	growStack(0) // before the streamer, while the stack is shallow
	a = &streamAttempt{k: hedge.Attempt(ctx), force: make(chan struct{}),
		headerCh: make(chan headerResult, 1), drained: make(chan struct{}), live: true}
	s.started.Add(1)
	s.mu.Lock()
	s.attempts = append(s.attempts, a)
	if s.forced && s.target == nil {
		s.retargetLocked()
	}
	s.mu.Unlock()
	defer s.leave(a, &err)

	opts := s.out.ask(append(make([]grpc.CallOption, 0, len(s.opts)+4), s.opts...), &a.received, false, false)
	att := a // the named result is written as the function returns
	opts = append(opts, grpc.OnFinish(func(err error) { s.finished(att, err) }))
	// The stream gets a context of its own: Do ends a loser's, but once
	// it has returned, the caller's context ends the winner's only if it
	// has a deadline; decide links the two.
	sctx, cancel := context.WithCancel(ctx)
	a.cancel = cancel
	var actx context.Context
	if s.tied {
		actx = askStart(sctx, a.k)
	} else {
		actx = withPreviousAttempts(sctx, a.k)
	}
	cs, err := s.streamer(actx, s.desc, s.cc, s.method, opts...)
	s.mu.Lock()
	if err != nil {
		cancel()
		a.ended, a.endErr = true, err
		close(a.drained)
	} else {
		a.cs = cs
		s.openLocked()
	}
	s.mu.Unlock()
	if err != nil {
		return a, err
	}
	go s.pump(ctx, a)
	go s.awaitHeader(a)
	return s.await(ctx, a)
}

// await waits until attempt a's stream has headers, or has ended without
// them, or a forced commit picks a, and returns a's outcome.
func (s *stream) await(ctx context.Context, a *streamAttempt) (*streamAttempt, error) {
	var r headerResult
	select {
	case r = <-a.headerCh:
	case <-a.force:
		s.mu.Lock()
		if !a.seen {
			a.accepted = true // commit before the header: the caller reads the stream now
			s.mu.Unlock()
			return a, nil
		}
		s.mu.Unlock()
		r = <-a.headerCh
	case <-ctx.Done():
		if a == &s.prim {
			s.endFirst(context.Cause(ctx)) // its stream's context is not Do's
		}
		return a, status.FromContextError(ctx.Err()).Err()
	}
	if !r.ended {
		if r.started {
			// The start signal commits a stream as any headers do (a
			// stream cannot be watched further without taking the
			// caller's messages), and tells Do first that the attempts
			// still queued elsewhere did no work.
			hedge.Started(ctx)
		}
		return a, nil // headers: commit
	}
	s.mu.Lock()
	a.ended, a.endErr = true, r.err
	s.mu.Unlock()
	if r.err == io.EOF {
		return a, nil // OK without headers: commit
	}
	return a, s.pushback(ctx, a.k, a.cs.Trailer(), r.err)
}

// leave marks a's function returned. If a forced commit was waiting for
// a and a did not win, it waits for the live attempt that sent the most.
func (s *stream) leave(a *streamAttempt, err *error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a.live = false
	if s.forced && s.target == a && *err != nil {
		s.retargetLocked()
	}
}

// awaitHeader waits for a's response headers, or for its stream to end
// without them; then it fetches the status.
func (s *stream) awaitHeader(a *streamAttempt) {
	growStack(0) // before grpc-go's Header, while the stack is shallow
	h, err := a.cs.Header()
	s.mu.Lock()
	if a.accepted {
		s.mu.Unlock()
		return // a forced commit won the race: the caller owns RecvMsg now
	}
	if h == nil && s.inline && a == &s.prim {
		// The caller's RecvMsg or Header is in the stream: a RecvMsg here
		// would race it, and it tells how the stream ended (firstSaid).
		a.endToCaller = true
		s.mu.Unlock()
		return
	}
	a.seen = true
	s.mu.Unlock()
	if h != nil {
		a.headerCh <- headerResult{started: startSignal(h)}
		return
	}
	if err == nil {
		// grpc-go reports a stream that ended without headers through
		// RecvMsg; no message can come without headers.
		err = a.cs.RecvMsg(new(emptypb.Empty))
	}
	a.headerCh <- headerResult{ended: true, err: err}
}

// pump replays the buffer to a, in order, and then what is buffered
// later; after the commit, the winner's pump finishes the buffer and
// stops, and the caller sends on the winner's stream directly.
func (s *stream) pump(ctx context.Context, a *streamAttempt) {
	growStack(0) // before grpc-go's SendMsg, while the stack is shallow
	defer close(a.drained)
	for {
		s.mu.Lock()
		if s.decided && s.winner != a {
			s.mu.Unlock()
			return
		}
		if i := a.next; i < len(s.sent) {
			m := s.sent[i]
			if s.decided {
				s.sent[i] = nil // A6: the winner's sent messages leave the buffer
			}
			s.mu.Unlock()
			err := a.cs.SendMsg(m)
			s.mu.Lock()
			a.next, a.sendErr = i+1, err // counted once sent: a forced commit picks by it
			s.mu.Unlock()
			if err != nil {
				return // the stream failed: its status comes through its header or RecvMsg
			}
			continue
		}
		if s.closeBuffered && !a.closeSent {
			a.closeSent = true
			s.mu.Unlock()
			a.cs.CloseSend()
			continue
		}
		if s.decided {
			s.sent = nil // the winner has it all
			s.mu.Unlock()
			return
		}
		more := s.more
		s.mu.Unlock()
		select {
		case <-more:
		case <-ctx.Done():
			return
		}
	}
}

// sendCommitted sends m on the winner's stream, once its pump has sent
// the buffer. A nil winner, or one whose stream failed, takes nothing.
func (a *streamAttempt) sendCommitted(m any) error {
	if a == nil || a.cs == nil || a.ended {
		return io.EOF
	}
	<-a.drained
	if a.sendErr != nil {
		return io.EOF
	}
	return a.cs.SendMsg(m)
}

// forceLocked commits the call to the live attempt that has sent the
// most, as A6 asks when the buffer overflows: the attempt returns as
// accepted, Do cancels the others, and Allow grants no further one.
func (s *stream) forceLocked() {
	if s.forced || s.decided {
		return
	}
	if s.leading && s.phase == leading {
		s.settleFirstLocked(&s.prim, nil, hedge.Accept) // the only attempt: it wins
		s.mu.Lock()
		return
	}
	s.forced = true
	s.retargetLocked()
}

// retargetLocked picks the live attempt that has sent the most as the
// forced commit's, and tells it; none when no attempt is live (the next
// one to start is then picked).
func (s *stream) retargetLocked() {
	s.target = nil
	for _, a := range s.attempts {
		if a.live && (s.target == nil || a.next > s.target.next) {
			s.target = a
		}
	}
	if s.target != nil {
		close(s.target.force)
	}
}

// openLocked tells Stream that an attempt has opened its stream.
func (s *stream) openLocked() {
	if !s.opened {
		s.opened = true
		if s.ready != nil {
			close(s.ready)
		}
	}
}

// decide records what Do returned, frees what no attempt needs, and
// wakes everything that waits for the decision.
func (s *stream) decide(a *streamAttempt, err error, pe *hedge.PanicError) {
	s.mu.Lock()
	s.decided = true
	s.panicked = pe
	s.winner = a
	switch {
	case a == nil:
		s.err = err
		s.sent = nil
	case a.cs == nil:
		s.sent = nil // no stream to send on
	default:
		for i := range min(a.next, len(s.sent)) {
			s.sent[i] = nil // sent already: only the rest is owed
		}
		if !a.finished && a.cancel != nil && s.ctx.Context.Done() != nil {
			// A primary on the caller's goroutine needs no link: its
			// context is the caller's own.
			a.unlink = context.AfterFunc(s.ctx.Context, a.cancel)
		}
	}
	s.openLocked()
	close(s.done)
	s.signalLocked()
	deliver := s.deliverLocked()
	s.mu.Unlock()
	if s.leading && a != &s.prim {
		s.lostFirst(a, pe)
	}
	deliver()
}

// finished records that gRPC finished a's stream.
func (s *stream) finished(a *streamAttempt, err error) {
	s.mu.Lock()
	a.finished, a.finishErr = true, err
	unlink := a.unlink
	deliver := s.deliverLocked()
	s.mu.Unlock()
	if unlink != nil {
		unlink()
	}
	if a.cancel != nil {
		a.cancel()
	} else {
		s.endFirst(nil) // the primary's, which ran on the caller's goroutine
	}
	deliver()
}

// deliverLocked returns what gives the caller's options the call's
// result, once it is known: the winner's header, trailer and peer and its
// final error, or the call's failure; and what tells the token bucket how
// a committed stream ended. It returns a no-op until then, and after.
func (s *stream) deliverLocked() func() {
	w := s.winner
	if !s.decided || s.delivered || w != nil && !w.finished {
		return func() {}
	}
	s.delivered = true
	err := s.err
	if w != nil {
		err = w.finishErr
	}
	return func() {
		if w != nil && (w.endErr == nil || w.endErr == io.EOF) {
			// Do accepted w, and Done left the count to its end.
			s.count(&s.ctx, w.k, s.m.outcome(err))
		}
		if s.out == nil {
			return
		}
		if w != nil {
			s.out.deliver(&w.received)
		}
		for _, f := range s.out.finish {
			f(err)
		}
	}
}
