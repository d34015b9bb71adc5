package ui

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Server timeouts of Serve and ServeListener.
const (
	ReadHeaderTimeout = 10 * time.Second
	ReadTimeout       = 30 * time.Second
	WriteTimeout      = 60 * time.Second
	IdleTimeout       = 2 * time.Minute
	// ShutdownTimeout is how long requests in flight get to finish once the
	// context ends; connections still open after it are closed.
	ShutdownTimeout = 10 * time.Second
)

// ServeOpts are the optional settings of Serve and ServeListener.
type ServeOpts struct {
	// AllowedHosts are further Host header values the server answers to,
	// beside its own address (see Guard): the names of a reverse proxy in
	// front of it. "host" allows any port, "host:port" that one.
	AllowedHosts []string
	// Logger receives the server's logs. Nil means slog.Default().
	Logger *slog.Logger
}

// Serve listens on addr and serves h until ctx ends, then shuts the server
// down gracefully and returns nil. An address it cannot listen on is
// returned at once as an error naming the address. Every request passes
// Guard first: a web page cannot drive or read the server through the
// operator's browser.
func Serve(ctx context.Context, addr string, h http.Handler, opts ServeOpts) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	return ServeListener(ctx, ln, h, opts)
}

// ServeListener is Serve on a listener the caller opened, for example on
// 127.0.0.1:0 to learn the port first. It closes ln.
func ServeListener(ctx context.Context, ln net.Listener, h http.Handler, opts ServeOpts) error {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	guarded, err := Guard(h, ln.Addr(), opts.AllowedHosts, logger)
	if err != nil {
		ln.Close()
		return err
	}
	srv := &http.Server{
		Handler:           guarded,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	addr := ln.Addr().String()
	logger.Info("http server listening", "addr", addr)

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()

	select {
	case err := <-errc:
		return fmt.Errorf("serve on %s: %w", addr, err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
	defer cancel()
	err = srv.Shutdown(shutdownCtx)
	if errors.Is(err, context.DeadlineExceeded) {
		logger.Warn("http server: requests still running at shutdown deadline, closing them", "addr", addr)
		err = srv.Close()
	}
	if serveErr := <-errc; serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("serve on %s: %w", addr, serveErr)
	}
	if err != nil {
		return fmt.Errorf("shut down server on %s: %w", addr, err)
	}
	logger.Info("http server stopped", "addr", addr)
	return nil
}
