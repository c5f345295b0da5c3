package hedgegrpc

import "context"

// Method returns the full method name ("/package.Service/Method") of the
// hedged call that ctx belongs to, or "" outside one. ctx is the one the
// Config's Observer gets, or an attempt's, as interceptors chained after
// the Interceptor and stats handlers see it. gRPC puts the method in no
// client context, and an Observer hears a call after it returned, so
// this is how per-method metrics, delays and breakers find their key:
// hedgeotel.WithKey(hedgegrpc.Method), hedge.Keyed{Key: hedgegrpc.Method}.
func Method(ctx context.Context) string {
	if c, ok := ctx.(*callCtx); ok {
		return c.method
	}
	if c, ok := ctx.Value(methodCtxKey{}).(*callCtx); ok {
		return c.method
	}
	return ""
}

// callCtx is the context a hedged call runs under: the caller's, with the
// method in reach. It lives inside the call's allocation.
type callCtx struct {
	context.Context // the caller's
	method          string
	unary           *call // the call, if it is a unary one
}

type methodCtxKey struct{}

func (c *callCtx) Value(key any) any {
	if key == (methodCtxKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// AfterFunc lets the contexts derived from the call register on the
// caller's context by whatever means suits it, as if derived from it
// directly: without it, a caller's context of another package's making
// would cost a goroutine per link.
func (c *callCtx) AfterFunc(f func()) (stop func() bool) { return context.AfterFunc(c.Context, f) }
