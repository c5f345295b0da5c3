package hedgehttp

import (
	"fmt"
	"maps"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/tailcut/hedge"
)

// route is what the requests of one route share: their delay, their
// budget and their counts.
type route struct {
	name    string
	delay   hedge.Delay     // nil when the Transport's Delay serves every route
	learned *hedge.Adaptive // the route's own plan and bound: nil when Delay is set
	budget  hedge.Budget    // what bounds its extra attempts; nil: nothing
	stats   hedge.Stats
}

// hostKey names a method-and-host route without building its name: the
// lookup on every request must not allocate.
type hostKey struct{ method, host string }

// routes finds the route of a request. Patterns are fixed when the
// Transport starts; method-and-host routes are added as they are met, up
// to max, into a map that is copied on write, so that finding one takes
// no lock.
type routes struct {
	mux       *http.ServeMux // nil: no patterns
	patterns  map[string]*route
	own       bool               // each route gets its own Adaptive, as its delay and budget
	maxHedges int                // the own Adaptives' MaxHedges
	shared    hedge.Budget       // the Transport's Budget, nil if none
	opened    func(route string) // hears when an own Adaptive's breaker opens; nil: nothing does
	max       int

	mu    sync.Mutex // serialises additions to hosts
	hosts atomic.Pointer[map[hostKey]*route]
	other *route
}

const otherRoute = "(other)"

func newRoutes(patterns []string, max int, own bool, hedges int, shared hedge.Budget, opened func(route string)) (*routes, error) {
	if max == 0 {
		max = 64
	}
	rs := &routes{own: own, maxHedges: hedges, shared: shared, opened: opened, max: max}
	rs.hosts.Store(&map[hostKey]*route{})
	rs.other = rs.newRoute(otherRoute)
	if max < 0 {
		return rs, fmt.Errorf("%w: Transport.MaxRoutes %d is negative", hedge.ErrInvalidPolicy, max)
	}
	if len(patterns) == 0 {
		return rs, nil
	}
	rs.mux = http.NewServeMux()
	rs.patterns = make(map[string]*route, len(patterns))
	for i, p := range patterns {
		if err := register(rs.mux, i, p); err != nil {
			return rs, err
		}
		rs.patterns[p] = rs.newRoute(p)
	}
	return rs, nil
}

// register adds Routes[i], pattern, to mux, which panics on one it
// rejects.
func register(mux *http.ServeMux, i int, pattern string) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%w: Transport.Routes[%d] %q: %v", hedge.ErrInvalidPolicy, i, pattern, v)
		}
	}()
	mux.Handle(pattern, http.NotFoundHandler())
	return nil
}

func (rs *routes) newRoute(name string) *route {
	r := &route{name: name, budget: rs.shared}
	if rs.own {
		r.learned = &hedge.Adaptive{MaxHedges: rs.maxHedges, OnOpen: rs.onOpen(name)}
		r.delay = r.learned
		r.budget = r.learned
		if rs.shared != nil {
			r.budget = hedge.AllOf(r.learned, rs.shared)
		}
	}
	return r
}

// onOpen is the OnOpen of the Adaptive of the route name. That Adaptive
// has one key, "", so the route's name comes from here.
func (rs *routes) onOpen(name string) func(key string) {
	opened := rs.opened
	if opened == nil {
		return nil
	}
	return func(string) { opened(name) }
}

func (rs *routes) of(req *http.Request) *route {
	if rs.mux != nil {
		if r := rs.match(req); r != nil {
			return r
		}
	}
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	k := hostKey{method, req.URL.Host}
	hosts := *rs.hosts.Load()
	if r, ok := hosts[k]; ok {
		return r
	}
	if len(hosts) >= rs.max {
		return rs.other // without the lock: past the bound, every new host comes here
	}
	return rs.add(k)
}

// match finds the pattern req matches, as a server would route it.
func (rs *routes) match(req *http.Request) *route {
	if req.Host == "" {
		// A client request may leave Host to the URL; a server reads it
		// from there.
		r := *req
		r.Host = req.URL.Host
		req = &r
	}
	_, pattern := rs.mux.Handler(req)
	return rs.patterns[pattern]
}

func (rs *routes) add(k hostKey) *route {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	old := *rs.hosts.Load()
	if r, ok := old[k]; ok {
		return r
	}
	if len(old) >= rs.max {
		return rs.other
	}
	hosts := maps.Clone(old)
	r := rs.newRoute(k.method + " " + k.host)
	hosts[k] = r
	rs.hosts.Store(&hosts)
	return r
}

func (rs *routes) snapshot() map[string]hedge.Snapshot {
	s := map[string]hedge.Snapshot{}
	add := func(r *route) {
		if snap := r.stats.Snapshot(); snap.Calls > 0 {
			s[r.name] = snap
		}
	}
	for _, r := range *rs.hosts.Load() {
		add(r)
	}
	for _, r := range rs.patterns {
		add(r)
	}
	add(rs.other)
	return s
}

// each calls f with every route that has a delay of its own, patterns
// first, the shared "(other)" route last, until f returns false.
func (rs *routes) each(f func(r *route) bool) {
	for _, r := range rs.patterns {
		if !f(r) {
			return
		}
	}
	for _, r := range *rs.hosts.Load() {
		if !f(r) {
			return
		}
	}
	f(rs.other)
}
