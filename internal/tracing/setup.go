package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// ServiceNameDefault is the service.name of a riverbus command's spans
// when OTEL_SERVICE_NAME (or service.name in OTEL_RESOURCE_ATTRIBUTES)
// does not set one.
const ServiceNameDefault = "riverbus"

// Enabled reports whether the environment asks a riverbus command for
// traces, and why not when it does not: OTEL_SDK_DISABLED is not true,
// and OTEL_TRACES_EXPORTER is otlp, or unset with an OTLP endpoint
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) set.
// Any other exporter is an error. Unlike the OpenTelemetry default
// (otlp to localhost), nothing is exported unless asked for.
func Enabled() (bool, error) {
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return false, nil
	}
	switch exp := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return false, nil
	case "otlp":
	case "":
		if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return false, nil
		}
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: riverbus exports traces with otlp (or none)", exp)
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := strings.TrimSpace(os.Getenv(v)); p != "" {
			if p != "http/protobuf" {
				return false, fmt.Errorf("%s=%q: riverbus exports OTLP over http/protobuf", v, p)
			}
			break
		}
	}
	return true, nil
}

// Setup makes the tracer provider of a riverbus command from the
// environment (Enabled): spans go in batches to an OTLP/HTTP exporter
// that reads the standard OTEL_EXPORTER_OTLP_* variables, sampled by
// OTEL_TRACES_SAMPLER (parent-based, always on, by default), with the
// resource of OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES. It becomes
// the global provider, with the W3C trace context and baggage
// propagators. When tracing is not enabled it returns a nil provider and
// changes nothing.
//
// shutdown flushes the spans still buffered; call it before the process
// exits.
func Setup(ctx context.Context, logger *slog.Logger) (tp trace.TracerProvider, shutdown func(context.Context) error, err error) {
	noop := func(context.Context) error { return nil }
	on, err := Enabled()
	if err != nil || !on {
		return nil, noop, err
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, noop, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", ServiceNameDefault)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // last: OTEL_SERVICE_NAME wins
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, noop, fmt.Errorf("tracing: resource: %w", err)
	}
	provider := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(provider)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	if logger != nil {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			logger.Warn("tracing: export failed", "error", err)
		}))
	}
	return provider, provider.Shutdown, nil
}
