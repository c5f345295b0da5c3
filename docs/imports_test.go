package docs_test

// The packages a snippet may use without importing them. The snippet test
// reads this list, and imports into each snippet those of them that it
// names; the blank imports keep the modules in go.mod.
import (
	_ "context"
	_ "errors"
	_ "fmt"
	_ "io"
	_ "log"
	_ "net/http"
	_ "os"
	_ "testing"
	_ "testing/synctest"
	_ "time"

	_ "github.com/benbjohnson/clock"
	_ "github.com/cenkalti/backoff/v5"
	_ "github.com/failsafe-go/failsafe-go"
	_ "github.com/failsafe-go/failsafe-go/budget"
	_ "github.com/failsafe-go/failsafe-go/hedgepolicy"
	_ "github.com/failsafe-go/failsafe-go/retrypolicy"
	_ "go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	_ "go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	_ "go.opentelemetry.io/otel/sdk/metric"
	_ "google.golang.org/grpc"
	_ "google.golang.org/grpc/codes"
	_ "google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/status"

	_ "github.com/tailcut/hedge"
	_ "github.com/tailcut/hedge/admit"
	_ "github.com/tailcut/hedge/hedgegrpc"
	_ "github.com/tailcut/hedge/hedgehttp"
	_ "github.com/tailcut/hedge/hedgeotel"
	_ "github.com/tailcut/hedge/hedgeotel/hedgeotelgrpc"
)
