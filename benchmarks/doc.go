// Package benchmarks measures hedge beside its peers, failsafe-go's hedge
// policy and cristalhq/hedgedhttp, doing identical work in one run. It is
// a module of its own so that the peers never enter the core's
// dependencies. See BENCHMARKS.md for the figures and the command.
package benchmarks
