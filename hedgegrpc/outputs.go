package hedgegrpc

import (
	"context"
	"errors"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// outputs are the caller's call options that gRPC would otherwise apply
// once per attempt: each attempt collects into its own, and the winner's
// are copied to these once; OnFinish callbacks run once, with the call's
// result.
type outputs struct {
	headers, trailers []*metadata.MD
	peers             []*peer.Peer
	finish            []func(error)
}

// split returns opts less the options that must not run per attempt,
// and those apart (nil if there are none). The rest is opts itself when
// out is nil, and a copy otherwise: attempts that may run after the call
// returns, when the caller is free to reuse its slice, take a copy of
// their own (see own).
func split(opts []grpc.CallOption) (rest []grpc.CallOption, out *outputs) {
	i := 0
	for i < len(opts) && !perCall(opts[i]) {
		i++
	}
	if i == len(opts) {
		return opts, nil
	}
	rest = append([]grpc.CallOption(nil), opts[:i]...)
	out = &outputs{}
	for _, o := range opts[i:] {
		switch o := o.(type) {
		case grpc.HeaderCallOption:
			out.headers = append(out.headers, o.HeaderAddr)
		case *grpc.HeaderCallOption:
			out.headers = append(out.headers, o.HeaderAddr)
		case grpc.TrailerCallOption:
			out.trailers = append(out.trailers, o.TrailerAddr)
		case *grpc.TrailerCallOption:
			out.trailers = append(out.trailers, o.TrailerAddr)
		case grpc.PeerCallOption:
			out.peers = append(out.peers, o.PeerAddr)
		case *grpc.PeerCallOption:
			out.peers = append(out.peers, o.PeerAddr)
		case grpc.OnFinishCallOption:
			out.finish = append(out.finish, o.OnFinish)
		case *grpc.OnFinishCallOption:
			out.finish = append(out.finish, o.OnFinish)
		default:
			rest = append(rest, o)
		}
	}
	return rest, out
}

// own returns rest as split returned it with out, as a slice of the
// attempts' own.
func own(rest []grpc.CallOption, out *outputs) []grpc.CallOption {
	if out == nil {
		return slices.Clone(rest)
	}
	return rest
}

func perCall(o grpc.CallOption) bool {
	switch o.(type) {
	case grpc.HeaderCallOption, *grpc.HeaderCallOption,
		grpc.TrailerCallOption, *grpc.TrailerCallOption,
		grpc.PeerCallOption, *grpc.PeerCallOption,
		grpc.OnFinishCallOption, *grpc.OnFinishCallOption:
		return true
	}
	return false
}

// received is what one attempt collected for the caller's options: its
// own header, trailer and peer.
type received struct {
	header  metadata.MD // nil if the server sent none: the response was trailers-only
	trailer metadata.MD
	// peer is made only for a caller that asks for it (grpc.Peer), which
	// few do: its 48 bytes would otherwise be in every attempt, and in
	// every call, whose primary's is in the call's own allocation.
	peer *peer.Peer
}

// ask appends to opts the options that collect into r what the caller
// asked for; always the trailer when trailer is set, and the header when
// header is.
func (o *outputs) ask(opts []grpc.CallOption, r *received, trailer, header bool) []grpc.CallOption {
	if trailer || o != nil && len(o.trailers) > 0 {
		opts = append(opts, grpc.Trailer(&r.trailer))
	}
	if header || o != nil && len(o.headers) > 0 {
		opts = append(opts, grpc.Header(&r.header))
	}
	if o == nil {
		return opts
	}
	if len(o.peers) > 0 {
		r.peer = new(peer.Peer)
		opts = append(opts, grpc.Peer(r.peer))
	}
	return opts
}

// deliver copies the returned attempt's header, trailer and peer to the
// caller's options.
func (o *outputs) deliver(r *received) {
	for _, h := range o.headers {
		*h = r.header
	}
	for _, t := range o.trailers {
		*t = r.trailer
	}
	for _, p := range o.peers {
		*p = peer.Peer{}
		if r.peer != nil {
			*p = *r.peer
		}
	}
}

func codeOf(err error) codes.Code { return status.Code(err) }

// callError returns the call's error as grpc-go's own calls return it
// when the call's deadline passes or the caller gives up: contextError's
// status for the caller's context, or codes.DeadlineExceeded for the
// method's timeout, which hedge.Do keeps as the policy's Timeout and ends
// with context.DeadlineExceeded. It returns nil for any other error,
// which the call returns as it is.
func callError(ctx context.Context, err error) error {
	if cerr := contextError(ctx, err); cerr != nil {
		return cerr
	}
	if err == context.DeadlineExceeded {
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return nil
}

// contextError returns the call's error as grpc-go's own calls return it
// when the caller's context ends: a status with codes.DeadlineExceeded or
// codes.Canceled and the context's cause as its message. hedge.Do returns
// the cause as it is, or the failure of an attempt that the end of the
// context cut off, whichever it saw first: both mean the same. It returns
// nil for a server's own failure, or an error of another kind, which the
// call returns as it is.
func contextError(ctx context.Context, err error) error {
	ctxErr, cause := ctx.Err(), context.Cause(ctx)
	if ctxErr == nil {
		// The deadline may have passed with ctx's timer yet to fire: the
		// attempts' own timers for it can go off first.
		deadline, ok := ctx.Deadline()
		if !ok || time.Now().Before(deadline) {
			return nil
		}
		ctxErr, cause = context.DeadlineExceeded, context.DeadlineExceeded
	}
	switch st, isStatus := status.FromError(err); {
	case isStatus && st.Code() != codes.Canceled && st.Code() != codes.DeadlineExceeded:
		return nil
	case !isStatus && err != cause && !errors.Is(err, ctxErr):
		return nil
	}
	return status.Error(status.FromContextError(ctxErr).Code(), cause.Error())
}
