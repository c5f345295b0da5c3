package hedgegrpc

import "google.golang.org/grpc"

// DefaultMaxRetryRPCBufferSize is what a call may buffer of the messages
// it sent, when it has no grpc.MaxRetryRPCBufferSize option: 256 KiB,
// grpc-go's own default for its retries. A unary request larger than the
// limit is sent once, not hedged; a hedged stream commits when its buffer
// outgrows it.
const DefaultMaxRetryRPCBufferSize = 256 << 10

// frameHeader is the gRPC length prefix of a message on the wire: grpc-go
// counts it against the buffer limit, and so does a hedged call.
const frameHeader = 5

// bufferLimit returns the last grpc.MaxRetryRPCBufferSize of opts, as
// grpc-go applies it, or the default.
func bufferLimit(opts []grpc.CallOption) int {
	limit := DefaultMaxRetryRPCBufferSize
	for _, o := range opts {
		switch o := o.(type) {
		case grpc.MaxRetryRPCBufferSizeCallOption:
			limit = o.MaxRetryRPCBufferSize
		case *grpc.MaxRetryRPCBufferSizeCallOption:
			limit = o.MaxRetryRPCBufferSize
		}
	}
	return limit
}
