package ui

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// ErrAuthRequired is returned by CheckBind for an address reachable from
// other hosts when no credentials are set.
var ErrAuthRequired = errors.New("River UI on a non-loopback address requires RIVERBUS_UI_USER and RIVERBUS_UI_PASSWORD")

// CheckBind returns nil when River UI may listen on addr (host:port): a
// loopback address (127.0.0.0/8, ::1 or localhost) always, any other address
// only with both user and password set. An empty host (":8080") listens on
// every interface, so it needs them too. The error for a refused address
// wraps ErrAuthRequired and says what to do.
func CheckBind(addr, user, password string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("UI address must be host:port, got %q: %w", addr, err)
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
	return fmt.Errorf("refusing to serve River UI on %s (%s) without authentication: anyone who can reach it could cancel, retry or delete jobs. "+
		"Set RIVERBUS_UI_USER and RIVERBUS_UI_PASSWORD, or listen on a loopback address such as 127.0.0.1:8080: %w",
		addr, where, ErrAuthRequired)
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
