// Package redact hides the credentials a URL may carry before the URL, or
// a text that quotes it, is shown: in job errors (River stores them, River
// UI and `riverbus status` show them), logs and command output.
//
// A webhook's URL may hold a password (https://user:pw@host/hook), a token
// as its user name (https://TOKEN@host/) or in its query
// (https://host/hook?token=…), and Go's *url.Error quotes the whole URL in
// its message (`Post "https://user:pw@host/hook?token=x": dial tcp …`). URL
// keeps what an operator needs to tell endpoints apart (scheme, host, port,
// path, the user name beside a password and the query's keys) and masks the
// rest; Text does the same to every URL inside a text.
package redact

import (
	"encoding/base64"
	"net/url"
	"regexp"
	"strings"
)

// Mask replaces each hidden part.
const Mask = "xxxxx"

// unparsable is what URL returns for a text url.Parse refuses: it could be
// anything, credentials included.
const unparsable = "(unparsable URL)"

// URL returns raw with its password, every query value and its fragment
// replaced by Mask: https://user:pw@host/hook?token=abc&v=1#f becomes
// https://user:xxxxx@host/hook?token=xxxxx&v=xxxxx#xxxxx. A user name
// without a password is masked too (it is then the credential, as in
// https://TOKEN@host/), and so is a query item without "=" (?TOKEN). The
// query's keys and their order are kept. A raw url.Parse refuses gives
// "(unparsable URL)".
func URL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return unparsable
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), Mask)
		} else {
			u.User = url.User(Mask)
		}
	}
	if u.RawQuery != "" {
		items := strings.Split(u.RawQuery, "&")
		for i, item := range items {
			if key, _, ok := strings.Cut(item, "="); ok {
				items[i] = key + "=" + Mask
			} else if item != "" {
				items[i] = Mask
			}
		}
		u.RawQuery = strings.Join(items, "&")
	}
	if u.Fragment != "" || u.RawFragment != "" {
		u.Fragment, u.RawFragment = Mask, ""
	}
	return u.String()
}

// urlInText finds what looks like an absolute URL in a text: a scheme,
// "://", and everything up to white space or a quote (Go quotes URLs in
// its errors with "…").
var urlInText = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>` + "`" + `]+`)

// Text returns s with every URL in it replaced by URL's form of it: for
// error texts and log lines that may quote a URL with credentials.
func Text(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	return urlInText.ReplaceAllStringFunc(s, func(match string) string {
		// Punctuation after a URL is the sentence's ("POST https://h/x: …").
		trimmed := strings.TrimRight(match, ".,:;!?)]}")
		return URL(trimmed) + match[len(trimmed):]
	})
}

// Values returns s with every occurrence of each value replaced by Mask:
// for text a URL's credentials may reach other than inside the URL, such
// as a response body that echoes the request. Values shorter than
// ValueMinLen are skipped (masking every "1" would garble the text); they
// are masked where they appear inside a URL, by Text.
func Values(s string, values []string) string {
	for _, v := range values {
		if len(v) >= ValueMinLen {
			s = strings.ReplaceAll(s, v, Mask)
		}
	}
	return s
}

// ValueMinLen is the shortest value Values masks.
const ValueMinLen = 6

// Credentials returns the parts of raw that URL masks, in the forms they
// may take in other text, for Values: the password (or a user name alone),
// the query's values (and items without "="), the fragment, each as
// written and decoded, and the Basic authorization an HTTP client sends for
// the user info (a receiver's error page may echo it).
func Credentials(raw string) []string {
	u, err := url.Parse(raw)
	if err != nil {
		return nil
	}
	var out []string
	add := func(escaped string) {
		out = append(out, escaped)
		if plain, err := url.QueryUnescape(escaped); err == nil && plain != escaped {
			out = append(out, plain)
		}
	}
	if u.User != nil {
		if pw, ok := u.User.Password(); ok {
			out = append(out, pw, url.UserPassword("", pw).String()[1:])
			out = append(out, base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pw)))
		} else {
			out = append(out, u.User.Username(), base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":")))
		}
	}
	for item := range strings.SplitSeq(u.RawQuery, "&") {
		if _, value, ok := strings.Cut(item, "="); ok {
			add(value)
		} else if item != "" {
			add(item)
		}
	}
	if u.Fragment != "" {
		add(u.EscapedFragment())
	}
	return out
}

// Error returns err with its text passed through mask (Text, say), for an
// error that is about to be stored or shown; nil for nil, and err itself
// when mask changes nothing. errors.Is and errors.As see err.
func Error(err error, mask func(string) string) error {
	if err == nil {
		return nil
	}
	text := mask(err.Error())
	if text == err.Error() {
		return err
	}
	return &maskedError{text: text, err: err}
}

type maskedError struct {
	text string
	err  error
}

func (e *maskedError) Error() string { return e.text }
func (e *maskedError) Unwrap() error { return e.err }
