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

	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/workers"
)

// testJob is a pool job as River hands it to the worker.
func testJob() *river.Job[poolArgs] {
	id := uuid.New()
	return &river.Job[poolArgs]{
		JobRow: &rivertype.JobRow{
			ID: 1, Attempt: 1, Kind: "hooks",
			EncodedArgs: []byte(`{"global_sequence": 7, "event_id": "` + id.String() + `", "type": "t"}`),
		},
		Args: poolArgs{Args: workers.Args{Event: outbox.Event{GlobalSequence: 7, EventID: id, Type: "t"}}},
	}
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
		return newTestWorker(t, Config{URL: srv.URL + path, Secret: secret}).Work(ctx, testJob())
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
	require.NoError(t, newTestWorker(t, Config{URL: srv.URL + "/away", Client: client}).Work(ctx, testJob()))
	require.Equal(t, []string{"POST /in"}, other.paths())
}

// Errors show the URL without user info and query.
func TestErrorsHideCredentials(t *testing.T) {
	t.Parallel()
	srv := newRecorder(t)
	srv.mux.HandleFunc("/in", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "nope", http.StatusForbidden) })
	u := strings.Replace(srv.URL, "http://", "http://user:hunter2@", 1) + "/in?token=s3cret"
	w := newTestWorker(t, Config{URL: u})
	err := w.Work(context.Background(), testJob())
	require.EqualError(t, err, "POST "+srv.URL+"/in: status 403 Forbidden: nope\n")
	var statusErr *StatusError
	require.ErrorAs(t, err, &statusErr)
	require.Equal(t, http.StatusForbidden, statusErr.StatusCode)

	w = newTestWorker(t, Config{URL: "http://user:hunter2@127.0.0.1:1/in?token=s3cret"})
	err = w.Work(context.Background(), testJob())
	require.Error(t, err)
	require.NotContains(t, err.Error(), "hunter2")
	require.NotContains(t, err.Error(), "s3cret")
}

func TestNoEventID(t *testing.T) {
	t.Parallel()
	job := testJob()
	job.Args.EventID = uuid.Nil
	w := newTestWorker(t, Config{URL: "http://127.0.0.1:1/"})
	require.ErrorContains(t, w.Work(context.Background(), job), `job 1 of kind "hooks" has no event_id`)
}

func TestPrintable(t *testing.T) {
	t.Parallel()
	require.Equal(t, "a\tb\nc\uFFFD\uFFFD\uFFFDé", printable([]byte("a\tb\nc\x00\x1b\xffé")))
}
