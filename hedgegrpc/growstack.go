package hedgegrpc

// growStack grows the calling goroutine's stack to 8 KiB at once, and
// returns 0. hedge.Do runs each attempt in a goroutine of its own, whose
// stack starts at 2 KiB, and grpc-go's unary path needs between 4 and
// 8 KiB: grown on demand, the stack doubled twice deep inside grpc-go,
// each time copying every frame, which came to a tenth of a hedged
// call's CPU time over TCP loopback. A 4 KiB frame on a 2 KiB stack makes
// the runtime double it until the frame fits: one copy, of the few frames
// beneath the caller. On a stack already big enough it costs a call and
// the zeroing of its frame. Every goroutine of this package that calls
// into grpc-go (an attempt, a stream's sender and header watcher) or runs
// hedge.Do for a stream calls it first: a copy costs about as much per
// frame copied as for the bytes, and deep in grpc-go there are many.
//
// The index is a parameter so that the compiler keeps the whole frame.
//
//go:noinline
func growStack(i int) byte {
	var frame [4 << 10]byte
	return frame[i]
}
