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
//	hedge.call.hedges            histogram      hedge.key
//	hedge.attempt.delay          histogram, s   hedge.key
//	hedge.attempt.duration       histogram, s   hedge.key, hedge.role
//	hedge.call.attempts          counter        hedge.key
//	hedge.call.hedged            counter        hedge.key
//	hedge.call.retries           counter        hedge.key
//	hedge.call.wins              counter        hedge.key, hedge.winner
//	hedge.call.budget_refusals   counter        hedge.key
//	hedge.call.deadline_skips    counter        hedge.key
//	hedge.call.panics            counter        hedge.key
//	hedge.breaker.opens          counter        hedge.key
//	hedge.delay                  gauge, s       hedge.key
//	hedge.delay.ceiling          gauge, s       hedge.key
//
// The duration histogram counts the calls, with the explicit buckets of
// gRFC A66, in seconds. Over them, hedge.call.attempts is what hedging
// costs upstream (attempts per call, 1 without hedging), and
// hedge.call.hedged the share of calls that hedged. hedge.call.hedges is
// gRFC A96's grpc.client.call.hedges: for each call that hedged, the
// attempts after the primary. Of those, hedge.call.retries counts the
// retries, started at once because the attempt before them ended
// retryable (hedge.Report.Retry); the others are hedges, and
// hedge.attempt.delay is how long after the attempt before it each hedge
// started, the delay it fired at; hedge.attempt.duration how long the
// winner and the losers of a hedged call ran. hedge.call.wins counts the calls that returned an accepted
// answer, by the attempt that gave it: the win rate is the wins with
// hedge.winner ≥ 1 over hedge.call.hedged. hedge.delay shows where
// learned delays stand, against their hedge.delay.ceiling, and
// hedge.breaker.opens when a breaker switched a route's hedging off.
// Every counter of a key is reported from the key's first call, at 0 until
// it counts something, so that a rate sees its first increase.
//
// Every attribute has few values: hedge.key is the route or method that
// a Key function names (past MaxKeys of them, OverflowKey), hedge.outcome
// is one of accept, retryable, terminal, failed and canceled,
// hedge.winner an attempt number below hedge.MaxAttemptsLimit, hedge.role
// winner or loser. Attribute sets are made once per key, and a call that
// did not hedge costs one histogram measurement and a few atomic adds,
// read by observable counters at collection: observing a call allocates
// nothing.
//
// Traces come from the spans that otelhttp and otelgrpc already make for
// every attempt: AttemptTransport (for HTTP) and the hedgeotelgrpc
// package's StatsHandler (for gRPC) add hedge.attempt to each, with
// http.request.resend_count or gRFC A72's previous-rpc-attempts, and mark
// the attempts that lost the race with hedge.superseded=true and a
// status that is not Error: a loser is cancelled by design, not failed.
// The MeterProvider of AttemptMeterProvider does the same for the metrics
// of otelhttp and otelgrpc, where a loser would otherwise carry an
// error.type.
package hedgeotel
