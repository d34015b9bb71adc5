package ui

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"riverqueue.com/riverui"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/checkpoint"
)

// PagePath is where the riverbus page is served, beside River UI: the
// horizon and, per pool, its condition, lag, checkpoint holder, dead
// letters, late events and retry schedule, read from riverbus.Status.
const PagePath = "/riverbus/"

// Page refresh: the page's script fetches the live part every
// PageRefreshInterval; Status is read at most once per pageStatusMaxAge,
// however many tabs are open.
const (
	PageRefreshInterval = 2 * time.Second
	pageStatusMaxAge    = time.Second
)

// pageCSP allows the page its own script, style and fetches, and nothing
// else: no inline script, so even text that escaped html/template could
// not run.
const pageCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

//go:embed page
var pageFiles embed.FS

var pageTemplates = template.Must(template.New("").Funcs(template.FuncMap{
	"seconds": func(s float64) string { return time.Duration(s * float64(time.Second)).Round(time.Second).String() },
	"clock":   func(t time.Time) string { return t.Local().Format("15:04:05") },
	"stamp":   func(t *time.Time) string { return t.UTC().Format(time.RFC3339) },
}).ParseFS(pageFiles, "page/*.html"))

// page serves PagePath: the page, its live part, its script and style.
type page struct {
	statusFunc func(context.Context) (*riverbus.Status, error)
	riverUI    string // River UI's base path, ending in "/"
	logger     *slog.Logger

	mu      sync.Mutex // held while Status is read, so requests share one read
	last    *riverbus.Status
	lastErr error
	lastAt  time.Time
}

func newPage(statusFunc func(context.Context) (*riverbus.Status, error), riverUIPrefix string, logger *slog.Logger) *page {
	return &page{statusFunc: statusFunc, riverUI: riverui.NormalizePathPrefix(riverUIPrefix) + "/", logger: logger}
}

func (p *page) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	h := w.Header()
	h.Set("Content-Security-Policy", pageCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	switch r.URL.Path {
	case PagePath:
		p.render(w, r, "page.html")
	case PagePath + "live":
		p.render(w, r, "live")
	case PagePath + "page.js", PagePath + "page.css":
		http.ServeFileFS(w, r, pageFiles, "page/"+r.URL.Path[len(PagePath):])
	default:
		http.NotFound(w, r)
	}
}

// render writes the template name with the current status.
func (p *page) render(w http.ResponseWriter, r *http.Request, name string) {
	st, err := p.status(r.Context())
	v := p.view(st, err)
	var buf bytes.Buffer
	if err := pageTemplates.ExecuteTemplate(&buf, name, v); err != nil {
		p.logger.Error("riverbus page: render", "error", err)
		http.Error(w, "riverbus page: cannot render", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_, _ = w.Write(buf.Bytes())
}

// status returns a snapshot at most pageStatusMaxAge old.
func (p *page) status(ctx context.Context) (*riverbus.Status, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.lastAt.IsZero() && time.Since(p.lastAt) < pageStatusMaxAge {
		return p.last, p.lastErr
	}
	p.last, p.lastErr = p.statusFunc(ctx)
	if p.lastErr != nil {
		p.logger.Warn("riverbus page: read status", "error", p.lastErr)
		if ctx.Err() != nil {
			return p.last, p.lastErr // not this request's fault to cache
		}
	}
	p.lastAt = time.Now()
	return p.last, p.lastErr
}

// pageView is what the templates show. Every string in it is text, escaped
// by html/template where it is written: pool names, lanes and errors come
// from appenders and handlers.
type pageView struct {
	Status       *riverbus.Status
	Err          string
	RiverUI      string
	RefreshMS    int64
	RefreshEvery time.Duration
	Pools        []poolView
	// HorizonStalled: committed events wait above a horizon that has not
	// moved for checkpoint.StuckAfter.
	HorizonStalled bool
	Troubles       []string
}

type poolView struct {
	*riverbus.StatusPool
	JobsURL, QueueURL, DeadLettersURL string
	Jobs                              string
	Holder                            *jobView
	Blocker                           *jobView // what blocks the holder's lane
	HeldFor                           string
	// OtherError is the pool's LastError when neither the holder nor its
	// lane's blocker shows it: the newest dead letter's.
	OtherError string
}

type jobView struct {
	*checkpoint.Job
	URL  string
	Next string // "12:04:05 (in 20s)", "" when no attempt is scheduled
}

func (p *page) view(st *riverbus.Status, err error) *pageView {
	v := &pageView{Status: st, RiverUI: p.riverUI, RefreshMS: PageRefreshInterval.Milliseconds(), RefreshEvery: PageRefreshInterval}
	if err != nil {
		v.Err = err.Error()
	}
	if st == nil {
		return v
	}
	v.HorizonStalled = st.LastCommitted > st.Horizon && st.HorizonAgeSeconds >= checkpoint.StuckAfter.Seconds()
	for _, sp := range st.Pools {
		pv := poolView{StatusPool: sp,
			JobsURL:        p.riverUI + "jobs?" + url.Values{"kind": {sp.Name}}.Encode(),
			QueueURL:       p.riverUI + "queues/" + url.PathEscape(sp.Queue),
			DeadLettersURL: p.riverUI + "jobs?" + url.Values{"kind": {sp.Name}, "state": {string(bustype.JobStateDiscarded)}}.Encode(),
			Jobs:           jobCounts(sp.Jobs),
		}
		if h := sp.Holder; h != nil {
			pv.Holder = p.job(h, &h.Job)
			if h.LaneBlocker != nil {
				pv.Blocker = p.job(h, h.LaneBlocker)
			}
			pv.HeldFor = h.HeldFor().Round(time.Second).String()
		}
		if e := sp.LastError; e != "" && (pv.Holder == nil || e != pv.Holder.LastError) && (pv.Blocker == nil || e != pv.Blocker.LastError) {
			pv.OtherError = e
		}
		v.Pools = append(v.Pools, pv)
	}
	for _, proc := range st.Processes {
		name := fmt.Sprintf("%s (pid %d on %s)", proc.Name, proc.PID, proc.Host)
		if proc.Stale {
			v.Troubles = append(v.Troubles, fmt.Sprintf("%s has not reported for %s: it was killed or cannot write to the database",
				name, time.Duration(proc.ReportAgeSeconds*float64(time.Second)).Round(time.Second)))
		}
		for _, e := range proc.Errors {
			what := e.Operation
			if e.Subject != "" {
				what += " of " + strconv.Quote(e.Subject)
			}
			v.Troubles = append(v.Troubles, fmt.Sprintf("%s: %s failed %d times since %s: %s",
				name, what, e.Count, e.Since.Local().Format("15:04:05"), e.LastError))
		}
	}
	return v
}

// job is j, the holder h or what blocks its lane, as the page shows it.
func (p *page) job(h *checkpoint.Holder, j *checkpoint.Job) *jobView {
	jv := &jobView{Job: j, URL: p.riverUI + "jobs/" + strconv.FormatInt(j.ID, 10)}
	if next, ok := j.NextAttempt(); ok {
		jv.Next = fmt.Sprintf("%s (in %s)", next.Local().Format("15:04:05"), max(h.Until(next), 0).Round(time.Second))
	}
	return jv
}

// jobCounts is "available 3, retryable 1", states in River's order of a
// job's life.
func jobCounts(jobs map[bustype.JobState]int64) string {
	var b bytes.Buffer
	for _, s := range []bustype.JobState{bustype.JobStatePending, bustype.JobStateScheduled, bustype.JobStateAvailable, bustype.JobStateRunning,
		bustype.JobStateRetryable, bustype.JobStateCompleted, bustype.JobStateCancelled, bustype.JobStateDiscarded} {
		if n := jobs[s]; n > 0 {
			if b.Len() > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s %d", s, n)
		}
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}
