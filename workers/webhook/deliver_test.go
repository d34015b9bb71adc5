package webhook

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
)

// testJob is a pool job as River hands it to the worker, and the body and
// event id a delivery sends for it.
func testJob() (*river.Job[poolArgs], []byte, uuid.UUID) {
	id := uuid.New()
	body := []byte(`{"global_sequence": 7, "event_id": "` + id.String() + `", "type": "t"}`)
	return &river.Job[poolArgs]{JobRow: &rivertype.JobRow{ID: 1, Attempt: 1, Kind: "hooks", EncodedArgs: body}}, body, id
}

// send delivers testJob with w, without a database.
func send(ctx context.Context, w *worker) error {
	job, body, id := testJob()
	_, err := w.deliver(ctx, job, body, id)
	return err
}

type hit struct {
	method, path, sig string
	body              []byte
}

// recorder is a server whose mux the test fills, recording every request.
type recorder struct {
	*httptest.Server
	mux  *http.ServeMux
	mu   sync.Mutex
	hits []hit
}

func newRecorder(t *testing.T) *recorder {
	r := &recorder{mux: http.NewServeMux()}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.hits = append(r.hits, hit{req.Method, req.URL.Path, req.Header.Get(HeaderSignature), body})
		r.mu.Unlock()
		r.mux.ServeHTTP(w, req)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *recorder) paths() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, h := range r.hits {
		out = append(out, h.method+" "+h.path)
	}
	return out
}

func redirect(to string, code int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, to, code) }
}

func newTestWorker(t *testing.T, cfg Config) *worker {
	t.Helper()
	cfg.Pool = "hooks"
	cfg.Logger = slog.New(slog.DiscardHandler)
	w, err := newWorker(cfg)
	require.NoError(t, err)
	return w
}

func TestRedirects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	other := newRecorder(t)
	other.mux.HandleFunc("/", func(http.ResponseWriter, *http.Request) {})
	srv := newRecorder(t)
	for i := range 5 {
		srv.mux.HandleFunc("/chain"+strconv.Itoa(i), redirect("/chain"+strconv.Itoa(i+1), http.StatusPermanentRedirect))
	}
	srv.mux.HandleFunc("/chain5", func(http.ResponseWriter, *http.Request) {})
	srv.mux.HandleFunc("/temporary", redirect("/chain5", http.StatusTemporaryRedirect))
	srv.mux.HandleFunc("/found", redirect("/chain5", http.StatusFound))
	srv.mux.HandleFunc("/away", redirect(other.URL+"/in", http.StatusTemporaryRedirect))

	secret := []byte("s")
	deliver := func(path string) error {
		return send(ctx, newTestWorker(t, Config{URL: srv.URL + path, Secret: secret}))
	}

	// 307 and 308 on the same host are followed, up to three, and the
	// request arrives whole: method, body, signature.
	require.NoError(t, deliver("/temporary"))
	require.NoError(t, deliver("/chain2"))
	require.Equal(t, []string{"POST /temporary", "POST /chain5", "POST /chain2", "POST /chain3", "POST /chain4", "POST /chain5"}, srv.paths())
	srv.mu.Lock()
	last := srv.hits[len(srv.hits)-1]
	srv.mu.Unlock()
	require.Contains(t, string(last.body), `"global_sequence": 7`)
	require.True(t, strings.HasPrefix(last.sig, "v1,"))

	// A fourth is not.
	require.ErrorContains(t, deliver("/chain1"), "stopped after 3 redirects")

	// 302 would turn the POST into a GET.
	err := deliver("/found")
	require.ErrorContains(t, err, "refusing redirect (302) to "+srv.URL+"/chain5 that turns POST into GET")

	// Another host (here: port) is refused and never reached.
	err = deliver("/away")
	require.ErrorContains(t, err, "refusing redirect (307) to another host: "+other.URL+"/in")
	require.Empty(t, other.paths())

	// A client with its own policy keeps it.
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return nil }}
	require.NoError(t, send(ctx, newTestWorker(t, Config{URL: srv.URL + "/away", Client: client})))
	require.Equal(t, []string{"POST /in"}, other.paths())
}

// Errors show the URL without user info and query.
func TestErrorsHideCredentials(t *testing.T) {
	t.Parallel()
	srv := newRecorder(t)
	srv.mux.HandleFunc("/in", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "nope", http.StatusForbidden) })
	u := strings.Replace(srv.URL, "http://", "http://user:hunter2@", 1) + "/in?token=s3cret"
	w := newTestWorker(t, Config{URL: u})
	err := send(context.Background(), w)
	require.EqualError(t, err, "POST "+strings.Replace(srv.URL, "http://", "http://user:xxxxx@", 1)+"/in?token=xxxxx: status 403 Forbidden: nope\n")
	var statusErr *StatusError
	require.ErrorAs(t, err, &statusErr)
	require.Equal(t, http.StatusForbidden, statusErr.StatusCode)

	w = newTestWorker(t, Config{URL: "http://user:hunter2@127.0.0.1:1/in?token=s3cret"})
	err = send(context.Background(), w)
	require.Error(t, err)
	require.NotContains(t, err.Error(), "hunter2")
	require.NotContains(t, err.Error(), "s3cret")
}

// Args that are no envelope are refused before anything is read or sent.
func TestParseClaimRefusesNonEnvelopes(t *testing.T) {
	t.Parallel()
	for _, args := range []string{
		`[]`, `{}`, `{"hello": "world"}`, `{"global_sequence": 7, "type": "t"}`,
		`{"global_sequence": "7", "event_id": "` + uuid.NewString() + `", "occurred_at": "2026-01-01T00:00:00Z"}`,
		`{"events": [], "transaction_id": "1"}`, `{"events": {}, "transaction_id": "1"}`,
	} {
		_, err := parseClaim([]byte(args))
		require.Error(t, err, args)
	}
	c, err := parseClaim([]byte(`{"global_sequence": 7, "event_id": "` + uuid.NewString() + `", "occurred_at": "2026-01-01T00:00:00Z", "late": true}`))
	require.NoError(t, err)
	require.True(t, c.late)
	require.False(t, c.group)
	require.Len(t, c.events, 1)
	require.NotContains(t, string(c.events[0].raw), "late", "late is the job's, not the event's")
}

func TestPrintable(t *testing.T) {
	t.Parallel()
	require.Equal(t, "a\tb\nc\uFFFD\uFFFD\uFFFDé", printable([]byte("a\tb\nc\x00\x1b\xffé")))
}
