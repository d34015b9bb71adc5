package riverbus

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"

	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/health"
	"github.com/riverbus/riverbus/internal/retention"
	"github.com/riverbus/riverbus/workers"
)

// CheckpointIntervalDefault is how often a Client advances the pools'
// checkpoints by default.
const CheckpointIntervalDefault = 250 * time.Millisecond

// Config configures a Client. Zero fields take their defaults; NewClient
// copies it.
type Config struct {
	// Fanout configures the horizon and the fan-out this Client runs. Its
	// Gate is ignored: the fan-out shares the Client's own, so that it
	// stops with the Client's other parts.
	Fanout fanout.Config

	// FanoutDisabled makes Start run no horizon, fan-out or maintenance:
	// only the workers. Other processes must then run the fan-out.
	FanoutDisabled bool

	// CheckpointInterval is how often the pools' checkpoints advance.
	// Zero: CheckpointIntervalDefault. Ignored with FanoutDisabled.
	CheckpointInterval time.Duration

	// Retention configures the service that applies the event retention
	// policy (docs/operations.md, "Event retention") in this Client. Ignored with
	// FanoutDisabled.
	Retention RetentionConfig

	// Workers holds the handlers bound to pools (workers.Add) and the
	// upcasters of their event types (Registry.Upcast; Start refuses a
	// chain with a gap). Nil: Start runs no River workers.
	Workers *workers.Registry

	// Work holds the River settings of the workers (fetch cooldown,
	// timeouts, dead-letter retention). Zero fields get riverbus's defaults
	// (see workers.Config).
	Work workers.Config

	// Logger receives the Client's logs. Nil: slog.Default(). River's own
	// logs go to Work.Logger.
	Logger *slog.Logger

	// schemaCode is the schema version the Client's code knows; zero
	// means this build's (migrations.Newest). Tests play a newer build
	// with it.
	schemaCode int

	// ReportInterval is how often a started Client writes its process
	// report: that it runs, its worker slots per queue, and the operations
	// that failed recently (a horizon round, a pool's batch, River's
	// completer, ...), which Status reads (Status.Processes) from any
	// process. Zero: ReportIntervalDefault. -1: no report; Status does not
	// list this process.
	ReportInterval time.Duration

	// ProcessName is how Status names this process ("riverbus work --pool
	// billing"). Empty: the program's name.
	ProcessName string
}

// ReportIntervalDefault is how often a started Client writes its process
// report by default.
const ReportIntervalDefault = health.ReportIntervalDefault

// RetentionIntervalDefault is how often a Client applies the event
// retention policy by default.
const RetentionIntervalDefault = retention.IntervalDefault

// RetentionConfig configures the retention service a Client runs beside
// the fan-out. It deletes nothing until an operator sets a policy
// (Client.RetentionSet, `riverbus retention set`); any number of Clients
// may run it.
type RetentionConfig struct {
	// Interval is how often the policy is applied. Zero:
	// RetentionIntervalDefault. -1: this Client does not run the service
	// (another process, or `riverbus retention --apply` from cron, does).
	Interval time.Duration
	// BatchSize is the most events one transaction deletes. Zero:
	// retention's default (5,000).
	BatchSize int
}

func (c *Config) withDefaults() (Config, error) {
	out := Config{}
	if c != nil {
		out = *c
	}
	out.CheckpointInterval = cmp.Or(out.CheckpointInterval, CheckpointIntervalDefault)
	if out.CheckpointInterval < 0 {
		return out, fmt.Errorf("CheckpointInterval must be positive, got %s", out.CheckpointInterval)
	}
	if out.Retention.Interval < -1 {
		return out, fmt.Errorf("Retention.Interval must be positive or -1 (not run), got %s", out.Retention.Interval)
	}
	if out.ReportInterval < -1 {
		return out, fmt.Errorf("ReportInterval must be positive or -1 (no report), got %s", out.ReportInterval)
	}
	out.ReportInterval = cmp.Or(out.ReportInterval, ReportIntervalDefault)
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	if out.Fanout.Logger == nil {
		out.Fanout.Logger = out.Logger
	}
	return out, nil
}
