package ui

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"riverqueue.com/riverui"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/workers"
)

// PrefixDefault is the default of Opts.Prefix: River UI at the root.
const PrefixDefault = "/"

// Realm is the basic-auth realm the handler announces.
const Realm = "riverbus"

// Opts are the optional settings of NewHandler.
type Opts struct {
	// User and Password, when both are set, make every request need HTTP
	// basic auth with these credentials. Both empty: no authentication (see
	// CheckBind). Setting only one is an error.
	User     string
	Password string
	// Prefix is the path River UI is mounted at, such as "/riverui". Empty
	// means PrefixDefault. The handler expects the full request path, prefix
	// included: mount it at the root of a server or on a mux at Prefix+"/"
	// without http.StripPrefix.
	Prefix string
	// Logger receives River UI's logs. Nil means slog.Default().
	Logger *slog.Logger
	// StatusFunc reads the snapshot the riverbus page at PagePath shows:
	// a riverbus.Client's Status. Nil means the Status of an operator
	// client over db (one that runs nothing).
	StatusFunc func(context.Context) (*riverbus.Status, error)
}

// Handler serves River UI and its API, and the riverbus page at PagePath. It is an http.Handler; call Start
// before serving and Stop when done.
type Handler struct {
	ui   *riverui.Handler
	next http.Handler

	mu     sync.Mutex
	cancel context.CancelFunc
}

// NewHandler returns a Handler for the River jobs in db. It checks that db
// holds River's tables (run `riverbus migrate` first) and uses ctx only for
// that check. It returns an error when only one of opts.User and
// opts.Password is set.
func NewHandler(ctx context.Context, db *pgxpool.Pool, opts Opts) (*Handler, error) {
	if db == nil {
		return nil, errors.New("ui.NewHandler: db is nil")
	}
	if (opts.User == "") != (opts.Password == "") {
		return nil, errors.New("ui.NewHandler: User and Password must be set together")
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	prefix := opts.Prefix
	if prefix == "" {
		prefix = PrefixDefault
	}
	if p := riverui.NormalizePathPrefix(prefix) + "/"; strings.HasPrefix(p, PagePath) {
		return nil, fmt.Errorf("ui.NewHandler: Prefix %q is taken by the riverbus page (%s)", prefix, PagePath)
	}
	statusFunc := opts.StatusFunc
	if statusFunc == nil {
		operator, err := riverbus.NewClient(db, &riverbus.Config{FanoutDisabled: true, Logger: logger})
		if err != nil {
			return nil, fmt.Errorf("riverbus page: %w", err)
		}
		statusFunc = operator.Status
	}

	var migrated bool
	if err := db.QueryRow(ctx, sqlRiverTablesExist).Scan(&migrated); err != nil {
		return nil, fmt.Errorf("check River tables: %w", err)
	}
	if !migrated {
		return nil, errors.New("the database has no River tables: run `riverbus migrate` first")
	}

	// Insert-only: no queues, no workers. River UI uses it to read, cancel,
	// retry and delete jobs.
	client, err := river.NewClient(workers.NewDriver(db, logger), &river.Config{Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	uh, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints(client, nil),
		Logger:    logger,
		Prefix:    prefix,
	})
	if err != nil {
		return nil, fmt.Errorf("river ui: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle(PagePath, newPage(statusFunc, prefix, logger))
	mux.Handle("/", withPageLink(uh))
	h := &Handler{ui: uh, next: mux}
	if opts.User != "" {
		h.next = BasicAuth(mux, opts.User, opts.Password)
	}
	return h, nil
}

// ServeHTTP serves River UI or the riverbus page, after checking the credentials when
// authentication is on.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.next.ServeHTTP(w, r)
}

// Start starts River UI's background services (a cache of job counts). It
// does not listen on any address; see Serve. They stop when ctx ends or Stop
// is called. Starting a started Handler does nothing.
func (h *Handler) Start(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cancel != nil {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	if err := h.ui.Start(ctx); err != nil {
		cancel()
		return fmt.Errorf("start river ui: %w", err)
	}
	h.cancel = cancel
	return nil
}

// Stop stops the background services started by Start. It does not wait for
// requests in flight; shut down the http.Server first (Serve does). Stopping
// a Handler that is not started does nothing.
func (h *Handler) Stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cancel != nil {
		h.cancel()
		h.cancel = nil
	}
}

// BasicAuth wraps next so that every request needs HTTP basic auth with user
// and password. Others get 401 Unauthorized with a WWW-Authenticate header.
// The comparison takes the same time whatever the credentials sent.
func BasicAuth(next http.Handler, user, password string) http.Handler {
	wantUser := sha256.Sum256([]byte(user))
	wantPassword := sha256.Sum256([]byte(password))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotUser, gotPassword, ok := r.BasicAuth()
		// Hash first so the comparison does not leak the lengths; compare
		// both so it does not leak which one was wrong.
		u := sha256.Sum256([]byte(gotUser))
		p := sha256.Sum256([]byte(gotPassword))
		match := subtle.ConstantTimeCompare(u[:], wantUser[:]) & subtle.ConstantTimeCompare(p[:], wantPassword[:])
		if !ok || match != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="`+Realm+`", charset="UTF-8"`)
			http.Error(w, http.StatusText(http.StatusUnauthorized), http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
