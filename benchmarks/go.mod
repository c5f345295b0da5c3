module github.com/tailcut/hedge/benchmarks

go 1.26

require (
	github.com/DataDog/sketches-go v1.4.8
	github.com/cristalhq/hedgedhttp v0.9.2
	github.com/failsafe-go/failsafe-go v0.9.8
	github.com/tailcut/hedge v0.0.0
)

require (
	github.com/benbjohnson/clock v1.3.5 // indirect
	github.com/bits-and-blooms/bitset v1.24.4 // indirect
	google.golang.org/protobuf v1.36.11 // indirect
)

replace github.com/tailcut/hedge => ../
