package cli

import (
	"context"
	"time"

	"github.com/riverbus/riverbus/internal/tracing"
)

// tracingFlushTimeout bounds the flush of the spans still buffered when a
// command ends.
const tracingFlushTimeout = 5 * time.Second

// startTracing turns tracing on for a command that runs the fan-out or
// workers when the standard OTEL_* variables ask for it (tracing.Setup):
// newClient then gives the fan-out and the workers the tracer provider.
// The function it returns flushes the spans still buffered; call it when
// the command ends.
func (a *app) startTracing(ctx context.Context) (func(), error) {
	tp, shutdown, err := tracing.Setup(ctx, a.logger)
	if err != nil {
		return func() {}, err
	}
	if tp == nil {
		return func() {}, nil
	}
	a.tracerProvider = tp
	a.logger.Info("tracing: exporting spans over OTLP/HTTP (OTEL_EXPORTER_OTLP_* variables)")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), tracingFlushTimeout)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			a.logger.Warn("tracing: flushing the last spans failed", "error", err)
		}
	}, nil
}
