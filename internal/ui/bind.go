package ui

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// ErrAuthRequired is wrapped by CheckBind's and CheckMetricsBind's error for
// an address reachable from other hosts when no credentials are set.
var ErrAuthRequired = errors.New("a non-loopback address requires a user and a password")

// CheckBind returns nil when River UI may listen on addr (host:port): a
// loopback address (127.0.0.0/8, ::1 or localhost) always, any other address
// only with both user and password set. An empty host (":8080") listens on
// every interface, so it needs them too. The error for a refused address
// wraps ErrAuthRequired and says what to do.
func CheckBind(addr, user, password string) error {
	return checkBind("River UI", "UI", "cancel, retry or delete jobs and read every event", "127.0.0.1:8080", addr, user, password)
}

// CheckMetricsBind is CheckBind for the metrics endpoint, whose credentials
// are RIVERBUS_METRICS_USER and RIVERBUS_METRICS_PASSWORD.
func CheckMetricsBind(addr, user, password string) error {
	return checkBind("metrics", "METRICS", "read every pool's name and figures and load the database with scrapes", "127.0.0.1:9090", addr, user, password)
}

// CheckProcessMetricsBind is CheckMetricsBind for the endpoint of one
// process's own metrics (riverbus fanout and work), which name pools but
// read nothing from the database.
func CheckProcessMetricsBind(addr, user, password string) error {
	return checkBind("process metrics", "METRICS", "read the pools' names and this process's figures", "127.0.0.1:9091", addr, user, password)
}

func checkBind(what, env, risk, example, addr, user, password string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s address must be host:port, got %q: %w", what, addr, err)
	}
	if user != "" && password != "" {
		return nil
	}
	if isLoopback(host) {
		return nil
	}
	where := "host " + host
	if host == "" {
		where = "every interface"
	}
	return fmt.Errorf("refusing to serve %s on %s (%s) without authentication: anyone who can reach it could %s. "+
		"Set RIVERBUS_%s_USER and RIVERBUS_%s_PASSWORD, or listen on a loopback address such as %s: %w",
		what, addr, where, risk, env, env, example, ErrAuthRequired)
}

// isLoopback reports whether host names only this machine.
func isLoopback(host string) bool {
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		// Another host name: it may resolve to any interface.
		return false
	}
	return ip.WithZone("").Unmap().IsLoopback()
}
