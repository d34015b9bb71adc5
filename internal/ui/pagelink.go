package ui

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
)

// pageLink is put before </body> of River UI's HTML documents: a link to
// the riverbus page in the corner of every River UI page. River UI's front
// end is prebuilt (riverqueue.com/riverui embeds it), so the link cannot
// be part of its navigation; its React app renders into #root and leaves
// the body's other children alone. River UI sends no
// Content-Security-Policy, so the inline style applies.
const pageLink = `<a id="riverbus-page-link" href="` + PagePath + `" title="riverbus: lag, checkpoint holders, gaps and late events per pool" ` +
	`style="position:fixed;right:12px;bottom:12px;z-index:2147483647;padding:6px 10px;border-radius:6px;` +
	`background:#0f172a;color:#fff;font:600 13px/1.2 system-ui,sans-serif;text-decoration:none;` +
	`box-shadow:0 1px 4px rgba(0,0,0,.3)">riverbus page</a>`

// withPageLink wraps River UI so that its HTML documents (its index, served
// for every front-end route) carry pageLink. Its API (JSON) and its assets
// pass through untouched.
func withPageLink(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A range of the index would be a range of the page without the
		// link: serve documents whole.
		r.Header.Del("Range")
		lw := &linkWriter{ResponseWriter: w, head: r.Method == http.MethodHead}
		next.ServeHTTP(lw, r)
		lw.finish()
	})
}

// linkWriter buffers a 200 text/html response to add pageLink to it, and
// passes every other response through as it comes.
type linkWriter struct {
	http.ResponseWriter
	head        bool
	wroteHeader bool
	buffering   bool
	buf         bytes.Buffer
}

func (lw *linkWriter) WriteHeader(status int) {
	if lw.wroteHeader {
		return
	}
	lw.wroteHeader = true
	h := lw.Header()
	if status == http.StatusOK && strings.HasPrefix(h.Get("Content-Type"), "text/html") && h.Get("Content-Encoding") == "" {
		h.Del("Content-Length") // set again once the link is in
		h.Del("ETag")
		if !lw.head {
			lw.buffering = true
			return
		}
	}
	lw.ResponseWriter.WriteHeader(status)
}

func (lw *linkWriter) Write(b []byte) (int, error) {
	if !lw.wroteHeader {
		lw.WriteHeader(http.StatusOK)
	}
	if lw.buffering {
		return lw.buf.Write(b)
	}
	return lw.ResponseWriter.Write(b)
}

// finish writes a buffered document, with the link before its last
// </body> (at its end when it has none).
func (lw *linkWriter) finish() {
	if !lw.buffering {
		return
	}
	doc := lw.buf.Bytes()
	at := bytes.LastIndex(bytes.ToLower(doc), []byte("</body>"))
	if at < 0 {
		at = len(doc)
	}
	out := make([]byte, 0, len(doc)+len(pageLink))
	out = append(append(append(out, doc[:at]...), pageLink...), doc[at:]...)
	lw.Header().Set("Content-Length", strconv.Itoa(len(out)))
	lw.ResponseWriter.WriteHeader(http.StatusOK)
	_, _ = lw.ResponseWriter.Write(out)
}

// Unwrap lets http.ResponseController reach the connection.
func (lw *linkWriter) Unwrap() http.ResponseWriter { return lw.ResponseWriter }
