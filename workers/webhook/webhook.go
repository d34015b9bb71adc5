package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/riverbus/riverbus/internal/redact"
	"github.com/riverbus/riverbus/internal/riversql"
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
	// client's JobTimeout (workers.RiverOpts.JobTimeout, one minute by
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
	// delay (docs/operations.md, "Retry schedules").
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
// kind into the same type, workers.Args. Its deliveries carry each event's
// stored version: a plain river.Workers has no upcasters (Bind's webhook
// upcasts with its registry's).
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
// to river.AddWorkerArgs. River decodes each job into the zero value, which
// keeps nothing: the worker reads the job's encoded args itself (one event
// or a transaction group), and refuses args that are no envelope with a
// reason, where River's own decoding would retry them as an error.
type poolArgs struct {
	kind string
}

func (a poolArgs) Kind() string { return a.kind }

func (*poolArgs) UnmarshalJSON([]byte) error { return nil }

type worker struct {
	river.WorkerDefaults[poolArgs]

	pool     string
	url      string   // as given
	shownURL string   // redact.URL's, for errors and logs
	hidden   []string // the URL's credentials, masked wherever they appear
	secret   []byte
	timeout  time.Duration     // 0: none
	versions *workers.Registry // its upcasters (Bind); nil: events go as stored
	client   *http.Client
	logger   *slog.Logger
}

func newWorker(cfg Config) (*worker, error) {
	if !riversql.PoolName.MatchString(cfg.Pool) {
		return nil, fmt.Errorf("Pool must be 2-100 letters, digits, _ . - or :, starting with a letter, digit or _ (River job kinds have at least two characters), got %q", cfg.Pool)
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
	shown := redact.URL(cfg.URL)
	return &worker{
		pool:     cfg.Pool,
		url:      cfg.URL,
		shownURL: shown,
		hidden:   redact.Credentials(cfg.URL),
		secret:   bytes.Clone(cfg.Secret),
		timeout:  timeout,
		client:   client,
		logger:   logger.With("pool", cfg.Pool, "url", shown),
	}, nil
}

// Redact returns raw with its credentials masked, for logs, errors and
// output: the password of its user info (a user name alone, which is then
// the credential), every query value and the fragment. Scheme, host, path,
// user name and query keys stay, so endpoints can be told apart:
// https://user:pw@host/hook?token=abc gives
// https://user:xxxxx@host/hook?token=xxxxx. Every text riverbus shows a
// webhook's URL in goes through it.
func Redact(raw string) string { return redact.URL(raw) }

// hide masks the URL's credentials in s: inside any URL it quotes, and
// anywhere else (a receiver's error page may echo the request).
func (w *worker) hide(s string) string { return redact.Values(redact.Text(s), w.hidden) }

// shown returns err as it may be shown: River stores its text in the
// job's errors, which River UI and `riverbus status` show. errors.Is and
// errors.As see err (a *StatusError, context.Canceled).
func (w *worker) shown(err error) error { return redact.Error(err, w.hide) }

// Middleware has the job's args left as stored, references to big events'
// payloads included (bustype.EventJobRef): the worker sends the log's
// envelope whatever the job holds, so reading the payload into the job first
// would only move it twice more.
func (w *worker) Middleware(*rivertype.JobRow) []rivertype.WorkerMiddleware {
	return []rivertype.WorkerMiddleware{&argsAsStored{}}
}

type argsAsStored struct{ river.MiddlewareDefaults }

func (*argsAsStored) Work(ctx context.Context, _ *rivertype.JobRow, doInner func(context.Context) error) error {
	return doInner(workers.SkipPayloads(ctx))
}

// Work delivers the event (or transaction group) the job names as
// riverbus_event holds it, after checking that the job is one the fan-out
// could have made for the pool (verify.go). Only a 2xx answer completes the
// job; any other outcome is an error, so River retries it. A job that fails
// the check is not sent: it becomes a dead letter at once, with the reason.
func (w *worker) Work(ctx context.Context, job *river.Job[poolArgs]) (err error) {
	start := time.Now()
	attrs := []any{"job_id", job.ID, "attempt", job.Attempt, "queue", job.Queue}
	defer func() {
		// A panic's value may quote the URL too; River would store it as
		// it is, with a stack trace.
		if r := recover(); r != nil {
			err = w.shown(fmt.Errorf("webhook worker panicked: %v", r))
			w.logger.ErrorContext(ctx, "webhook worker panicked", append(attrs, "error", err, "stack", w.hide(string(debug.Stack())))...)
		}
	}()
	body, eventID, err := w.fromLog(ctx, job)
	var refused *refusal
	if errors.As(err, &refused) {
		reason := fmt.Sprintf("job %d refused, not delivered: %s", job.ID, refused.reason)
		deadLetter(ctx, job, reason)
		w.logger.WarnContext(ctx, "webhook refused a job that is not the log's", append(attrs, "reason", reason)...)
		return errors.New(reason)
	}
	if snooze := (*rivertype.JobSnoozeError)(nil); errors.As(err, &snooze) {
		return err // the process's big reads were all taken: soon, no attempt used
	}
	if err != nil {
		err = w.shown(err)
		w.logger.WarnContext(ctx, "webhook delivery failed", append(attrs, "error", err)...)
		return err
	}
	status, err := w.deliver(ctx, job, body, eventID)
	attrs = append(attrs, "event_id", eventID, "status", status, "duration", time.Since(start))
	if err != nil {
		w.logger.WarnContext(ctx, "webhook delivery failed", append(attrs, "error", err)...)
		return err
	}
	w.logger.DebugContext(ctx, "webhook delivered", attrs...)
	return nil
}

// deliver sends body, the envelope of the event id (the first event of a
// group), in one request and returns the status code (0 when there was no
// response) and the outcome, as it may be shown.
func (w *worker) deliver(ctx context.Context, job *river.Job[poolArgs], body []byte, eventID uuid.UUID) (status int, err error) {
	defer func() { err = w.shown(err) }()
	id := eventID.String()
	var head struct {
		GlobalSequence int64 `json:"global_sequence"`
		Late           bool  `json:"late"`
	}
	_ = json.Unmarshal(body, &head) // the log's envelope: it decodes

	if w.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, w.timeout, errTimeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return 0, w.requestError(ctx, err)
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
	h.Set(HeaderSequence, strconv.FormatInt(head.GlobalSequence, 10))
	h.Set(HeaderAttempt, strconv.Itoa(job.Attempt))
	if head.Late {
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
		Body:       w.hide(printable(start)),
		RetryAfter: w.hide(printable([]byte(retryAfter))),
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
	to := redact.URL(req.URL.String())
	switch {
	case len(via) > MaxRedirects:
		return fmt.Errorf("stopped after %d redirects", MaxRedirects)
	case hostPort(req.URL) != hostPort(first.URL):
		return fmt.Errorf("refusing redirect (%d) to another host: %s", status, to)
	case first.URL.Scheme == "https" && req.URL.Scheme != "https":
		return fmt.Errorf("refusing redirect (%d) from https to %s", status, to)
	case req.Method != first.Method:
		return fmt.Errorf("refusing redirect (%d) to %s that turns %s into %s; answer 307 or 308 to keep the method", status, to, first.Method, req.Method)
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
