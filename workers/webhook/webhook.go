package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/riverbus/riverbus/internal/tracing"
	"github.com/riverbus/riverbus/workers"
)

// Defaults and limits of a delivery.
const (
	// TimeoutDefault is Config.Timeout's default: a receiver has ten
	// seconds to answer.
	TimeoutDefault = 10 * time.Second

	// MaxRedirects is how many redirects a delivery follows, each to the
	// same host and with the same method (307 or 308), when Config.Client
	// has no CheckRedirect of its own.
	MaxRedirects = 3

	// ErrorBodyMax is how many bytes of a failed response's body go into
	// the job's error.
	ErrorBodyMax = 512

	// DrainMax is how many bytes of a response's body are read and thrown
	// away, so the connection can be reused, before it is closed. A longer
	// body is cut off and its connection closed.
	DrainMax = 64 << 10
)

// poolNameRE is fanout's rule for pool names, which also keeps the name
// safe as a header value.
var poolNameRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,99}$`)

// Config is the webhook of one pool.
type Config struct {
	// Pool is the pool whose jobs are delivered: the River job kind.
	// Required.
	Pool string

	// URL receives the deliveries: an absolute http or https URL. Required.
	// Its user info and query are sent but left out of job errors and logs.
	URL string

	// Secret signs deliveries (the Webhook-Signature header). Nil or empty:
	// deliveries are not signed. Standard Webhooks recommends 24 to 64
	// random bytes; SecretFromEnv reads one from the environment.
	Secret []byte

	// Timeout bounds one delivery: connecting, sending, and receiving the
	// response headers and the part of the body that is read. Zero:
	// TimeoutDefault (10s). -1: no timeout of its own. Either way the River
	// client's JobTimeout (riverclient.Opts.JobTimeout, one minute by
	// default) also applies, so keep Timeout below it.
	Timeout time.Duration

	// Client sends the requests. Nil: a client with http.DefaultTransport
	// and the redirect policy described in the package documentation. A
	// client given here is copied; when its CheckRedirect is nil the copy
	// gets that policy, otherwise its own is kept. Its Timeout, when set,
	// applies on top of Timeout.
	Client *http.Client

	// Logger receives a debug record per delivery and a warning per failed
	// one. Nil: slog.Default().
	Logger *slog.Logger
}

// StatusError is the error of a delivery answered with a status other than
// 2xx. River records its text in the job's errors, and retries the job.
type StatusError struct {
	// StatusCode is the response's status code.
	StatusCode int
	// Body is the start of the response body, at most ErrorBodyMax bytes,
	// with invalid UTF-8 and control characters replaced.
	Body string
	// RetryAfter is the response's Retry-After header, empty when none.
	// When it parses (seconds, or an HTTP date), the error the worker
	// returns wraps a workers.RetryAfterError, and the pool's retry policy
	// waits that long before the next attempt, at most the pool's maximum
	// delay (README, "Retry schedules").
	RetryAfter string
}

func (e *StatusError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "status %d", e.StatusCode)
	if text := http.StatusText(e.StatusCode); text != "" {
		b.WriteString(" " + text)
	}
	if e.RetryAfter != "" {
		fmt.Fprintf(&b, " (Retry-After: %s)", e.RetryAfter)
	}
	if e.Body != "" {
		b.WriteString(": " + e.Body)
	}
	return b.String()
}

// Register adds to ws the worker that delivers the jobs of pool cfg.Pool to
// cfg.URL. It returns an error naming the field of cfg that is not valid,
// or when ws already has a worker for the pool's kind.
//
// River registers workers by Go type, each type with a fixed Kind; the pool
// name is only known at run time, so Register uses river.AddWorkerArgs with
// an args value whose Kind is the pool name. River decodes every job of the
// kind into the same type, workers.Args (bustype.EventJob).
func Register(ws *river.Workers, cfg Config) (err error) {
	if ws == nil {
		return errors.New("register webhook: workers is nil")
	}
	w, err := newWorker(cfg)
	if err != nil {
		return fmt.Errorf("register webhook of pool %q: %w", cfg.Pool, err)
	}
	defer func() {
		// AddWorkerArgs panics on a kind registered twice.
		if r := recover(); r != nil {
			err = fmt.Errorf("register webhook of pool %q: %v", cfg.Pool, r)
		}
	}()
	river.AddWorkerArgs(ws, poolArgs{kind: cfg.Pool}, w)
	return nil
}

// poolArgs are the args of a pool job. kind is only set on the value given
// to river.AddWorkerArgs; River decodes jobs into the zero value, and the
// worker does not need it.
type poolArgs struct {
	workers.Args
	kind string
}

func (a poolArgs) Kind() string { return a.kind }

type worker struct {
	river.WorkerDefaults[poolArgs]

	pool     string
	url      string // as given
	shownURL string // without user info and query, for errors and logs
	secret   []byte
	timeout  time.Duration // 0: none
	client   *http.Client
	logger   *slog.Logger
}

func newWorker(cfg Config) (*worker, error) {
	if !poolNameRE.MatchString(cfg.Pool) {
		return nil, fmt.Errorf("Pool must be 1-100 letters, digits, _ . - or :, starting with a letter, digit or _, got %q", cfg.Pool)
	}
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
		return nil, fmt.Errorf("URL must be an absolute http or https URL, got %q", Redact(cfg.URL))
	}
	timeout := cfg.Timeout
	switch {
	case timeout == 0:
		timeout = TimeoutDefault
	case timeout == -1:
		timeout = 0
	case timeout < 0:
		return nil, fmt.Errorf("Timeout must be positive or -1 (none), got %s", cfg.Timeout)
	}
	client := &http.Client{}
	if cfg.Client != nil {
		c := *cfg.Client
		client = &c
	}
	if client.CheckRedirect == nil {
		client.CheckRedirect = checkRedirect
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	shown := *u
	shown.User, shown.RawQuery, shown.ForceQuery, shown.Fragment, shown.RawFragment = nil, "", false, "", ""
	return &worker{
		pool:     cfg.Pool,
		url:      cfg.URL,
		shownURL: shown.String(),
		secret:   bytes.Clone(cfg.Secret),
		timeout:  timeout,
		client:   client,
		logger:   logger.With("pool", cfg.Pool, "url", shown.String()),
	}, nil
}

// Redact returns raw with its user info and query hidden, for logs and
// errors: they may hold credentials.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable)"
	}
	if u.User != nil {
		u.User = url.User("xxxxx")
	}
	if u.RawQuery != "" {
		u.RawQuery = "..."
	}
	return u.String()
}

// Work delivers the job's args, as stored, to the URL. Only a 2xx answer
// completes the job; anything else is an error, so River retries it.
func (w *worker) Work(ctx context.Context, job *river.Job[poolArgs]) error {
	start := time.Now()
	status, err := w.deliver(ctx, job)
	attrs := []any{
		"job_id", job.ID, "attempt", job.Attempt,
		"global_sequence", job.Args.GlobalSequence, "event_id", job.Args.EventID,
		"status", status, "duration", time.Since(start),
	}
	if err != nil {
		w.logger.WarnContext(ctx, "webhook delivery failed", append(attrs, "error", err)...)
		return err
	}
	w.logger.DebugContext(ctx, "webhook delivered", attrs...)
	return nil
}

// deliver sends one request and returns the status code (0 when there was
// no response) and the outcome.
func (w *worker) deliver(ctx context.Context, job *river.Job[poolArgs]) (int, error) {
	args := job.Args
	if args.EventID == uuid.Nil {
		// Not an event envelope: retrying will not help, but a dead letter
		// keeps it visible, where cancelling would lose it.
		return 0, fmt.Errorf("job %d of kind %q has no event_id in its args; not a riverbus pool job", job.ID, job.Kind)
	}
	body := job.EncodedArgs
	id := args.EventID.String()

	if w.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, w.timeout, errTimeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("POST %s: %w", w.shownURL, err)
	}
	now := time.Now()
	h := req.Header
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "riverbus-webhook")
	h.Set(HeaderIdempotencyKey, id)
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	if len(w.secret) > 0 {
		h.Set(HeaderSignature, Sign(w.secret, id, now, body))
	}
	h.Set(HeaderPool, w.pool)
	h.Set(HeaderSequence, strconv.FormatInt(args.GlobalSequence, 10))
	h.Set(HeaderAttempt, strconv.Itoa(job.Attempt))
	if args.Late {
		h.Set(HeaderLate, "true")
	}
	setTraceContext(ctx, h, job.Metadata)

	resp, err := w.client.Do(req)
	if err != nil {
		return 0, w.requestError(ctx, err)
	}
	defer func() {
		_, _ = io.CopyN(io.Discard, resp.Body, DrainMax)
		_ = resp.Body.Close()
	}()
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		return resp.StatusCode, nil
	}
	// A body that cannot be read in time still leaves the status to report.
	start, _ := io.ReadAll(io.LimitReader(resp.Body, ErrorBodyMax))
	retryAfter := resp.Header.Get("Retry-After")
	err = fmt.Errorf("POST %s: %w", w.shownURL, &StatusError{
		StatusCode: resp.StatusCode,
		Body:       printable(start),
		RetryAfter: printable([]byte(retryAfter)),
	})
	if delay, ok := ParseRetryAfter(retryAfter, time.Now()); ok {
		err = workers.RetryAfter(err, delay)
	}
	return resp.StatusCode, err
}

// setTraceContext sets the traceparent (and tracestate) headers h: the
// span of ctx (otelriver's work span, when the worker traces), else the
// event's trace context as the fan-out copied it into the job's metadata.
func setTraceContext(ctx context.Context, h http.Header, metadata []byte) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(h))
		return
	}
	if tc := tracing.FromMetadata(metadata); tc.SpanContext().IsValid() {
		h.Set(HeaderTraceParent, tc.TraceParent)
		if tc.TraceState != "" {
			h.Set(HeaderTraceState, tc.TraceState)
		}
	}
}

// ParseRetryAfter parses a Retry-After header value (RFC 9110 10.2.3):
// a number of seconds, or an HTTP date, which gives its distance from now
// (zero for a date in the past). A malformed value gives false: it is
// ignored, and the pool's schedule alone decides.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		secs, err := strconv.ParseUint(v, 10, 63)
		if err != nil {
			if errors.Is(err, strconv.ErrRange) {
				return time.Duration(1<<63 - 1), true // the cap applies
			}
			return 0, false
		}
		if secs > uint64((1<<63-1)/time.Second) {
			return time.Duration(1<<63 - 1), true
		}
		return time.Duration(secs) * time.Second, true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(at.Sub(now), 0), true
}

// errTimeout is the cause of a delivery's context when Timeout passes.
var errTimeout = errors.New("timeout")

// requestError rewrites an error of http.Client.Do without the full URL,
// which may hold credentials, keeping the chain below it for errors.Is
// (context.Canceled when River stops, say).
func (w *worker) requestError(ctx context.Context, err error) error {
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		err = urlErr.Err
	}
	if errors.Is(context.Cause(ctx), errTimeout) {
		return fmt.Errorf("POST %s: no response within %s: %w", w.shownURL, w.timeout, err)
	}
	return fmt.Errorf("POST %s: %w", w.shownURL, err)
}

// checkRedirect follows at most MaxRedirects redirects, and only those that
// stay on the same host and port, do not go from https to http, and keep
// the method: a 301, 302 or 303 turns the POST into a GET without the
// event, whose 2xx would look like a delivery.
func checkRedirect(req *http.Request, via []*http.Request) error {
	first := via[0]
	status := 0
	if req.Response != nil {
		status = req.Response.StatusCode
	}
	to := *req.URL
	to.User, to.RawQuery, to.Fragment = nil, "", ""
	switch {
	case len(via) > MaxRedirects:
		return fmt.Errorf("stopped after %d redirects", MaxRedirects)
	case hostPort(req.URL) != hostPort(first.URL):
		return fmt.Errorf("refusing redirect (%d) to another host: %s", status, to.String())
	case first.URL.Scheme == "https" && req.URL.Scheme != "https":
		return fmt.Errorf("refusing redirect (%d) from https to %s", status, to.String())
	case req.Method != first.Method:
		return fmt.Errorf("refusing redirect (%d) to %s that turns %s into %s; answer 307 or 308 to keep the method", status, to.String(), first.Method, req.Method)
	}
	return nil
}

func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// printable makes b fit for an error text stored by River as JSON in
// PostgreSQL, which rejects \u0000: invalid UTF-8 and control characters
// other than tab and newline become U+FFFD.
func printable(b []byte) string {
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	return strings.Map(func(r rune) rune {
		if r != '\t' && r != '\n' && unicode.IsControl(r) {
			return '\uFFFD'
		}
		return r
	}, s)
}
