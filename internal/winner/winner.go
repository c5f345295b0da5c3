// Package winner lets this repository's adapters end the context of a
// hedged call's winning attempt once the caller is done with the value
// tied to it (hedgehttp: when the caller closes the response body), so
// that nothing of the call is retained until its deadline.
package winner

import "context"

// Release ends ctx, if it is the context package hedge gave the winning
// attempt of a call, with context.Canceled; otherwise it does nothing.
// Package hedge sets it when it is initialised.
var Release = func(ctx context.Context) {}
