package hedge_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tailcut/hedge"
	"github.com/tailcut/hedge/internal/lab"
)

// A timeline scripts one call: the policy and what each attempt does.
type timeline struct {
	delay   time.Duration
	max     int
	timeout time.Duration
	inline  bool // Policy.Inline
	steps   []script
}

type kind int

const (
	accept kind = iota
	retryable
	terminal
	panics
	failed // a failure that starts nothing at once (hedge.Failed)
)

type script struct {
	after  time.Duration
	kind   kind
	ignore bool // runs to the end even when cancelled
	// signals says the attempt reports its start (hedge.Started) start
	// after it began, which cancels the attempts that have not.
	signals bool
	start   time.Duration
}

// decodeTimeline turns fuzz bytes into a timeline.
func decodeTimeline(data []byte) timeline {
	at := func(i int) byte {
		if i < len(data) {
			return data[i]
		}
		return 0
	}
	tl := timeline{
		delay:   []time.Duration{0, 30 * ms, 100 * ms, -1}[at(0)%4],
		max:     1 + int(at(1)%4),
		timeout: []time.Duration{0, 150 * ms, 250 * ms, 400 * ms}[at(2)%4],
	}
	for k := range tl.max {
		a, b := at(3+2*k), at(4+2*k)
		k := kind(b % 4)
		if k == retryable && b&8 != 0 {
			k = failed
		}
		s := script{
			after:  time.Duration(1+int(a)%250) * ms,
			kind:   k,
			ignore: b&4 != 0,
		}
		if n := b >> 4; n > 0 {
			s.signals, s.start = true, s.after*time.Duration(n-1)/15
		}
		tl.steps = append(tl.steps, s)
	}
	return tl
}

// verdict is what a call did, as the model predicts it or as Do did it.
type verdict struct {
	At       time.Duration
	Winner   int    // the attempt whose value Do returned; -1: none
	Err      string // "", "busy", "deadline", "panic"
	Starts   []time.Duration
	Discards []int // attempts whose values went to Discard, sorted
}

// model is the reference: a discrete-event replay of the rules in Do's
// documentation, with none of its concurrency. ok is false when two events
// fall on the same instant, where the rules leave the order open.
//
// One such order the model plays either way: a start signal at the instant
// another attempt starts ties that attempt, and whether Do had called its
// fn by then is open. called says, by bit k for attempt k, that it had;
// open reports whether the timeline met such a tie, for which the caller
// tries every called.
func model(tl timeline, called uint) (v verdict, open, ok bool) {
	type event int
	const (
		hedgeDue event = iota
		deadline
		ends                                        // ends+k: attempt k ends
		signals  = ends + hedge.MaxAttemptsLimit    // signals+k: attempt k reports its start
		tiedEnds = signals + hedge.MaxAttemptsLimit // tiedEnds+k: tied attempt k, running on, ends
	)
	var (
		now      time.Duration
		starts   []time.Duration
		inflight = map[int]bool{}
		nextAt   = time.Duration(-1)
		ended    []int            // attempts that reached their own end before the decision
		began    = map[int]bool{} // attempts that reported their start
		tied     = map[int]bool{} // attempts a tie cancelled, that run on (ignore)
		kept     = -1             // the last retryable or failed attempt
		skipped  = map[int]bool{} // attempts tied as they started, whose fn Do never called
	)
	// A timed hedge needs half its delay left before the deadline; an
	// attempt owed to a retryable result only needs the deadline not to
	// have passed.
	worth := func(retry bool) bool {
		if tl.timeout == 0 {
			return true
		}
		left := tl.timeout - now
		return left > 0 && (retry || left >= tl.delay/2)
	}
	start := func() {
		starts = append(starts, now)
		inflight[len(starts)-1] = true
		nextAt = -1
		if len(starts) < tl.max && tl.delay >= 0 {
			nextAt = now + tl.delay
		}
	}
	tryStart := func(retry bool) bool {
		if len(starts) >= tl.max || !worth(retry) {
			return false
		}
		start()
		return true
	}
	decide := func(winner int, err string) verdict {
		var discards []int
		for k, s := range tl.steps {
			if k >= len(starts) || k == winner || skipped[k] || (s.kind != accept && s.kind != retryable && s.kind != failed) {
				continue
			}
			if slices.Contains(ended, k) || s.ignore {
				discards = append(discards, k)
			}
		}
		var ran []time.Duration // the starts of the attempts whose fn was called
		for k, at := range starts {
			if !skipped[k] {
				ran = append(ran, at)
			}
		}
		return verdict{At: now, Winner: winner, Err: err, Starts: ran, Discards: discards}
	}
	start()
	for {
		next, what, tie := time.Duration(-1), event(0), false
		consider := func(at time.Duration, e event) {
			switch {
			case at < 0:
			case next < 0 || at < next:
				next, what, tie = at, e, false
			case at == next:
				tie = true
			}
		}
		consider(nextAt, hedgeDue)
		if tl.timeout > 0 {
			consider(tl.timeout, deadline)
		}
		for k := range inflight {
			consider(starts[k]+tl.steps[k].after, ends+event(k))
			if tl.steps[k].signals && !began[k] {
				consider(starts[k]+tl.steps[k].start, signals+event(k))
			}
		}
		for k := range tied {
			consider(starts[k]+tl.steps[k].after, tiedEnds+event(k))
		}
		if tie {
			return verdict{}, open, false
		}
		now = next
		switch {
		case what == deadline:
			return decide(-1, "deadline"), open, true
		case what == hedgeDue:
			nextAt = -1
			// A tied attempt's hedge may be all that was left to come.
			if !tryStart(false) && len(inflight) == 0 && kept >= 0 {
				return decide(kept, ""), open, true
			}
			continue
		case what >= tiedEnds:
			// Out of the race; its value, if any, goes to Discard (decide
			// counts it, as it ignores its context). Its panic still ends
			// the call.
			k := int(what - tiedEnds)
			delete(tied, k)
			if tl.steps[k].kind == panics {
				return decide(-1, "panic"), open, true
			}
			continue
		case what >= signals:
			// Every attempt in flight that has not started is cancelled;
			// one that honours its context ends now without a value.
			k := int(what - signals)
			began[k] = true
			for j := range inflight {
				if began[j] {
					continue
				}
				delete(inflight, j)
				if starts[j] == now {
					open = true
					if called&(1<<j) == 0 {
						skipped[j] = true // cancelled before Do called fn
						continue
					}
				}
				if tl.steps[j].ignore {
					tied[j] = true
				}
			}
			continue
		}
		k := int(what - ends)
		delete(inflight, k)
		ended = append(ended, k)
		switch tl.steps[k].kind {
		case accept:
			return decide(k, ""), open, true
		case terminal:
			return decide(k, "busy"), open, true
		case panics:
			return decide(-1, "panic"), open, true
		}
		if k == len(starts)-1 {
			nextAt = -1
		}
		kept = k
		if tl.steps[k].kind == failed {
			if len(inflight) == 0 && (nextAt < 0 || len(starts) >= tl.max) {
				return decide(k, ""), open, true // the failed value, as fn returned it
			}
			continue
		}
		if !tryStart(true) && len(inflight) == 0 {
			return decide(k, ""), open, true // the retryable value, as fn returned it
		}
	}
}

type answer struct {
	attempt int
	kind    kind
}

// slowHooks is how long the policy's hooks take to answer: the budget's
// Allow for an extra attempt, the delay's Next for every attempt, and
// whether the budget's Done takes as long as Allow.
type slowHooks struct {
	grant, next time.Duration
	done        bool
}

// run plays tl through Do in a synctest bubble, with hooks that take as
// long as slow says. It also returns the attempts whose fn returned a
// value with a nil error.
func run(t *testing.T, tl timeline, slow slowHooks) (verdict, []int) {
	var got verdict
	var produced []int
	synctest.Test(t, func(t *testing.T) {
		var (
			mu       sync.Mutex
			t0       = time.Now()
			starts   []time.Duration
			discards []int
			permits  = &ledger{grants: hedge.MaxAttemptsLimit, wait: slow.grant, slowDone: slow.done}
		)
		var delay hedge.Delay = hedge.Fixed(tl.delay)
		if slow.next > 0 {
			delay = hedge.DelayFunc(func(context.Context, int) time.Duration {
				time.Sleep(slow.next) // the primary's too: it starts once Next answers
				return tl.delay
			})
		}
		p := hedge.Policy[answer]{
			Delay: delay, MaxAttempts: tl.max, Timeout: tl.timeout, Budget: permits, Inline: tl.inline,
			Classify: func(a answer, err error) hedge.Outcome {
				if err == nil && a.kind == retryable {
					return hedge.Retryable
				}
				if err == nil && a.kind == failed {
					return hedge.Failed
				}
				return hedge.Classify(a, err)
			},
			Discard: func(a answer) {
				mu.Lock()
				discards = append(discards, a.attempt)
				mu.Unlock()
			},
		}
		fn := func(ctx context.Context) (answer, error) {
			k := hedge.Attempt(ctx)
			mu.Lock()
			starts = append(starts, time.Since(t0))
			mu.Unlock()
			s := tl.steps[k]
			a := answer{k, s.kind}
			wait := func(d time.Duration) error {
				if s.ignore {
					time.Sleep(d)
					return nil
				}
				return lab.Wait(ctx, d)
			}
			queued := min(s.start, s.after) // FuzzDoSlowHooks shortens after
			if s.signals {
				if err := wait(queued); err != nil {
					return a, err
				}
				hedge.Started(ctx)
			} else {
				queued = 0
			}
			if err := wait(s.after - queued); err != nil {
				return a, err
			}
			switch s.kind {
			case terminal:
				return a, hedge.Permanent(errBusy)
			case panics:
				panic(k)
			}
			mu.Lock()
			produced = append(produced, k)
			mu.Unlock()
			return a, nil
		}
		func() {
			defer func() {
				if v := recover(); v != nil {
					if _, ok := v.(*hedge.PanicError); !ok {
						panic(v)
					}
					got.Err = "panic"
				}
			}()
			a, err := hedge.Do(t.Context(), p, fn)
			got.Winner = a.attempt
			switch {
			case err == nil:
			case errors.Is(err, errBusy):
				got.Err = "busy"
			case errors.Is(err, context.DeadlineExceeded):
				got.Err, got.Winner = "deadline", -1
			default:
				t.Fatalf("Do returned %v", err)
			}
		}()
		got.At = time.Since(t0)
		if got.Err == "panic" {
			got.Winner = -1
		}
		time.Sleep(time.Second) // every attempt has ended by now
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		got.Starts = starts
		slices.Sort(produced)
		slices.Sort(discards)
		got.Discards = discards
		permits.mu.Lock()
		defer permits.mu.Unlock()
		if permits.inflight != 0 {
			t.Errorf("%d budget permits outlive the call", permits.inflight)
		}
		// Every grant hears Done once: a started attempt's, or a granted
		// one's that the decision overtook (Done with Canceled).
		grants := countPrefix(permits.log, "call") + countPrefix(permits.log, "allow ")
		if dones := countPrefix(permits.log, "done "); dones != grants || grants < len(starts) {
			t.Errorf("budget heard Done %d times for %d grants and %d attempts", dones, grants, len(starts))
		}
	})
	return got, produced
}

func countPrefix(log []string, prefix string) int {
	n := 0
	for _, s := range log {
		if len(s) >= len(prefix) && s[:len(prefix)] == prefix {
			n++
		}
	}
	return n
}

func FuzzDo(f *testing.F) {
	for _, seed := range [][]byte{
		{2, 2, 0, 50, 0, 50, 0},           // fast primary
		{2, 2, 0, 250, 0, 50, 0},          // hedge wins
		{2, 3, 0, 30, 1, 200, 0, 98, 0},   // retryable shortcut
		{1, 3, 2, 200, 4, 200, 4, 200, 4}, // deadline, attempts ignore ctx
		{2, 2, 0, 250, 4, 50, 3},          // hedge panics
		{0, 4, 3, 30, 1, 20, 1, 10, 1, 5, 1},
		{3, 3, 1, 90, 1, 40, 2, 9, 0},
		{2, 2, 0, 30, 9, 50, 0},                        // failed, nothing else in flight: returned at once
		{1, 3, 0, 70, 9, 100, 0, 50, 0},                // failed while hedges run: they run on
		{1, 3, 0, 20, 9, 100, 9, 50, 0, 0, 0},          // failed before its hedge: no hedge, no retry
		{1, 2, 0, 200, 0, 100, 0x80, 50, 0},            // the first hedge starts: the primary and the second hedge are tied
		{1, 2, 0, 200, 4, 100, 0x80, 50, 0},            // the tied primary runs on: its value is discarded
		{1, 2, 0, 99, 7, 100, 0x80, 50, 0},             // the tied primary runs on and panics before the answer
		{1, 2, 0, 200, 0x10, 100, 0x80, 150, 1},        // the primary starts at once: the first hedge's start ties the second only
		{1, 3, 0, 99, 0x21, 90, 0x20, 80, 0x20, 70, 0}, // each attempt starts before the next comes: none is tied
		{1, 2, 0, 30, 0x31, 100, 0x80, 50, 0},          // the started primary fails: the hedge's start ties the retry
		{6, 2, 0, 250, 0, 50, 0},                       // inline: the hedge wins
		{6, 3, 0, 30, 1, 200, 0, 98, 0},                // inline: the retry runs on the caller's goroutine
		{5, 3, 2, 200, 4, 200, 4, 200, 4},              // inline: the deadline
		{6, 2, 0, 250, 4, 50, 3},                       // inline: the hedge panics
		{5, 2, 0, 200, 0, 100, 0x80, 50, 0},            // inline: the hedge's start ties the primary
		{0, 2, 2, 200, 0, 200, 0, 235, 0x10},           // three start at once and the last ties the others: whether their fn ran is open
		{0, 2, 2, 200, 4, 190, 4, 235, 0x10},           // as above, the tied ones run on if they ran: their values are discarded
		{0, 1, 0, 50, 7, 100, 0x10},                    // the primary, tied as it starts, panics if it ran
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tl := decodeTimeline(data)
		if len(data) > 0 && data[0]&4 != 0 {
			// The primary on the caller's goroutine, and every attempt
			// honouring its context, as Inline asks: Do keeps the
			// model's timeline all the same.
			tl.inline = true
			for k := range tl.steps {
				tl.steps[k].ignore = false
			}
		}
		want, open, ok := model(tl, 0)
		if !ok {
			t.Skip("two events at one instant: the order is open")
		}
		got, _ := run(t, tl, slowHooks{})
		if open && !cmp.Equal(want, got) {
			// A tie at the instant an attempt starts may come before or
			// after Do calls its fn: Do must play one of those orders.
			unsure := false
			for called := uint(1); called < 1<<tl.max; called++ {
				alt, _, ok := model(tl, called)
				if !ok {
					unsure = true // that order meets one the model leaves open
					continue
				}
				if cmp.Equal(alt, got) {
					want, unsure = alt, false
					break
				}
			}
			if unsure {
				t.Skip("two events at one instant: the order is open")
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("timeline %+v (-model +Do)\n%s", tl, diff)
		}
	})
}

// FuzzDoSlowHooks plays timelines through Do with a budget that takes a
// while to grant each extra attempt, and at times a delay as slow to say
// when the next one is due or a budget as slow to hear how an attempt
// ended, so that attempts answer while a claim is open: the window where a result owed a retry once hung Do. The
// model does not time claims, so the check is the rules that hold
// whatever the timing: Do returns, by the Timeout if there is one; every
// value fn returned with a nil error is returned or discarded, exactly
// once; and the budget hears Done once for every grant (run checks it).
func FuzzDoSlowHooks(f *testing.F) {
	for _, seed := range [][]byte{
		{49, 1, 1, 0, 40, 1, 0, 9}, // the primary ends retryable while the hedge's grant is open; the hedge fails at once
		{40, 1, 3, 2, 20, 1, 10, 9, 5, 0},
		{90, 0, 4, 3, 30, 1, 20, 1, 10, 1, 5, 1},
		{20, 2, 2, 0, 250, 0, 50, 0},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		slow := slowHooks{grant: time.Duration(1+int(data[0])%100) * ms}
		if data[0]&0x80 != 0 {
			slow.next = slow.grant
		}
		slow.done = data[0]&0x40 != 0
		tl := decodeTimeline(data[1:])
		for k := range tl.steps {
			tl.steps[k].after -= ms // answers at the instant they start, too
		}
		got, produced := run(t, tl, slow)
		if tl.timeout > 0 && got.At > tl.timeout {
			t.Errorf("timeline %+v, hooks %+v: Do returned at %v, after its Timeout", tl, slow, got.At)
		}
		want := produced
		if got.Err == "" {
			want = slices.DeleteFunc(slices.Clone(produced), func(k int) bool { return k == got.Winner })
			if len(want) == len(produced) {
				t.Errorf("timeline %+v, hooks %+v: Do returned attempt %d's value, which fn never returned", tl, slow, got.Winner)
			}
		}
		if !slices.Equal(got.Discards, want) {
			t.Errorf("timeline %+v, hooks %+v: discarded %v, want %v (produced %v, winner %d, err %q)",
				tl, slow, got.Discards, want, produced, got.Winner, got.Err)
		}
	})
}
