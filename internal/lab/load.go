package lab

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Load is a queueing upstream under open-loop load, for RunLoad: Replicas
// servers of Workers workers, each server with one FIFO queue; calls
// arrive as a Poisson process at utilisation Rho. Every field's zero value
// is a documented default, so Load{Rho: 0.9} is a complete scenario. A
// Load is a plain value, safe to copy and share.
type Load struct {
	// Rho is the utilisation that primaries alone impose: calls arrive at
	// Rho × Replicas × Workers / the mean service time. In (0, 2].
	Rho float64
	// Replicas and Workers shape the cluster. 0 means 4 each.
	Replicas, Workers int
	// Service draws a request's service time. The zero value means
	// FastSlow.
	Service Upstream
	// Cancel says what an attempt's cancellation does to its request.
	// The zero value is CancelRunning.
	Cancel Cancel
	// Correlated makes the service time belong to the request: every
	// attempt of call i takes the time its primary draws (plus a
	// nanosecond per attempt, so that two never tie), so a slow request
	// is slow on every replica and a hedge cannot beat it.
	Correlated bool
	// Brownout slows one replica for a period. The zero value is none.
	Brownout Brownout
	// Overload raises the arrival rate for a period. The zero value is
	// none.
	Overload Overload
	// Shift moves the whole distribution of service times from a call on.
	// The zero value is none.
	Shift Shift
	// Shed, when set, makes each replica refuse a hedge (never a primary)
	// that arrives while all its workers are busy and at least ShedQueue
	// requests wait: the hedge fails at once with a retryable error and
	// no value.
	Shed      bool
	ShedQueue int
	// Tie and Admit are the servers' side of tied hedges: a start signal,
	// and primaries before hedges in a bounded queue. Their zero values
	// are servers that send no signal and keep one FIFO queue.
	Tie   Tie
	Admit Admit
	// Warm calls run before the measured ones; 0 means 2000, about what a
	// learned delay needs before its estimate settles. Calls are measured;
	// 0 means 5000. Block is the size of the blocks of measured calls that
	// LoadRow.Blocks reports; 0 means 1000.
	Warm, Calls, Block int
	// Seed varies the draws: arrivals, routing and service times. Seed 0
	// draws service times as Upstream.Latency does.
	Seed uint64

	mean time.Duration // of Service, once withDefaults has worked it out
}

// Cancel is what a cancelled attempt does to its request at the replica.
// A request still in the queue always leaves it. The zero value is
// CancelRunning.
type Cancel int

const (
	// CancelRunning frees the worker of a running request at once.
	CancelRunning Cancel = iota
	// CancelQueued lets a running request run to completion: the worker
	// stays busy, though the attempt returns at once with ctx's error.
	CancelQueued
)

// String names the mode as tables print it.
func (c Cancel) String() string {
	switch c {
	case CancelRunning:
		return "cancel running"
	case CancelQueued:
		return "cancel queued only"
	}
	return fmt.Sprintf("Cancel(%d)", int(c))
}

// Period is the calls [From, To), by arrival order: something lasts while
// they arrive. The zero value is empty. Like every part of a Load, it is
// a plain value.
type Period struct{ From, To int }

func (p Period) holds(i int) bool { return p.From <= i && i < p.To }

// Brownout multiplies the service time of requests that start on replica
// Replica by Factor while the calls of Period arrive. A zero Factor means
// none.
type Brownout struct {
	Replica int
	Factor  float64
	Period
}

// Overload makes the calls of Period arrive at utilisation Rho instead of
// Load.Rho: above 1, queues grow until it ends. A zero Rho means none.
type Overload struct {
	Rho float64
	Period
}

// Shift multiplies the service time of every attempt of the calls from
// From on by Factor: the whole distribution moves, as when an upstream
// ships a slower build or its data grows, and stays moved. Calls keep
// arriving at the rate Load.Rho set, so a Factor above 1 also raises the
// utilisation to Factor × Rho. A zero Factor means none.
type Shift struct {
	Factor float64
	From   int
}

// errBadLoad is wrapped by RunLoad's complaint about a Load it cannot run.
var errBadLoad = errors.New("lab: bad Load")

// withDefaults returns l with its defaults applied, or an error wrapping
// errBadLoad.
func (l Load) withDefaults() (Load, error) {
	if l.Replicas == 0 {
		l.Replicas = 4
	}
	if l.Workers == 0 {
		l.Workers = 4
	}
	if l.Service.Draw == nil {
		l.Service = FastSlow
	}
	if l.Warm == 0 {
		l.Warm = 2000
	}
	if l.Calls == 0 {
		l.Calls = 5000
	}
	if l.Block == 0 {
		l.Block = 1000
	}
	bad := func(format string, args ...any) (Load, error) {
		return l, fmt.Errorf("%w: "+format, append([]any{errBadLoad}, args...)...)
	}
	switch {
	case !(l.Rho > 0 && l.Rho <= 2):
		return bad("Rho %v is outside (0, 2]", l.Rho)
	case l.Replicas < 0 || l.Workers < 0:
		return bad("negative Replicas %d or Workers %d", l.Replicas, l.Workers)
	case l.Cancel != CancelRunning && l.Cancel != CancelQueued:
		return bad("unknown %v", l.Cancel)
	case l.ShedQueue < 0:
		return bad("negative ShedQueue %d", l.ShedQueue)
	case l.Warm < 0 || l.Calls < 0 || l.Block < 0:
		return bad("negative Warm %d, Calls %d or Block %d", l.Warm, l.Calls, l.Block)
	case l.Brownout.Factor != 0 && !(l.Brownout.Factor > 0 && l.Brownout.Factor <= 1000):
		return bad("Brownout.Factor %v is outside (0, 1000]", l.Brownout.Factor)
	case l.Brownout.Factor != 0 && (l.Brownout.Replica < 0 || l.Brownout.Replica >= l.Replicas):
		return bad("Brownout.Replica %d is not one of %d replicas", l.Brownout.Replica, l.Replicas)
	case l.Overload.Rho != 0 && !(l.Overload.Rho > 0 && l.Overload.Rho <= 2):
		return bad("Overload.Rho %v is outside (0, 2]", l.Overload.Rho)
	case l.Shift.Factor != 0 && !(l.Shift.Factor > 0 && l.Shift.Factor <= 1000):
		return bad("Shift.Factor %v is outside (0, 1000]", l.Shift.Factor)
	case l.Shift.From < 0:
		return bad("negative Shift.From %d", l.Shift.From)
	case l.checkTie() != "":
		return bad("%s", l.checkTie())
	}
	l.mean = l.meanService()
	return l, nil
}

// meanService is the mean of l.Service: exact for FastSlow, else the mean
// of 100,000 draws, which withDefaults draws once.
func (l Load) meanService() time.Duration {
	switch {
	case l.mean != 0:
		return l.mean
	case l.Service.Name == FastSlow.Name:
		// 90% uniform on [20ms, 45ms), 10% on [450ms, 600ms), in whole
		// nanoseconds.
		fast := 20*time.Millisecond + (25*time.Millisecond-1)/2
		slow := 450*time.Millisecond + (150*time.Millisecond-1)/2
		return time.Duration(math.Round(0.9*float64(fast) + 0.1*float64(slow)))
	}
	const n = 100_000
	var sum float64
	for i := range n {
		sum += float64(l.Service.Latency(i, 0))
	}
	return time.Duration(sum / n)
}

// key names l as a map key, its Service by Name.
func (l Load) key() string {
	name := l.Service.Name
	l.Service = Upstream{}
	return fmt.Sprintf("%q %+v", name, l)
}
