// Package docs holds no code of its own: its tests check the project's
// Markdown. Every ```go snippet in README.md, BENCHMARKS.md and docs/*.md
// must type-check against the current API, and every relative link in them
// must name a file (and heading) that exists. It is a module of its own so
// that the snippets may use grpc-go, OpenTelemetry and the retry libraries
// they show without the core's go.mod requiring any of them.
package docs
