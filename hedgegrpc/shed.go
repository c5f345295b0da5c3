package hedgegrpc

import (
	"context"
	"strconv"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// shedPushback is the grpc-retry-pushback-ms of a shed attempt. A6 reads
// a negative value as "no more attempts for this call": the client sends
// no further hedge, and the attempts in flight, the primary among them,
// run on.
const shedPushback = "-1"

// Shedder holds a pair of gRPC server interceptors that shed hedges
// first. It counts the calls in flight in the handlers it guards. An
// attempt after the first, a call whose grpc-previous-rpc-attempts holds
// a number of 1 or more, goes through only while fewer than Limit are in
// flight; otherwise it fails at once with codes.Unavailable and
// grpc-retry-pushback-ms -1 in its trailer, without reaching the handler.
// A first attempt (no grpc-previous-rpc-attempts, or 0) always goes
// through, and counts. So hedges run only on capacity the primaries
// leave free, and a saturated server spends nothing on them.
//
//	shed := &hedgegrpc.Shedder{Limit: 64}
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(shed.Unary),
//		grpc.ChainStreamInterceptor(shed.Stream),
//	)
//
// What a hedging client does with a shed hedge, as gRFC A6 has it and
// Interceptor does: the pushback of -1 stops the call's hedging, and the
// attempts in flight run on, so the primary still answers the call. That
// holds only if UNAVAILABLE is among the method's nonFatalStatusCodes: a
// fatal code ends the call and cancels the other attempts, whatever the
// pushback says. With retryThrottling, each shed hedge drains a token,
// which stops hedging across calls while the server stays saturated.
//
// grpc-go sets grpc-previous-rpc-attempts on the retries of a
// retryPolicy too, and the Shedder sheds them alike: grpc-go reads the
// pushback as "no more retries", and the call ends with UNAVAILABLE. A
// retry follows a failure, so it is often its call's only attempt in
// flight; a method whose retries must be served should not be guarded.
// The Shedder never sheds a first attempt.
//
// The cost: an atomic add as a call enters and another as it leaves (a
// hedge enters with a compare-and-swap), and no lock. A shed hedge costs
// the server a status and a trailer, and the client a round trip. What
// shedding gives up is the chance that a hedge sent to a saturated
// server would have won: it would have taken a slot from another
// primary to do so. A Shedder limits hedges only: first attempts past
// Limit are the job of a limiter or a queue in front of it. The rule is
// hedgehttp.Shedder's, whose doc gives what it buys under overload.
//
// The zero value sheds every hedge. A Shedder is safe for concurrent use.
// Set Limit before it serves; it must not be copied after.
type Shedder struct {
	// Limit is how many calls may be in flight before hedges are shed: a
	// hedge goes through only while fewer are. Set it to what the service
	// can serve at once without queueing. Zero or less sheds every hedge.
	// Unary calls and streams count alike.
	Limit int

	inflight atomic.Int64
	shed     atomic.Uint64
}

// Unary is a grpc.UnaryServerInterceptor that passes a call to handler,
// or sheds it: see Shedder.
func (s *Shedder) Unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !s.enter(ctx) {
		grpc.SetTrailer(ctx, metadata.Pairs(pushbackKey, shedPushback))
		return nil, errShed()
	}
	// A deferred release holds through a panic in the handler and
	// through runtime.Goexit.
	defer s.inflight.Add(-1)
	return handler(ctx, req)
}

// Stream is a grpc.StreamServerInterceptor that passes a stream to
// handler, or sheds it: see Shedder. A stream counts as in flight until
// its handler returns.
func (s *Shedder) Stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if !s.enter(ss.Context()) {
		ss.SetTrailer(metadata.Pairs(pushbackKey, shedPushback))
		return errShed()
	}
	defer s.inflight.Add(-1)
	return handler(srv, ss)
}

// InFlight returns how many calls are in the guarded handlers now.
func (s *Shedder) InFlight() int { return int(s.inflight.Load()) }

// Shed returns how many hedges the Shedder has failed with UNAVAILABLE.
func (s *Shedder) Shed() uint64 { return s.shed.Load() }

// enter takes a place in flight for the call of ctx, or reports that the
// call is a hedge to shed.
func (s *Shedder) enter(ctx context.Context) bool {
	if !isHedge(ctx) {
		s.inflight.Add(1)
		return true
	}
	// A compare-and-swap rather than an add and an undo: a hedge that
	// loses never shows in the count, so it cannot make a concurrent one
	// look over the limit.
	limit := int64(s.Limit)
	for {
		n := s.inflight.Load()
		if n >= limit {
			s.shed.Add(1)
			return false
		}
		if s.inflight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// isHedge reports whether ctx's call says it follows an earlier attempt.
// A value that is not a decimal number counts as a first attempt.
func isHedge(ctx context.Context) bool {
	v := metadata.ValueFromIncomingContext(ctx, previousAttemptsKey)
	if len(v) == 0 || v[0] == "" || v[0] == "0" {
		return false
	}
	k, err := strconv.ParseUint(v[0], 10, 64)
	return err == nil && k > 0
}

func errShed() error {
	return status.Error(codes.Unavailable, "hedgegrpc: hedge shed: the server is saturated")
}
