module github.com/tailcut/hedge/examples/backoff

go 1.26.0

require github.com/tailcut/hedge v0.0.0

require github.com/avast/retry-go/v4 v4.7.0

require go.yaml.in/yaml/v3 v3.0.6 // indirect

require (
	github.com/benbjohnson/clock v1.3.5 // indirect
	github.com/cenkalti/backoff/v5 v5.0.3
)

replace github.com/tailcut/hedge => ../..
