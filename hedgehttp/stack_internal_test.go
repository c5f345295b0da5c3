package hedgehttp

import "testing"

// The level rises once attempts whose stacks moved outnumber those whose
// did not by stackVotes, one level at a time up to maxStackLevel, and
// never for the odd attempt that grows its stack on any Base.
func TestStackLevelVotes(t *testing.T) {
	vote := func(tr *Transport, n int, moved bool) {
		for range n {
			tr.sent(tr.stackLevel.Load(), moved)
		}
	}
	tests := []struct {
		name  string
		votes func(*Transport)
		want  int32
	}{
		{"no moves", func(tr *Transport) { vote(tr, 1000, false) }, 0},
		{"one short of a level", func(tr *Transport) { vote(tr, stackVotes-1, true) }, 0},
		{"a level", func(tr *Transport) { vote(tr, stackVotes, true) }, 1},
		{"one move in thirty", func(tr *Transport) {
			for range 1000 {
				vote(tr, 29, false)
				vote(tr, 1, true)
			}
		}, 0},
		{"moves outnumber the rest", func(tr *Transport) {
			for range stackVotes {
				vote(tr, 1, true)
				vote(tr, 1, true)
				vote(tr, 1, false)
			}
		}, 1},
		{"two levels", func(tr *Transport) { vote(tr, 2*stackVotes, true) }, 2},
		{"at most maxStackLevel", func(tr *Transport) { vote(tr, 100*stackVotes, true) }, maxStackLevel},
		{"votes at a level left behind", func(tr *Transport) {
			vote(tr, stackVotes, true)
			for range 100 * stackVotes {
				tr.sent(0, true) // attempts that started before the rise
			}
		}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := &Transport{}
			tt.votes(tr)
			if got := tr.stackLevel.Load(); got != tt.want {
				t.Errorf("level %d, want %d", got, tt.want)
			}
		})
	}
}

// After growStack, a goroutine's stack holds as much as its level
// promises without moving again: half of it in frames below the caller.
func TestGrowStack(t *testing.T) {
	for level := int32(1); level <= maxStackLevel; level++ {
		moved := make(chan bool)
		go func() {
			growStack(level)
			mark := stackMark()
			useStack((2 << level) * 2) // 512-byte frames: half of 4 << level KiB
			moved <- stackMark() != mark
		}()
		if <-moved {
			t.Errorf("level %d: the stack moved after growStack", level)
		}
	}
}

// useStack takes n frames of 512 bytes.
//
//go:noinline
func useStack(n int) byte {
	var frame [512]byte
	if n <= 1 {
		return frame[0]
	}
	return useStack(n-1) + frame[n%len(frame)]
}
