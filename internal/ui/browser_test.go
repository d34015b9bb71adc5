package ui_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/ui"
)

// browserTimeout bounds the whole browser test, browser start and every
// subtest included: a hang guard, far above what it takes, since Chromium
// and the servers share two cores with the rest of the suite and, in a
// saturated run, with other work too.
const browserTimeout = 10 * time.Minute

// TestBrowser loads River UI in headless Chromium: the jobs page renders the
// pool's job; with basic auth, a load without credentials gets 401 and no
// jobs, and one with them renders the page.
//
// It needs the chromium executable (Debian package chromium). Without it the
// test is skipped, unless the environment variable CI is set.
func TestBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("a headless browser: not in -short")
	}
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("chromium not found; CI must install the Debian package chromium: %v", err)
		}
		t.Skipf("chromium not found, skipping the browser test (apt-get install chromium): %v", err)
	}
	t.Parallel()

	// Created before the browser starts, so removed after it has exited.
	userDataDir := t.TempDir()

	ctx, cancel := context.WithTimeout(t.Context(), browserTimeout)
	defer cancel()
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox, // the tests may run as root
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true), // /dev/shm is small in containers
		// A DNS-rebinding attacker's name, pointed at this machine.
		chromedp.Flag("host-resolver-rules", "MAP evil.example 127.0.0.1"),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(userDataDir),
	)
	defer cancelAlloc() // waits for the browser to exit
	browserCtx, cancelBrowser := chromedp.NewContext(allocCtx)
	defer cancelBrowser()
	// Start the browser now, so a failure to launch shows as such.
	require.NoError(t, chromedp.Do(browserCtx), "start chromium")

	t.Run("JobsPage", func(t *testing.T) {
		base := serveUI(t, ctx, ui.Opts{})
		tab, cancelTab := chromedp.NewContext(browserCtx)
		defer cancelTab()

		resp, err := chromedp.Run(tab, chromedp.NavigateResponse(base+"/jobs?state=available"))
		require.NoError(t, err)
		require.Equal(t, int64(http.StatusOK), resp.Status)
		require.NoError(t, chromedp.Do(tab, waitForText("billing")))
	})

	// A page of another origin that the operator's browser opens sends the
	// API a "simple" cross-origin POST (text/plain, no preflight). Served
	// unguarded, River UI cancels the job; behind Guard it stays.
	t.Run("ForeignPageCannotChangeJobs", func(t *testing.T) {
		attack := func(t *testing.T, uiBase string, id int64) {
			t.Helper()
			page := `<!doctype html><title>loading</title><script>
fetch(` + "`" + uiBase + `/api/jobs/cancel` + "`" + `, {method: "POST", mode: "no-cors",
	headers: {"Content-Type": "text/plain"}, body: '{"ids":["` + strconv.FormatInt(id, 10) + `"]}'})
	.then(() => { document.title = "sent"; }, (e) => { document.title = "sent: " + e; });
</script>`
			evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html; charset=utf-8")
				_, _ = io.WriteString(w, page)
			}))
			t.Cleanup(evil.Close)
			tab, cancelTab := chromedp.NewContext(browserCtx)
			defer cancelTab()
			_, err := chromedp.Run(tab, chromedp.NavigateResponse(evil.URL+"/"))
			require.NoError(t, err)
			require.NoError(t, chromedp.Do(tab, chromedp.Poll[chromedp.Void](`document.title.startsWith("sent")`,
				chromedp.WithPollingInterval(50*time.Millisecond))))
		}

		// Control: River UI without the guard does what the page asks.
		open := setup(t)
		openSrv := newServer(t, open, ui.Opts{})
		openID := billingJob(t, open.db)
		attack(t, openSrv.URL, openID)
		require.Eventually(t, func() bool { return jobState(t, open.db, openID) == "cancelled" }, 10*time.Second, 50*time.Millisecond,
			"the unguarded control must show the attack works")

		b := setup(t)
		addr := serveGuarded(t, b, "127.0.0.1:0", ui.Opts{}, ui.ServeOpts{})
		id := billingJob(t, b.db)
		attack(t, "http://"+addr, id)
		require.Equal(t, "available", jobState(t, b.db, id))
	})

	// DNS rebinding: the attacker's name resolves to this machine, so the
	// page would read the API as its own origin. Refused by Host.
	t.Run("DNSRebinding", func(t *testing.T) {
		b := setup(t)
		addr := serveGuarded(t, b, "127.0.0.1:0", ui.Opts{}, ui.ServeOpts{})
		_, port, err := net.SplitHostPort(addr)
		require.NoError(t, err)
		tab, cancelTab := chromedp.NewContext(browserCtx)
		defer cancelTab()

		resp, err := chromedp.Run(tab, chromedp.NavigateResponse("http://evil.example:"+port+"/api/jobs?state=available"))
		require.NoError(t, err)
		require.Equal(t, int64(http.StatusForbidden), resp.Status)
		text, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
		require.NoError(t, err)
		require.NotContains(t, text, "billing")

		resp, err = chromedp.Run(tab, chromedp.NavigateResponse("http://"+addr+"/api/jobs?state=available"))
		require.NoError(t, err)
		require.Equal(t, int64(http.StatusOK), resp.Status)
	})

	t.Run("BasicAuth", func(t *testing.T) {
		base := serveUI(t, ctx, ui.Opts{User: "ops", Password: "s3cret"})

		// Beside the browser: the status and the challenge.
		resp, body := get(t, base+"/jobs?state=available", nil)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		require.NotEmpty(t, resp.Header.Get("WWW-Authenticate"))
		require.NotContains(t, body, "billing")

		// Without credentials: 401, and the page shows no job.
		tab, cancelTab := chromedp.NewContext(browserCtx)
		defer cancelTab()
		status := documentStatus(t, tab)
		// Headless Chromium shows no login prompt: it cancels the challenge
		// and fails the load, after the 401 response arrived.
		_, err := chromedp.Run(tab, chromedp.NavigateResponse(base+"/jobs?state=available"))
		var loadErr *chromedp.LoadError
		require.ErrorAs(t, err, &loadErr)
		require.Equal(t, "net::ERR_INVALID_AUTH_CREDENTIALS", loadErr.ErrorText)
		require.Equal(t, int64(http.StatusUnauthorized), status())
		text, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
		require.NoError(t, err)
		require.NotContains(t, text, "billing")

		// With credentials on every request the page makes, it renders.
		tab2, cancelTab2 := chromedp.NewContext(browserCtx)
		defer cancelTab2()
		authz := "Basic " + base64.StdEncoding.EncodeToString([]byte("ops:s3cret"))
		require.NoError(t, chromedp.Do(tab2, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			_, err := cdp.Call(ctx, t, network.SetExtraHTTPHeaders,
				network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": authz}})
			return err
		})))
		doc, err := chromedp.Run(tab2, chromedp.NavigateResponse(base+"/jobs?state=available"))
		require.NoError(t, err)
		require.Equal(t, int64(http.StatusOK), doc.Status)
		require.NoError(t, chromedp.Do(tab2, waitForText("billing")))
	})

	// The riverbus page beside River UI: reached from River UI's link, it
	// shows a paused pool with its lag and a stalled pool with the job
	// holding its checkpoint, renders the hostile error and key as text,
	// and follows an appended event without a reload.
	t.Run("RiverbusPage", func(t *testing.T) {
		start := time.Now()
		b := pageSetup(t)
		base := "http://" + serveGuarded(t, b.testBundle, "127.0.0.1:0", ui.Opts{}, ui.ServeOpts{})
		tab, cancelTab := chromedp.NewContext(browserCtx)
		defer cancelTab()

		resp, err := chromedp.Run(tab, chromedp.NavigateResponse(base+"/jobs?state=retryable"))
		require.NoError(t, err)
		require.Equal(t, int64(http.StatusOK), resp.Status)
		require.NoError(t, chromedp.Do(tab, waitForText("ledger"), waitForText("riverbus page")))
		// The link is on top where River UI has drawn its page: what a
		// click at its middle reaches.
		link, err := chromedp.Run(tab, chromedp.Evaluate[string](`(() => {
	const a = document.getElementById("riverbus-page-link"), r = a.getBoundingClientRect();
	const top = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
	return top === a ? a.getAttribute("href") : "covered by " + (top && top.outerHTML.slice(0, 80));
})()`))
		require.NoError(t, err)
		require.Equal(t, ui.PagePath, link)
		resp, err = chromedp.Run(tab, chromedp.NavigateResponse(base+link))
		require.NoError(t, err)
		require.Equal(t, int64(http.StatusOK), resp.Status)

		field := func(pool, name string) string {
			t.Helper()
			text, err := chromedp.Run(tab, chromedp.Evaluate[string](
				`document.querySelector('[data-pool="`+pool+`"] [data-field="`+name+`"]').innerText`))
			require.NoError(t, err)
			return text
		}
		require.Equal(t, "PAUSED", field("billing", "condition"))                                 // text-transform: uppercase
		require.Regexp(t, `^3 events, oldest appended (\d+m)?\d+s ago$`, field("billing", "lag")) // minutes on a loaded machine
		require.Equal(t, "STALLED", field("ledger", "condition"))
		holder := field("ledger", "holder")
		id := strconv.FormatInt(b.holder, 10)
		require.Contains(t, holder, "by job "+id+": event 1, retryable in lane “"+hostileKey+"”, attempt 1/5, next attempt ")
		require.Contains(t, holder, "last error "+hostileError)
		href, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.querySelector('[data-field="holder"] a').getAttribute("href")`))
		require.NoError(t, err)
		require.Equal(t, "/jobs/"+id, href)
		pwned, err := chromedp.Run(tab, chromedp.Evaluate[bool](`window.pwned !== undefined`))
		require.NoError(t, err)
		require.False(t, pwned, "the error or the key ran as script")

		// An event arrives: the page follows without a reload.
		_, err = chromedp.Run(tab, chromedp.Evaluate[bool](`window.sameDocument = true`))
		require.NoError(t, err)
		appendEvent(t, b.testBundle)
		require.NoError(t, chromedp.Do(tab, chromedp.Poll[chromedp.Void](
			`document.querySelector('[data-field="horizon"]').innerText === "4" &&
				document.querySelector('[data-pool="billing"] [data-field="lag"]').innerText.startsWith("4 events")`,
			chromedp.WithPollingInterval(100*time.Millisecond))))
		same, err := chromedp.Run(tab, chromedp.Evaluate[bool](`window.sameDocument === true`))
		require.NoError(t, err)
		require.True(t, same, "the page was reloaded")
		t.Logf("riverbus page in the browser: %s, setup included", time.Since(start).Round(time.Millisecond))
	})
}

// serveUI serves River UI for a fresh database with a "billing" job on
// 127.0.0.1:0 and returns its base URL.
func serveUI(t *testing.T, ctx context.Context, opts ui.Opts) string {
	t.Helper()
	return "http://" + serveGuarded(t, setup(t), "127.0.0.1:0", opts, ui.ServeOpts{})
}

// documentStatus records the HTTP status of the documents the tab loads and
// returns a function that reads the last one (0: none yet).
func documentStatus(t *testing.T, tab context.Context) func() int64 {
	t.Helper()
	var (
		mu     sync.Mutex
		status int64
	)
	require.NoError(t, chromedp.Listen(tab, func(ev any) {
		if e, ok := ev.(*network.EventResponseReceived); ok && e.Type == network.ResourceTypeDocument {
			mu.Lock()
			status = e.Response.Status
			mu.Unlock()
		}
	}))
	return func() int64 {
		mu.Lock()
		defer mu.Unlock()
		return status
	}
}

// waitForText waits until the page's visible text contains s.
func waitForText(s string) chromedp.Action[chromedp.Void] {
	quoted, _ := json.Marshal(s)
	return chromedp.Poll[chromedp.Void](`document.body && document.body.innerText.includes(`+string(quoted)+`)`,
		chromedp.WithPollingInterval(100*time.Millisecond))
}
