package hedgegrpc

import (
	"context"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tailcut/hedge"
)

// Stream is a grpc.StreamClientInterceptor. It hedges the streams of a
// method with a policy that hedges, server-streaming, client-streaming
// and bidi alike, as A6 says, and passes other streams to streamer
// unhedged; those count in the token bucket when they end.
//
// Until the call commits to one attempt, the stream keeps a copy
// (proto.Clone) of every message the caller sends, and of its CloseSend,
// and replays them, in order, to every attempt, those that start later
// included. SendMsg returns once the message is buffered. The call
// commits to the first attempt that receives response headers (or ends
// without them: OK, or a failure with a fatal code); the others are
// cancelled, the buffer is freed as the winner catches up with it, and
// from then on the stream is the winner's own. A failure with a
// non-fatal code before the commit starts the next attempt at once, and
// pushback and throttling apply as for unary calls. RecvMsg and Header
// wait for the commit.
//
// Ties: the attempts of a stream that hedge.Do runs from the start (any
// but a server-streaming one hedged at a fixed delay, below) ask for the
// start signal, as unary calls do (TieKey). A server's Admission sends a
// stream's headers as its handler starts; they commit the call, as any
// headers do, and the attempts still queued elsewhere are cancelled as
// a tie's (hedge.Started), not as losers: a stream cannot be watched
// past its headers without taking the caller's messages.
//
// When the buffered messages outgrow the call's grpc.MaxRetryRPCBufferSize
// (DefaultMaxRetryRPCBufferSize without it; each message counts its
// proto.Size plus the 5-byte frame header, uncompressed), the call
// commits to the attempt that has sent the most, cancels the others and
// starts no further one; SendMsg then waits for that commit. Context, as
// in grpc-go, commits too, since it hands out one attempt's context.
// A message that is not a proto.Message (a custom codec's) cannot be
// copied: it commits the call as the buffer limit does, before it is sent.
//
// The race until the commit is a hedge.Do call, on a goroutine of its
// own, since the caller sends while it runs: the Config's Observer gets
// its report at the commit, and a learned Delay learns how long the
// primary took to commit. The caller's context ends every attempt, the
// winner's too after the commit.
//
// A stream whose caller sends one message (server-streaming), of a
// method hedged at a fixed hedgingDelay above 0, races only once a hedge
// is due: until then, its primary runs on the caller's goroutine, as a
// plain stream does. SendMsg sends on it (and keeps the copy for hedges),
// and RecvMsg and Header receive from it, so that a primary that commits
// the call before the first hedge is due costs little more than a plain
// stream. When the first hedge falls due, or the primary fails with a
// non-fatal code first, hedge.Do takes over the race, with the primary as
// its attempt 0, and the Observer's report counts from the call's start.
// Such a stream sees the primary's headers only when the caller receives
// (RecvMsg, Header, Context), or once a hedge falls due: a caller that
// has not received by then gets the hedge sent, and cancelled as soon as
// the race sees that the primary had headers first.
//
// The method's timeout in the service config bounds the whole call, the
// committed stream included, from the call's start: when it passes, the
// stream fails with codes.DeadlineExceeded.
//
// Stream returns once an attempt has opened its stream, or with the
// call's error if the call failed before any could (a fatal code, or the
// caller's context ending, as a status). grpc.Header, grpc.Trailer and
// grpc.Peer receive the winner's; OnFinish runs once, when the winner's
// stream ends, or when the call fails without one. If an attempt panics,
// the call fails, and the next of Stream, Header, RecvMsg, Context, or a
// SendMsg waiting for a commit, panics with the *hedge.PanicError.
func (in *Interceptor) Stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if tiedAttempt(ctx, method) {
		return streamer(ctx, desc, cc, method, opts...) // a unary call's attempt, hedged by it
	}
	t := in.table()
	m := t.lookup(method)
	if m == nil || !m.hedged() {
		return t.onceStream(ctx, m, desc, cc, method, streamer, opts)
	}
	s := &stream{desc: desc, cc: cc, method: method, streamer: streamer, limit: bufferLimit(opts)}
	s.m, s.bucket = m, t.bucket
	s.ctx = callCtx{ctx, method, nil}
	rest, out := split(opts)
	s.opts, s.out = own(rest, out), out
	if !desc.ClientStreams && m.leads(ctx) {
		return s.lead()
	}
	s.tied = !in.untied
	s.more, s.ready, s.done = make(chan struct{}), make(chan struct{}), make(chan struct{})
	go s.race(m.stream)
	return s.opening()
}

// opening returns s once an attempt has opened its stream, or the call's
// failure if it was decided before any could.
func (s *stream) opening() (grpc.ClientStream, error) {
	<-s.ready
	s.mu.Lock()
	failed := s.decided && (s.winner == nil || s.winner.cs == nil)
	s.mu.Unlock()
	if failed {
		s.rethrow()
		return nil, s.failure()
	}
	return s, nil
}

// stream is one hedged stream: the grpc.ClientStream the caller holds.
// Its throttle and its Allow and Done make it the call's hedge.Budget.
type stream struct {
	throttle
	// Set before the race starts; read-only after.
	ctx      callCtx // the caller's context, with the method
	desc     *grpc.StreamDesc
	cc       *grpc.ClientConn
	method   string
	streamer grpc.Streamer
	opts     []grpc.CallOption // a copy of the caller's, less those in out
	out      *outputs          // nil: the caller asked for none
	limit    int               // bytes the buffer may hold before the call commits
	tied     bool              // attempts ask for the start signal: every attempt runs under hedge.Do

	mu sync.Mutex
	// The buffer, until the winner has caught up with it.
	sent          []any         // copies of the caller's messages; sent ones are nil once committed
	size          int           // bytes buffered, frame headers included
	closeBuffered bool          // the caller called CloseSend before the commit
	closed        bool          // the caller called CloseSend
	more          chan struct{} // closed and replaced when the buffer grows or the call is decided
	// The race.
	attempts []*streamAttempt
	forced   bool           // the buffer outgrew the limit, or Context was called: commit now
	target   *streamAttempt // the attempt a forced commit is waiting for; nil: none live
	opened   bool           // ready is closed
	ready    chan struct{}  // closed when an attempt opened its stream, or the call was decided
	// The decision.
	decided   bool
	done      chan struct{}     // closed when decided
	winner    *streamAttempt    // the attempt the call returns; nil: the call failed without one
	err       error             // the call's failure when winner is nil
	panicked  *hedge.PanicError // an attempt's panic, re-raised by the caller's next call
	delivered bool              // the caller's outputs and OnFinish have had the result

	streamLead // the primary, when it runs on the caller's goroutine (see streamlead.go)
}

// wait blocks until the call is decided.
func (s *stream) wait() {
	<-s.done
	s.rethrow()
}

// rethrow panics with an attempt's panic, if there was one.
func (s *stream) rethrow() {
	if s.panicked != nil {
		panic(s.panicked)
	}
}

// failure is the error of a call decided without a winner, or of a
// winner that ended before it sent headers. Called once decided.
func (s *stream) failure() error {
	if w := s.winner; w != nil {
		return w.endErr
	}
	return s.err
}

// Header returns the winner's header metadata, once the call has
// committed. A call that ended without headers returns nil, nil, as
// grpc-go does, or the failure when no attempt opened a stream.
func (s *stream) Header() (metadata.MD, error) {
	if s.leading {
		if md, ok := s.headerFirst(); ok {
			return md, nil
		}
	}
	s.wait()
	w := s.winner
	switch {
	case w == nil:
		return nil, s.err
	case w.cs == nil:
		return nil, w.endErr
	case w.ended:
		return nil, nil
	}
	return w.cs.Header()
}

// Trailer returns the winner's trailer metadata. Like grpc-go's, it is
// meant for after RecvMsg returned an error.
func (s *stream) Trailer() metadata.MD {
	select {
	case <-s.done:
	default:
		return nil // nothing is decided, so nothing has ended
	}
	if w := s.winner; w != nil && w.cs != nil {
		return w.cs.Trailer()
	}
	return nil
}

// Context returns the winner's stream context. Called before the call
// committed, it commits it, as grpc-go's does for its retries: the
// caller would otherwise hold a context of an attempt that may lose.
func (s *stream) Context() context.Context {
	s.mu.Lock()
	s.forceLocked()
	s.mu.Unlock()
	s.wait()
	if w := s.winner; w != nil && w.cs != nil {
		return w.cs.Context()
	}
	return s.ctx.Context
}

// RecvMsg receives the winner's next message, once the call has
// committed.
func (s *stream) RecvMsg(m any) error {
	if s.leading {
		if err, ok := s.recvFirst(m); ok {
			return err
		}
	}
	s.wait()
	w := s.winner
	switch {
	case w == nil:
		return s.err
	case w.cs == nil || w.ended:
		return w.endErr
	}
	return w.cs.RecvMsg(m)
}

// SendMsg buffers a copy of m for every attempt until the call commits,
// and sends m on the winner's stream after. Like grpc-go's, it returns
// io.EOF once the stream has failed (RecvMsg tells how), and nil for a
// stream that is not client-streaming.
func (s *stream) SendMsg(m any) error {
	err := s.send(m)
	if err == io.EOF && !s.desc.ClientStreams {
		return nil
	}
	return err
}

func (s *stream) send(m any) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return status.Error(codes.Internal, "SendMsg called after CloseSend")
	}
	msg, ok := m.(proto.Message)
	if !ok {
		s.forceLocked() // no copy to replay: commit before it is sent
	}
	if s.forced && !s.decided {
		s.mu.Unlock()
		s.wait() // a commit is under way: the winner takes the message
		s.mu.Lock()
	}
	if s.decided {
		w := s.winner
		s.mu.Unlock()
		return w.sendCommitted(m)
	}
	c := proto.Clone(msg)
	s.sent = append(s.sent, c)
	s.size += proto.Size(c) + frameHeader
	if !s.desc.ClientStreams {
		s.closed, s.closeBuffered = true, true // one message, as grpc-go's own stream closes it
	}
	if s.leading {
		return s.sendFirst(m, len(s.sent)) // unlocks
	}
	if s.size > s.limit {
		s.forceLocked()
	}
	s.signalLocked()
	s.mu.Unlock()
	return nil
}

// CloseSend closes the sending side: of every attempt, in order after
// the messages buffered, until the call commits; of the winner after. It
// always returns nil, as grpc-go's does.
func (s *stream) CloseSend() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	if !s.decided {
		s.closeBuffered = true
		s.signalLocked()
		if s.leading {
			s.closeFirst() // unlocks
			return nil
		}
		s.mu.Unlock()
		return nil
	}
	w := s.winner
	s.mu.Unlock()
	if w != nil && w.cs != nil && !w.ended {
		<-w.drained
		if !w.closeSent {
			return w.cs.CloseSend()
		}
	}
	return nil
}

// signalLocked wakes the attempts waiting for more to send, if any can
// be: a primary on the caller's goroutine has none until a hedge is due.
func (s *stream) signalLocked() {
	if s.more != nil {
		close(s.more)
		s.more = make(chan struct{})
	}
}
