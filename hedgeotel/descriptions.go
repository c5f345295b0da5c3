package hedgeotel

// The instruments' descriptions, which Prometheus shows as their HELP.
const (
	descDuration = "How long hedged calls took until they were decided (the answer taken, " +
		"the deadline passed or the caller gave up), every attempt included."
	descHedges = "Attempts after the primary in each call that started one, hedges and " +
		"retries after retryable results alike: a call without one is not recorded, as in gRFC A96."
	descFired = "How long after the attempt before it each hedge started: the delay it fired at. " +
		"Retries, started at once when the attempt before them ended retryable, are not recorded."
	descAttempt = "How long the attempts of hedged calls that returned an accepted answer ran: " +
		"the winner until its answer, each loser until the call was decided and cancelled it."
	descAttempts = "Attempts started, primaries included: over the calls, the load hedging multiplies the upstream's by."
	descHedged   = "Calls that started more than one attempt."
	descRetries  = "Attempts after the primary started at once because an attempt before them ended retryable: retries, not hedges."
	descWins     = "Calls that returned an accepted answer, by the attempt that gave it (hedge.winner, 0 for the primary)."
	descRefusals = "Attempts after the primary that the budget refused."
	descSkips    = "Attempts after the primary not started because too little of the deadline was left for them to help."
	descPanics   = "Calls in which an attempt or a hook panicked or called runtime.Goexit, re-raised in the caller."
	descOpens    = "Times a hedge.Breaker opened and stopped a key's hedges."
	descDelay    = "The delay a learned delay source hedges at now; no point while it sends no hedge."
	descCeiling  = "The most a learned delay source may hedge at (its Ceiling): hedge.delay at it is pinned."
)
