package webhook

import (
	"fmt"

	"github.com/riverbus/riverbus"
)

// Bind binds the webhook delivery of pool cfg.Pool to ws, as
// riverbus.AddWorker binds a Go handler: a riverbus.Client started with ws
// in Config.Workers works the pool's River queue and POSTs each job to
// cfg.URL. opts.MaxWorkers bounds the deliveries in flight in the process.
func Bind(ws *riverbus.Workers, cfg Config, opts *riverbus.WorkerOpts) error {
	w, err := newWorker(cfg)
	if err != nil {
		return fmt.Errorf("bind webhook of pool %q: %w", cfg.Pool, err)
	}
	return riverbus.AddWorkerArgsSafely(ws, poolArgs{kind: cfg.Pool}, w, opts)
}
