package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// Headers of a delivery. Go's http.Header canonicalizes names, so the
// Standard Webhooks names ("webhook-id", ...) appear in this form; HTTP
// header names are case-insensitive either way.
const (
	// HeaderID carries the event id (a UUID): the same on every attempt,
	// part of the signed content.
	HeaderID = "Webhook-Id"
	// HeaderTimestamp carries the attempt's time in Unix seconds, part of
	// the signed content.
	HeaderTimestamp = "Webhook-Timestamp"
	// HeaderSignature carries "v1,<base64 HMAC-SHA256>" when the webhook has
	// a secret.
	HeaderSignature = "Webhook-Signature"
	// HeaderIdempotencyKey carries the event id, like HeaderID.
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderPool carries the pool name (the River job kind).
	HeaderPool = "X-Riverbus-Pool"
	// HeaderSequence carries the event's global sequence.
	HeaderSequence = "X-Riverbus-Sequence"
	// HeaderAttempt carries the River attempt, 1 for the first delivery.
	HeaderAttempt = "X-Riverbus-Attempt"
	// HeaderLate is "true" for a late event and absent otherwise.
	HeaderLate = "X-Riverbus-Late"
	// HeaderTraceParent is the W3C trace context of the delivery: the
	// job's work span when the worker process traces (a child of the
	// event's append span), else the append span's context the event
	// carries. Absent when the event was appended outside a trace.
	// HeaderTraceState goes with it when the trace has a tracestate.
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
)

// VerifyToleranceDefault is the tolerance Verify uses when given zero: a
// delivery whose timestamp is more than five minutes from the receiver's
// clock, either way, is rejected. Standard Webhooks recommends five minutes.
const VerifyToleranceDefault = 5 * time.Minute

// SecretPrefix starts a secret written in the Standard Webhooks form,
// "whsec_" followed by the base64 of the key bytes. SecretFromEnv decodes it.
const SecretPrefix = "whsec_"

var (
	// ErrInvalidSignature is returned (wrapped) by Verify when the headers
	// are missing or malformed or no signature matches the content.
	ErrInvalidSignature = errors.New("invalid webhook signature")

	// ErrTimestampOutOfTolerance is returned (wrapped) by Verify when the
	// delivery's timestamp is further from now than the tolerance allows: a
	// replay, or clocks too far apart.
	ErrTimestampOutOfTolerance = errors.New("webhook timestamp out of tolerance")
)

// Sign returns the value of the Webhook-Signature header for a delivery:
// "v1," followed by the standard base64 (with padding) of the HMAC-SHA256,
// keyed with secret, of id + "." + the Unix seconds of ts in decimal + "." +
// body. Sign does not check its arguments; an empty secret gives a
// signature anyone can compute.
func Sign(secret []byte, id string, ts time.Time, body []byte) string {
	return "v1," + base64.StdEncoding.EncodeToString(mac(secret, id, strconv.FormatInt(ts.Unix(), 10), body))
}

func mac(secret []byte, id, ts string, body []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(id))
	h.Write([]byte{'.'})
	h.Write([]byte(ts))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// Verify checks a delivery received with header and body (the raw bytes, as
// read from the request, before any JSON parsing) against secret. It returns
// nil when the Webhook-Id, Webhook-Timestamp and Webhook-Signature headers
// are present, the timestamp is within tolerance of the current time, and
// one of the space-separated "v1,<base64>" entries of Webhook-Signature is
// the signature Sign computes. Entries of other versions are ignored.
//
// tolerance zero means VerifyToleranceDefault; a negative tolerance skips
// the timestamp check (for replaying stored requests, never for live
// traffic). A failed check wraps ErrTimestampOutOfTolerance or
// ErrInvalidSignature; an empty secret is an error of its own.
func Verify(secret []byte, header http.Header, body []byte, tolerance time.Duration) error {
	if len(secret) == 0 {
		return errors.New("verify webhook: secret is empty")
	}
	id := header.Get(HeaderID)
	tsText := header.Get(HeaderTimestamp)
	sigs := header.Get(HeaderSignature)
	switch {
	case id == "":
		return fmt.Errorf("%w: no %s header", ErrInvalidSignature, HeaderID)
	case tsText == "":
		return fmt.Errorf("%w: no %s header", ErrInvalidSignature, HeaderTimestamp)
	case sigs == "":
		return fmt.Errorf("%w: no %s header", ErrInvalidSignature, HeaderSignature)
	}
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %s %q is not Unix seconds", ErrInvalidSignature, HeaderTimestamp, tsText)
	}
	if tolerance == 0 {
		tolerance = VerifyToleranceDefault
	}
	if tolerance > 0 {
		// Compare in seconds: no overflow for absurd timestamps.
		diff := time.Now().Unix() - ts
		limit := int64(tolerance / time.Second)
		if diff > limit {
			return fmt.Errorf("%w: %s %d is %ds old, more than %s", ErrTimestampOutOfTolerance, HeaderTimestamp, ts, diff, tolerance)
		}
		if -diff > limit {
			return fmt.Errorf("%w: %s %d is %ds in the future, more than %s", ErrTimestampOutOfTolerance, HeaderTimestamp, ts, -diff, tolerance)
		}
	}
	want := mac(secret, id, tsText, body)
	for entry := range strings.FieldsSeq(sigs) {
		version, sig, ok := strings.Cut(entry, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(sig)
		if err != nil {
			continue
		}
		if hmac.Equal(got, want) {
			return nil
		}
	}
	return fmt.Errorf("%w: no v1 signature in %s matches", ErrInvalidSignature, HeaderSignature)
}

// SecretFromEnv reads a webhook secret from the environment variable name,
// for a command-line flag like --secret-env WEBHOOK_SECRET that keeps the
// secret itself out of argument lists and shell history.
//
// A value that starts with SecretPrefix ("whsec_", the Standard Webhooks
// form, which its libraries in every language accept) is base64-decoded
// after the prefix, and the key is the decoded bytes. Any other value is
// used as it is, byte for byte. It is an error when the variable is unset or
// empty, when a "whsec_" value is not valid base64, or when the value starts
// or ends with white space (a secret file with a final newline, most
// likely), since the receiver would then compute other signatures.
func SecretFromEnv(name string) ([]byte, error) {
	if name == "" {
		return nil, errors.New("webhook secret: no environment variable named")
	}
	v, ok := os.LookupEnv(name)
	if !ok {
		return nil, fmt.Errorf("webhook secret: environment variable %s is not set", name)
	}
	if v == "" {
		return nil, fmt.Errorf("webhook secret: environment variable %s is empty", name)
	}
	if strings.TrimSpace(v) != v {
		return nil, fmt.Errorf("webhook secret: environment variable %s starts or ends with white space; remove it", name)
	}
	if b64, ok := strings.CutPrefix(v, SecretPrefix); ok {
		key, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return nil, fmt.Errorf("webhook secret: environment variable %s starts with %s but the rest is not valid base64: %w", name, SecretPrefix, err)
		}
		if len(key) == 0 {
			return nil, fmt.Errorf("webhook secret: environment variable %s has no key after %s", name, SecretPrefix)
		}
		return key, nil
	}
	return []byte(v), nil
}
