package webhook

import (
	"fmt"

	"github.com/riverbus/riverbus/workers"
)

// Bind binds the webhook delivery of pool cfg.Pool to ws, as
// workers.Add binds a Go handler: a riverbus.Client started with ws
// in Config.Workers works the pool's River queue and POSTs each job to
// cfg.URL. opts.MaxWorkers bounds the deliveries in flight in the process.
// Each delivered event is upcast to the version ws's handlers know of its
// type (ws.Upcast, ws.UpcastEvent), with the upcasters ws holds when the
// job runs; its "version" says which.
func Bind(ws *workers.Registry, cfg Config, opts *workers.AddOpts) error {
	w, err := newWorker(cfg)
	if err != nil {
		return fmt.Errorf("bind webhook of pool %q: %w", cfg.Pool, err)
	}
	w.versions = ws
	return workers.AddArgsSafely(ws, poolArgs{kind: cfg.Pool}, w, opts)
}
