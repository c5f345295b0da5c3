package hedgehttp

import "unsafe"

// A hedge runs on a goroutine of its own, which hedge.Do starts for it,
// and so does the primary when Delay or Budget is set (see run). Its
// stack starts small: 2 KiB, unless the runtime has seen bigger
// ones in the program. A real http.Transport needs about 8 KiB, so the
// stack grows in the middle of its round trip, where the runtime copies
// it with every frame beneath, each of which it must look up: 2.6 µs of a
// request's 40 over net.Pipe (BENCHMARKS.md). Grown at the attempt's
// start instead, before Base is called, the copy is of a few small
// frames, and costs 1.5.
//
// Base may need no more than the first stack (a RoundTripper that answers
// from memory) or more than 8 KiB, so the Transport learns how much from
// its attempts. Each one notes whether its stack moved while Base ran;
// once the moves outnumber the attempts that did not by stackVotes, the
// attempts after them grow their stacks one level further first. A few
// attempts grow their stacks on any Base (a rare path, a collection at
// the wrong time): those never add up to a level, which would cost every
// attempt a copy. A level is never lowered: a Base that needed the stack
// will again.
const (
	// maxStackLevel grows an attempt's stack to 32 KiB at most: deeper
	// than that, a copy at the top saves too little to spend the memory
	// on every attempt.
	maxStackLevel = 3
	stackVotes    = 16
)

// growStack grows the calling goroutine's stack to 4 << level KiB (level
// 1 to maxStackLevel), if it is smaller: a frame of half that makes the
// runtime grow it in one copy. On a stack big enough it costs a call and
// the zeroing of its frame. It is small enough to be inlined, so that no
// frame of its own is among those the copy adjusts.
func growStack(level int32) {
	growers[min(level, maxStackLevel)](0)
}

// growers grow a stack to 8, 16 and 32 KiB, at their level.
var growers = [maxStackLevel + 1]func(int) byte{nil, grow8KiB, grow16KiB, grow32KiB}

// The index is a parameter so that the compiler keeps the whole frame.

//go:noinline
func grow8KiB(i int) byte {
	var frame [4 << 10]byte
	return frame[i]
}

//go:noinline
func grow16KiB(i int) byte {
	var frame [8 << 10]byte
	return frame[i]
}

//go:noinline
func grow32KiB(i int) byte {
	var frame [16 << 10]byte
	return frame[i]
}

// stackMark returns an address in its own frame. Called twice from one
// frame, it answers the same unless the goroutine's stack moved between
// the calls: it grew (or the collector shrank it).
//
//go:noinline
func stackMark() uintptr {
	var b byte
	return uintptr(unsafe.Pointer(&b))
}

// sent counts the vote of an attempt that grew its stack to level first
// (0: not at all), moved if its stack moved while Base ran. Votes cast at
// a level the Transport has left behind do not count.
func (t *Transport) sent(level int32, moved bool) {
	switch {
	case level != t.stackLevel.Load():
	case !moved:
		if t.stackVotes.Load() > 0 {
			t.stackVotes.Add(-1)
		}
	case level < maxStackLevel && t.stackVotes.Add(1) >= stackVotes:
		if t.stackLevel.CompareAndSwap(level, level+1) {
			t.stackVotes.Store(0)
		}
	}
}
