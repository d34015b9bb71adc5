package ui

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"
)

// Guard wraps next against the two ways a web page in the operator's
// browser can reach a server on the operator's machine, loopback included:
//
//   - DNS rebinding: a page of evil.example re-points its name at 127.0.0.1
//     and reads the server as its own origin. Its requests carry
//     "Host: evil.example:PORT", so a request whose Host is not an address
//     this server answers to is refused (403).
//   - Cross-site request forgery: a page of any origin may POST a form or a
//     text/plain fetch to the server, no preflight needed. Unsafe methods
//     (anything but GET, HEAD and OPTIONS) from another origin are refused
//     (403), as net/http's CrossOriginProtection decides from the browser's
//     Sec-Fetch-Site header, or else Origin against Host. Requests with
//     neither header come from programs, not pages, and pass.
//
// The addresses a server answers to: its listener's address (served); for
// a loopback listener also "localhost" and every loopback address, on its
// port; for a listener on every interface, the local address the request
// arrived on; and the entries of allowedHosts, for a reverse proxy in front
// ("host" matches any port, "host:port" that port only). It returns an
// error for an entry that is not a host or host:port.
func Guard(next http.Handler, served net.Addr, allowedHosts []string, logger *slog.Logger) (http.Handler, error) {
	if logger == nil {
		logger = slog.Default()
	}
	g := &guard{next: next, logger: logger}
	if served != nil {
		ap, err := netip.ParseAddrPort(served.String())
		if err != nil {
			return nil, fmt.Errorf("guard: listener address %q: %w", served, err)
		}
		g.served = netip.AddrPortFrom(ap.Addr().WithZone("").Unmap(), ap.Port())
	}
	for _, h := range allowedHosts {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		p, err := parseHostPattern(h)
		if err != nil {
			return nil, err
		}
		g.allowed = append(g.allowed, p)
	}
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.refused(r, "cross-origin request")
		http.Error(w, "riverbus: refusing a cross-origin request that would change state; use the UI from its own address", http.StatusForbidden)
	}))
	g.protected = cop.Handler(next)
	return g, nil
}

// ErrBadAllowedHost is wrapped by Guard's error for an allow-list entry it
// cannot use.
var ErrBadAllowedHost = errors.New("allowed hosts: want host or host:port")

type hostPattern struct {
	host string // lower case, no brackets, no trailing dot
	port string // "" matches any port
}

func parseHostPattern(s string) (hostPattern, error) {
	if strings.ContainsAny(s, "/@?# ") {
		return hostPattern{}, fmt.Errorf("%w, got %q", ErrBadAllowedHost, s)
	}
	host, port, ok := splitHost(s)
	if !ok || host == "" {
		return hostPattern{}, fmt.Errorf("%w, got %q", ErrBadAllowedHost, s)
	}
	return hostPattern{host: host, port: port}, nil
}

// splitHost splits a Host header value into a normalised host and its port
// ("" when none is given).
func splitHost(hostport string) (host, port string, ok bool) {
	host = hostport
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		host, port = h, p
	} else if strings.Count(hostport, ":") > 1 && !strings.HasPrefix(hostport, "[") {
		// A bare IPv6 address without brackets or port.
		if _, err := netip.ParseAddr(hostport); err != nil {
			return "", "", false
		}
	} else if strings.Contains(hostport, ":") && !strings.HasSuffix(hostport, "]") {
		return "", "", false
	}
	host = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(host, "]"), "["), ".")
	return strings.ToLower(host), port, true
}

type guard struct {
	next, protected http.Handler
	served          netip.AddrPort
	allowed         []hostPattern
	logger          *slog.Logger
	lastLog         atomic.Int64 // unix nanoseconds of the last refusal logged
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !g.hostAllowed(r) {
		g.refused(r, "unknown Host")
		http.Error(w, fmt.Sprintf("riverbus: refusing a request for host %q: it is not an address this server answers to "+
			"(a proxy's name must be listed in RIVERBUS_UI_ALLOWED_HOSTS)", r.Host), http.StatusForbidden)
		return
	}
	g.protected.ServeHTTP(w, r)
}

// refused logs a refusal, at most one every refusalLogInterval: a page may
// send them in a loop.
func (g *guard) refused(r *http.Request, why string) {
	now := time.Now().UnixNano()
	last := g.lastLog.Load()
	if now-last < int64(refusalLogInterval) || !g.lastLog.CompareAndSwap(last, now) {
		return
	}
	g.logger.Warn("http: refused a request a web page may have forged (further refusals within a minute are not logged)",
		"why", why, "method", r.Method, "path", r.URL.Path, "host", r.Host, "origin", r.Header.Get("Origin"),
		"sec_fetch_site", r.Header.Get("Sec-Fetch-Site"), "remote", r.RemoteAddr)
}

const refusalLogInterval = time.Minute

func (g *guard) hostAllowed(r *http.Request) bool {
	host, port, ok := splitHost(r.Host)
	if !ok || host == "" {
		return false
	}
	for _, p := range g.allowed {
		if p.host == host && (p.port == "" || p.port == port) {
			return true
		}
	}
	if !g.served.IsValid() {
		return false
	}
	servedPort := fmt.Sprint(g.served.Port())
	if port != servedPort {
		return false
	}
	ip, err := netip.ParseAddr(host)
	isName := err != nil
	if !isName {
		ip = ip.WithZone("").Unmap()
	}
	served := g.served.Addr()
	if served.IsUnspecified() {
		// Every interface: the address this request arrived on.
		if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			if ap, err := netip.ParseAddrPort(la.String()); err == nil {
				served = ap.Addr().WithZone("").Unmap()
			}
		}
	}
	if served.IsLoopback() {
		return host == "localhost" || (!isName && ip.IsLoopback())
	}
	return !isName && ip == served
}
