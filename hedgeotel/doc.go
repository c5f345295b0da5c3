// Package hedgeotel turns hedged calls into OpenTelemetry metrics and
// trace data, so that hedging can stay on in production with its effect
// in sight: how often it fires, how often the hedge wins, what it costs
// upstream, which route misbehaves, when it switched itself off.
//
// Metrics come from an Observer, which hears the hedge.Report of every
// call. Attach it to a Policy, a hedgehttp.Transport or a hedgegrpc.Config:
//
//	obs, err := hedgeotel.New(hedgeotel.WithKey(hedgehttp.Route))
//	policy := hedge.Policy[T]{Observer: obs}
//	client := &http.Client{Transport: &hedgehttp.Transport{Observer: obs}}
//	in, err := hedgegrpc.New(hedgegrpc.Config{Observer: obs, Methods: ...})
//
// It records, under the meter "github.com/tailcut/hedge/hedgeotel":
//
//	hedge.call.duration          histogram, s   hedge.key, hedge.outcome
//	hedge.call.attempts          counter        hedge.key
//	hedge.call.hedges            counter        hedge.key
//	hedge.call.hedged            counter        hedge.key
//	hedge.call.wins              counter        hedge.key, hedge.winner
//	hedge.call.budget_refusals   counter        hedge.key
//	hedge.call.deadline_skips    counter        hedge.key
//	hedge.breaker.opens          counter        hedge.key
//	hedge.delay                  gauge, s       hedge.key
//
// The duration histogram counts the calls, with the explicit buckets of
// gRFC A66, in seconds. Over them, hedge.call.attempts is what hedging
// costs upstream (attempts per call, 1 without hedging), hedge.call.hedged
// the share of calls that hedged, and hedge.call.hedges the attempts
// after the primary (gRFC A96 counts them as grpc.client.call.retries).
// hedge.call.wins counts the calls that returned an accepted answer, by
// the attempt that gave it: the win rate is the wins with hedge.winner ≥ 1
// over hedge.call.hedged. hedge.delay shows where learned delays stand,
// and hedge.breaker.opens when a breaker switched a route's hedging off.
//
// Every attribute has few values: hedge.key is the route or method that
// a Key function names (past MaxKeys of them, "other"), hedge.outcome is
// one of accept, retryable, terminal and canceled, hedge.winner an
// attempt number below hedge.MaxAttemptsLimit. Attribute sets are made
// once per key, and a call costs one histogram measurement and a few
// atomic adds, read by observable counters at collection: observing a
// call allocates nothing and takes about 160ns with the SDK.
//
// Traces come from the spans that otelhttp and otelgrpc already make for
// every attempt: AttemptTransport (for HTTP) and the hedgeotelgrpc
// package's StatsHandler (for gRPC) add hedge.attempt to each, and mark
// the attempts that lost the race with hedge.superseded=true and a
// status that is not Error: a loser is cancelled by design, not failed.
package hedgeotel
