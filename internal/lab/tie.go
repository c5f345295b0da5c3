package lab

import (
	"fmt"
	"time"
)

// Tie is the start signal of tied hedges, as a Load's servers send it.
// When On, a replica reports each attempt whose request a worker takes
// to Do, through hedge.Started, Signal later (about one round trip: the
// signal's way back to the client and the cancellation's way to the
// other replicas). Do then cancels each other attempt of the call that
// has not reported a start of its own: one still queued leaves its queue
// and cost nothing; one that started meanwhile, its own signal still on
// its way, is cancelled as Load.Cancel says. An attempt that has reported
// its start is never cancelled by a tie, and hedges still start at their
// delays. RunPlan plays the same for its fixed plans. The zero Tie is
// off: servers that send no signal. It is a plain value.
type Tie struct {
	On     bool
	Signal time.Duration
}

// Admit is the admission in front of each replica's workers, as
// admit.Gate implements it. When On, a freed worker takes the oldest
// waiting primary, and the oldest waiting hedge only when no primary
// waits. When all workers are busy and Queue requests already wait (0: no
// bound), an arriving hedge is turned away at once, and an arriving
// primary takes the place of the hedge that has waited longest; a hedge
// is also turned away once it has waited HedgeWait (0: no limit). A hedge
// turned away fails with a retryable error and no value, as a shed one
// does, and counts in LoadRow.Shed. Unlike a Gate, the lab's queue holds
// any number of primaries: none is ever turned away. The zero Admit is
// off: one FIFO queue per replica. It is a plain value.
type Admit struct {
	On        bool
	Queue     int
	HedgeWait time.Duration
}

// signalAfter is how long the start signal of attempt k takes: Signal,
// and a nanosecond per attempt. Two attempts of a call that start at one
// instant (two workers freed by one event) must not report at one
// instant, or which one a tie keeps would be up to the scheduler: the
// earlier attempt's signal arrives first.
func (t Tie) signalAfter(k int) time.Duration { return t.Signal + time.Duration(k) }

// String names the servers' side of ties as a scenario does.
func (t Tie) String() string {
	if !t.On {
		return "untied"
	}
	if t.Signal == 0 {
		return "tied"
	}
	return fmt.Sprintf("tied, signal after %v", t.Signal)
}

// String names the admission as a scenario does.
func (a Admit) String() string {
	if !a.On {
		return "FIFO"
	}
	s := "primaries first"
	if a.Queue > 0 {
		s += fmt.Sprintf(", queue %d", a.Queue)
	}
	if a.HedgeWait > 0 {
		s += fmt.Sprintf(", hedges wait %v", a.HedgeWait)
	}
	return s
}

// checkTie returns what is wrong with l's Tie and Admit, or "".
func (l Load) checkTie() string {
	switch {
	case l.Tie.Signal < 0:
		return fmt.Sprintf("negative Tie.Signal %v", l.Tie.Signal)
	case l.Tie.Signal != 0 && !l.Tie.On:
		return "Tie.Signal without Tie.On"
	case l.Admit.Queue < 0 || l.Admit.HedgeWait < 0:
		return fmt.Sprintf("negative Admit.Queue %d or Admit.HedgeWait %v", l.Admit.Queue, l.Admit.HedgeWait)
	case (l.Admit.Queue != 0 || l.Admit.HedgeWait != 0) && !l.Admit.On:
		return "Admit.Queue or Admit.HedgeWait without Admit.On"
	}
	return ""
}
