package hedgegrpc

import (
	"context"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tailcut/hedge/admit"
)

// Admission holds a pair of gRPC server interceptors that admit calls
// to their handlers through an admit.Gate, so that a busy server serves
// primaries before hedges and tells its clients when a call starts. A
// call waits in the Gate's queue for a place among the Gate's Limit; a
// waiting primary goes before any hedge (a call whose
// grpc-previous-rpc-attempts holds 1 or more, as Shedder tells them).
// A hedge that the Gate turns away (admit.ErrShed: its queue full, its
// wait too long to be of use, or its place taken by a primary) fails at
// once with codes.Unavailable and grpc-retry-pushback-ms -1 in its
// trailer, without reaching the handler: the client sends no further
// hedge for the call, and the attempts in flight run on (see Shedder).
// A primary the Gate turns away (admit.ErrFull) fails with
// codes.Unavailable and no pushback. A call whose client
// leaves while it waits leaves the queue and never reaches the handler.
// grpc-go's retries carry grpc-previous-rpc-attempts too: Admission
// treats them as hedges, as Shedder does.
//
//	adm := &hedgegrpc.Admission{Gate: &admit.Gate{Limit: 64}}
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(adm.Unary),
//		grpc.ChainStreamInterceptor(adm.Stream),
//	)
//
// When a call leaves the queue, and before the handler runs, Admission
// sends its response headers at once, with StartedKey, if the client
// asked (TieKey, with any value, which an Interceptor sets on the
// attempts of a hedged call). The client then cancels the attempts of
// the same call that have not started: they wait in a queue, here or at
// another replica, and leave it without running (see Interceptor.Unary). Since
// gRPC sends a call's headers once, a handler of such a call cannot set
// header metadata of its own (grpc.SetHeader fails): trailers
// (grpc.SetTrailer) still reach the client. Metadata set by interceptors
// chained before Admission goes out with the signal. A client that does
// not ask gets its headers as without Admission.
//
// What the signal costs the server: a headers frame, flushed at once, for
// each call that asks for it; a call that finds a free place does not
// wait.
//
// The zero value admits through a Gate of its own, admit.Gate's zero
// value, which limits nothing and still signals starts: set a Gate with
// a Limit for the queue to form at the Admission, where primaries go
// first and hedges are tied and turned away. An Admission is safe for
// concurrent use. Set its Gate before it serves; it must not be copied
// after.
type Admission struct {
	// Gate admits the calls. Nil means a Gate of the Admission's own; set
	// one to share a limit with other servers, such as a
	// hedgehttp.Admission in the same process.
	Gate *admit.Gate

	once       sync.Once
	gate       *admit.Gate
	own        admit.Gate
	turnedAway atomic.Uint64
}

// startedValue is StartedKey's value in every start signal, shared:
// grpc-go only reads it. The map around it is a call's own, since
// grpc-go keeps it as the stream's header.
var startedValue = []string{"1"}[:1:1]

func startedHeader() metadata.MD { return metadata.MD{StartedKey: startedValue} }

// Unary is a grpc.UnaryServerInterceptor that admits a call through the
// Gate, signals its start if its client asked, and passes it to handler:
// see Admission.
func (a *Admission) Unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	hedged := isHedge(ctx)
	pass, err := a.enter(ctx, hedged)
	if err != nil {
		if hedged {
			grpc.SetTrailer(ctx, metadata.Pairs(pushbackKey, shedPushback))
		}
		return nil, err
	}
	// A deferred Leave holds through a panic in the handler and through
	// runtime.Goexit.
	defer pass.Leave()
	if asksStart(ctx) {
		grpc.SendHeader(ctx, startedHeader()) // fails only once the stream is done: the handler will see it
	}
	return handler(ctx, req)
}

// Stream is a grpc.StreamServerInterceptor that admits a stream through
// the Gate, signals its start if its client asked, and passes it to
// handler: see Admission. A stream holds its place until its handler
// returns.
func (a *Admission) Stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx := ss.Context()
	hedged := isHedge(ctx)
	pass, err := a.enter(ctx, hedged)
	if err != nil {
		if hedged {
			ss.SetTrailer(metadata.Pairs(pushbackKey, shedPushback))
		}
		return err
	}
	defer pass.Leave()
	if asksStart(ctx) {
		ss.SendHeader(startedHeader())
	}
	return handler(srv, ss)
}

// TurnedAway returns how many calls the Gate has turned away, each
// failed with codes.Unavailable. Calls whose clients left while they
// waited are not counted.
func (a *Admission) TurnedAway() uint64 { return a.turnedAway.Load() }

// enter waits for the Gate to admit the call of ctx, and returns its
// Pass, or the status the call fails with: codes.Unavailable when the
// Gate turned it away (admit.ErrShed, admit.ErrFull), the context's code
// when its client left first.
func (a *Admission) enter(ctx context.Context, hedged bool) (admit.Pass, error) {
	a.once.Do(a.init)
	pass, err := a.gate.Enter(ctx, hedged)
	switch {
	case err == nil:
		return pass, nil
	case ctx.Err() != nil:
		return admit.Pass{}, status.FromContextError(ctx.Err()).Err()
	}
	a.turnedAway.Add(1)
	if hedged {
		return admit.Pass{}, status.Error(codes.Unavailable, "hedgegrpc: hedge shed: "+err.Error())
	}
	return admit.Pass{}, status.Error(codes.Unavailable, "hedgegrpc: call turned away: "+err.Error())
}

func (a *Admission) init() {
	a.gate = a.Gate
	if a.gate == nil {
		a.gate = &a.own
	}
}

// asksStart reports whether the client of ctx's call asked for the
// start signal: TieKey, with any value, as hedgehttp's Admission takes
// TieHeader.
func asksStart(ctx context.Context) bool {
	return len(metadata.ValueFromIncomingContext(ctx, TieKey)) > 0
}
