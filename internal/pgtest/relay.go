package pgtest

import (
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// Relay puts a TCP relay on 127.0.0.1 in front of the server of rawURL (a
// URL from NewDatabase) and returns rawURL through it. Before relaying the
// n-th connection (from 1) it calls admit(n), which may hold the
// connection back (sleep) or refuse it: false closes the client's
// connection unanswered, as a server that went away does. The relay stops
// when the test ends.
func Relay(t TB, rawURL string, admit func(n int64) bool) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(rawURL)
	if err != nil {
		t.Fatalf("pgtest: relay: %v", err)
	}
	target := net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pgtest: relay: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	var count atomic.Int64
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			n := count.Add(1)
			go func() {
				defer client.Close()
				if !admit(n) {
					return
				}
				server, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer server.Close()
				go io.Copy(server, client) //nolint:errcheck
				io.Copy(client, server)    //nolint:errcheck
			}()
		}
	}()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme == "" {
		// key=value form: a later key wins
		return strings.TrimSpace(rawURL) + " host=127.0.0.1 port=" + port
	}
	u.Host = net.JoinHostPort("127.0.0.1", port)
	q := u.Query()
	q.Del("host")
	q.Del("port")
	u.RawQuery = q.Encode()
	return u.String()
}
