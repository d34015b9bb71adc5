// Package ui serves River UI, embedded from riverqueue.com/riverui (which
// ships its built front end), for `riverbus ui` and `riverbus run`.
//
// # Handler
//
// NewHandler builds an http.Handler that serves River UI's pages and its
// JSON API under Opts.Prefix. It talks to the database through an
// insert-only River client: it works no jobs. Start it before serving (River
// UI caches counts in the background) and Stop it when done.
//
// Every pool is a River job kind, so River UI lists, filters, retries and
// cancels the pools' jobs as it does any other job.
//
// # The riverbus page
//
// Beside River UI, the Handler serves a page of riverbus's own at PagePath
// (/riverbus/): the horizon, its gaps and skipped ranges, late events, and
// per pool its condition (riverbus.PoolCondition), lag in events and time,
// cursor, checkpoint and the job holding it, dead letters and retry
// schedule, read from riverbus.Status (Opts.StatusFunc). It is rendered by
// html/template, refreshes its live part every PageRefreshInterval with a
// small embedded script (no build step), links every job and queue it
// names to River UI's pages, and sends a Content-Security-Policy that lets
// only its own script run. River UI's HTML documents get a fixed link to it
// before </body> (its prebuilt front end has no place for one).
//
// # Authentication
//
// With Opts.User and Opts.Password set, every path, the API and the
// riverbus page included, requires HTTP basic auth with those credentials. CheckBind refuses to
// serve a non-loopback address without them: River UI can cancel, retry and
// delete jobs, so it must not be open to the network.
//
// # Serving
//
// Serve and ServeListener run an http.Server with timeouts until the context
// ends, then shut it down gracefully. Every request passes Guard first:
// even on loopback, any web page the operator's browser opens can send
// requests to the server, so requests for another Host (DNS rebinding) and
// state-changing requests from another origin (CSRF) are refused.
package ui
