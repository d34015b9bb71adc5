package cli

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/riverbus/riverbus/workers"
	"github.com/riverbus/riverbus/workers/webhook"
)

func (a *app) workCommand() *cobra.Command {
	var (
		pool, url, urlEnv, secretEnv string
		concurrency                  int
		timeout                      time.Duration
	)
	cmd := &cobra.Command{
		Use:   "work --pool NAME (--webhook URL | --webhook-env VAR)",
		Short: "Work a pool's jobs by POSTing each event to an HTTP endpoint (handlers in any language)",
		Long: `Runs River workers for one pool that deliver each job's event envelope as a
JSON POST to --webhook. A 2xx response completes the job; any other status, a
timeout or a refused connection is an error, retried on the pool's retry
schedule (pool create|update --retry-*; a Retry-After header is obeyed up to
--retry-max-delay) and, after the pool's max attempts, the job becomes a dead
letter.

Every request carries Idempotency-Key and Webhook-Id (the event id),
Webhook-Timestamp, and, with --secret-env, Webhook-Signature: "v1,"
followed by the base64 HMAC-SHA256 of "<id>.<timestamp>.<body>" under the
secret (the Standard Webhooks scheme). Key-ordered pools stay in order: the
next event of a key is sent only after the previous one was acknowledged.
Run as many as you like; they share the pool's jobs.

A URL that holds credentials (a password, a token in the query) is better
given with --webhook-env: an argument is visible to every local user (ps)
and kept in shell history. Output, logs and job errors show the URL with
its password and query values masked.`,
		Example: `  WEBHOOK_SECRET=... riverbus work --pool billing --webhook https://billing.internal/events --secret-env WEBHOOK_SECRET --concurrency 20`,
		Args:    exactArgs(0, "no arguments (use flags)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if concurrency < 1 || concurrency > 10_000 {
				return &usageError{cmd: cmd, err: fmt.Errorf("--concurrency must be between 1 and 10000, got %d", concurrency)}
			}
			if urlEnv != "" {
				var err error
				if url, err = webhookURLFromEnv(urlEnv); err != nil {
					return err
				}
			}
			var secret []byte
			if secretEnv != "" {
				var err error
				if secret, err = webhook.SecretFromEnv(secretEnv); err != nil {
					return err
				}
			}
			if err := a.serveProcessMetrics(ctx); err != nil {
				return err
			}
			ws := workers.NewRegistry()
			if err := webhook.Bind(ws, webhook.Config{Pool: pool, URL: url, Secret: secret, Timeout: timeout, Logger: a.logger},
				&workers.AddOpts{MaxWorkers: concurrency}); err != nil {
				return &usageError{cmd: cmd, err: err}
			}
			u, err := a.requireURL()
			if err != nil {
				return err
			}
			// Every delivery holds a connection while it reads its events
			// from the log (seconds, for a big event), and River's fetch,
			// completer and leader need theirs beside them, so the pool
			// follows the deliveries in flight rather than a fixed 10.
			// Bounded, as most deliveries wait on HTTP, not on the database.
			db, err := a.connectRetryingConns(ctx, u, "riverbus work", int32(max(10, min(concurrency+5, 50))))
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			defer db.Close()
			if err := requireSchema(ctx, db, u); err != nil {
				return err
			}
			flush, err := a.startTracing(ctx)
			if err != nil {
				return err
			}
			defer flush()
			a.processName = "riverbus work --pool " + pool
			client, err := a.newClient(db, ws, true)
			if err != nil {
				return err
			}
			p, err := client.PoolGet(ctx, pool)
			if err != nil {
				return err
			}
			if err := client.Start(ctx); err != nil {
				return fmt.Errorf("start workers: %w", err)
			}
			fmt.Fprintf(a.stdout, "delivering pool %s (queue %s) to %s with %d workers; Ctrl-C stops\n", p.Name, p.Queue, webhook.Redact(url), concurrency)
			stopped := waitClient(ctx, client)
			stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := client.Stop(stopCtx); err != nil {
				a.logger.Warn("stopping: deliveries still in flight were cancelled", "error", err)
			}
			return stopped
		},
	}
	f := cmd.Flags()
	f.StringVar(&pool, "pool", "", "pool whose jobs to deliver (required)")
	f.StringVar(&url, "webhook", "", "http(s) URL that receives each event as a JSON POST (this or --webhook-env)")
	f.StringVar(&urlEnv, "webhook-env", "", "name of the environment variable holding the --webhook URL, which keeps its credentials out of argument lists")
	f.StringVar(&secretEnv, "secret-env", "", "name of the environment variable holding the signing secret")
	f.IntVar(&concurrency, "concurrency", 10, "deliveries in flight at once in this process")
	f.DurationVar(&timeout, "timeout", webhook.TimeoutDefault, "bound on one delivery")
	a.jobRetentionFlags(cmd)
	a.fetchFlags(cmd)
	a.processMetricsFlags(cmd)
	_ = cmd.MarkFlagRequired("pool")
	cmd.MarkFlagsOneRequired("webhook", "webhook-env")
	cmd.MarkFlagsMutuallyExclusive("webhook", "webhook-env")
	return cmd
}

// webhookURLFromEnv reads work's webhook URL from the environment
// variable name.
func webhookURLFromEnv(name string) (string, error) {
	v, ok := os.LookupEnv(name)
	switch {
	case !ok:
		return "", fmt.Errorf("--webhook-env: environment variable %s is not set", name)
	case strings.TrimSpace(v) == "":
		return "", fmt.Errorf("--webhook-env: environment variable %s is empty", name)
	}
	return strings.TrimSpace(v), nil
}
