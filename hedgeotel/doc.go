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
//	hedge.call.duration          histogram, s      hedge.key, hedge.outcome
//	hedge.call.attempts          histogram         hedge.key, hedge.outcome
//	hedge.call.hedges            counter           hedge.key
//	hedge.call.wins              counter           hedge.key, hedge.winner
//	hedge.call.budget_refusals   counter           hedge.key
//	hedge.call.deadline_skips    counter           hedge.key
//	hedge.delay                  gauge, s          hedge.key
//	hedge.breaker.opens          counter           hedge.key
//
// hedge.call.attempts is what a call cost upstream (its mean is the
// amplification), hedge.call.hedges the extra attempts (gRFC A96 counts
// them as grpc.client.call.retries), and hedge.call.wins the calls that
// returned an accepted answer, by the attempt that gave it: the win rate
// is wins with hedge.winner ≥ 1 over calls with more than one attempt.
// Durations are in seconds, with the explicit buckets of gRFC A66.
//
// Every attribute has few values: hedge.key is the route or method that
// a Key function names (past MaxKeys of them, "other"), hedge.outcome is
// one of accept, retryable, terminal and canceled, hedge.winner an
// attempt number below hedge.MaxAttemptsLimit. Attribute sets are made
// once per key, so observing a call allocates nothing.
//
// Traces come from the spans that otelhttp and otelgrpc already make for
// every attempt: AttemptTransport (for HTTP) and the hedgeotelgrpc
// package's StatsHandler (for gRPC) add hedge.attempt to each, and mark
// the attempts that lost the race with hedge.superseded=true and a
// status that is not Error: a loser is cancelled by design, not failed.
package hedgeotel
