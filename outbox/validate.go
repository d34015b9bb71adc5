package outbox

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
)

// TypeMaxLength is the longest event or command type, in characters; the
// database enforces the same bound.
const TypeMaxLength = 255

// KeyMaxBytes and TagMaxBytes bound a key and each tag, in bytes, so they
// always fit the btree and GIN indexes; the database enforces the same.
const (
	KeyMaxBytes = 1024
	TagMaxBytes = 1024
)

// EventMaxBytes bounds an event's data and metadata together, in bytes of
// JSON text, so that its job's envelope (one jsonb value, at most 256 MB of
// content, holding every event of a transaction group in grouped pools)
// always fits. The database refuses more than the same in stored (binary)
// jsonb size (CHECK riverbus_event_size, migration 007).
const EventMaxBytes = 64 << 20

// EventMaxDepth bounds how deeply an event's data and metadata nest (arrays
// and objects), well inside the 10,000 levels encoding/json accepts around
// the envelope the value is delivered in. The database does not check it:
// measuring it walks the whole value on every insert. An event appended by
// SQL past encoding/json's limit becomes a dead letter of the pools it
// matches (docs/operations.md, "Dead letters").
const EventMaxDepth = 1000

// validateEvents checks events the way the database's CHECK constraints do,
// and the inputs the database would reject with a less useful error
// (invalid UTF-8, NUL characters, JSON it cannot store).
func validateEvents(events []Event) error {
	if len(events) == 0 {
		return &ValidationError{Index: -1, Field: "events", Reason: "must not be empty"}
	}
	var ids map[uuid.UUID]int
	for i, e := range events {
		invalid := func(field, reason string) error {
			return &ValidationError{Index: i, Field: field, Reason: reason}
		}
		if field, reason := checkType("Type", e.Type); reason != "" {
			return invalid(field, reason)
		}
		if reason := checkText(e.Key); reason != "" {
			return invalid("Key", reason)
		}
		if len(e.Key) > KeyMaxBytes {
			return invalid("Key", fmt.Sprintf("must be at most %d bytes, got %d", KeyMaxBytes, len(e.Key)))
		}
		for j, tag := range e.Tags {
			if reason := checkTag(tag); reason != "" {
				return invalid(fmt.Sprintf("Tags[%d]", j), reason)
			}
		}
		if reason := checkData(e.Data); reason != "" {
			return invalid("Data", reason)
		}
		if reason := checkMetadata(e.Metadata); reason != "" {
			return invalid("Metadata", reason)
		}
		if n := len(e.Data) + len(e.Metadata); n > EventMaxBytes {
			return invalid("Data", fmt.Sprintf("must be at most %d bytes together with Metadata, got %d", EventMaxBytes, n))
		}
		if !e.OccurredAt.IsZero() && (e.OccurredAt.Year() < 1 || e.OccurredAt.Year() > 9999) {
			return invalid("OccurredAt", fmt.Sprintf("must be in years 1 to 9999, got %s", e.OccurredAt))
		}
		if e.Version < 0 || e.Version > VersionMax {
			return invalid("Version", fmt.Sprintf("must be 1 to %d (0 means 1), got %d", VersionMax, e.Version))
		}
		if e.EventID != uuid.Nil {
			if ids == nil {
				ids = make(map[uuid.UUID]int)
			}
			if first, ok := ids[e.EventID]; ok {
				return invalid("EventID", fmt.Sprintf("must be unique, %s is also the id of event %d", e.EventID, first))
			}
			ids[e.EventID] = i
		}
	}
	return nil
}

// validateCommand checks a command like an event.
func validateCommand(c Command) error {
	invalid := func(field, reason string) error {
		return &ValidationError{Index: -1, Field: "Command." + field, Reason: reason}
	}
	if field, reason := checkType("Type", c.Type); reason != "" {
		return invalid(field, reason)
	}
	if reason := checkData(c.Data); reason != "" {
		return invalid("Data", reason)
	}
	if reason := checkMetadata(c.Metadata); reason != "" {
		return invalid("Metadata", reason)
	}
	if n := len(c.Data) + len(c.Metadata); n > EventMaxBytes {
		return invalid("Data", fmt.Sprintf("must be at most %d bytes together with Metadata, got %d", EventMaxBytes, n))
	}
	return nil
}

// validateQuery checks the items of a query; name prefixes the field names.
func validateQuery(name string, q Query) error {
	for i, item := range q {
		field := fmt.Sprintf("%s[%d]", name, i)
		if len(item.Types) == 0 && len(item.Tags) == 0 {
			return &ValidationError{Index: -1, Field: field, Reason: "must have at least one type or tag"}
		}
		for j, typ := range item.Types {
			if f, reason := checkType(fmt.Sprintf("%s.Types[%d]", field, j), typ); reason != "" {
				return &ValidationError{Index: -1, Field: f, Reason: reason}
			}
		}
		for j, tag := range item.Tags {
			if reason := checkTag(tag); reason != "" {
				return &ValidationError{Index: -1, Field: fmt.Sprintf("%s.Tags[%d]", field, j), Reason: reason}
			}
		}
	}
	return nil
}

func validateCondition(c AppendCondition) error {
	if len(c.FailIfEventsMatch) == 0 && len(c.IdempotencyQuery) == 0 {
		return &ValidationError{Index: -1, Field: "AppendCondition", Reason: "must have FailIfEventsMatch or IdempotencyQuery items"}
	}
	if c.After < 0 {
		return &ValidationError{Index: -1, Field: "AppendCondition.After", Reason: fmt.Sprintf("must not be negative, got %d", c.After)}
	}
	if c.LockTimeout < 0 {
		return &ValidationError{Index: -1, Field: "AppendCondition.LockTimeout", Reason: fmt.Sprintf("must not be negative, got %s", c.LockTimeout)}
	}
	if err := validateQuery("AppendCondition.FailIfEventsMatch", c.FailIfEventsMatch); err != nil {
		return err
	}
	return validateQuery("AppendCondition.IdempotencyQuery", c.IdempotencyQuery)
}

func validateReadParams(p ReadParams) error {
	if p.After < 0 {
		return &ValidationError{Index: -1, Field: "ReadParams.After", Reason: fmt.Sprintf("must not be negative, got %d", p.After)}
	}
	if p.Limit < 0 {
		return &ValidationError{Index: -1, Field: "ReadParams.Limit", Reason: fmt.Sprintf("must not be negative, got %d", p.Limit)}
	}
	if reason := checkText(p.Key); reason != "" {
		return &ValidationError{Index: -1, Field: "ReadParams.Key", Reason: reason}
	}
	return validateQuery("ReadParams.Query", p.Query)
}

func checkType(field, typ string) (string, string) {
	if typ == "" {
		return field, "must not be empty"
	}
	if reason := checkText(typ); reason != "" {
		return field, reason
	}
	if n := utf8.RuneCountInString(typ); n > TypeMaxLength {
		return field, fmt.Sprintf("must be at most %d characters, got %d", TypeMaxLength, n)
	}
	return "", ""
}

// checkText rejects what a PostgreSQL text column cannot hold.
func checkText(s string) string {
	if !utf8.ValidString(s) {
		return "must be valid UTF-8"
	}
	if strings.IndexByte(s, 0) >= 0 {
		return "must not contain NUL characters"
	}
	return ""
}

// checkTag mirrors riverbus_tags_valid: name=value with a non-empty name.
func checkTag(tag string) string {
	if strings.IndexByte(tag, '=') <= 0 {
		return fmt.Sprintf("must be name=value with a non-empty name, got %q", tag)
	}
	if len(tag) > TagMaxBytes {
		return fmt.Sprintf("must be at most %d bytes, got %d", TagMaxBytes, len(tag))
	}
	return checkText(tag)
}

func checkData(data json.RawMessage) string {
	if len(data) == 0 {
		return "must not be empty"
	}
	return checkJSON(data)
}

// checkMetadata accepts an empty value (stored as {}) or a JSON object.
func checkMetadata(metadata json.RawMessage) string {
	if len(metadata) == 0 {
		return ""
	}
	if reason := checkJSON(metadata); reason != "" {
		return reason
	}
	if kind := jsonKind(metadata); kind != "object" {
		return "must be a JSON object, got " + kind
	}
	return ""
}

// checkJSON accepts JSON that a jsonb column can store.
func checkJSON(data json.RawMessage) string {
	if !json.Valid(data) {
		return "must be valid JSON"
	}
	if !utf8.Valid(data) {
		return "must be valid UTF-8"
	}
	if hasNULEscape(data) {
		return `must not contain \u0000, which PostgreSQL jsonb cannot store`
	}
	if d := jsonDepth(data); d > EventMaxDepth {
		return fmt.Sprintf("must nest at most %d levels deep, got %d", EventMaxDepth, d)
	}
	return ""
}

// jsonDepth returns how deeply a valid JSON text nests arrays and objects.
func jsonDepth(data []byte) int {
	depth, deepest := 0, 0
	inString := false
	for i := 0; i < len(data); i++ {
		c := data[i]
		switch {
		case inString:
			switch c {
			case '"':
				inString = false
			case '\\':
				i++ // skip the escaped character
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
			deepest = max(deepest, depth)
		case c == ']' || c == '}':
			depth--
		}
	}
	return deepest
}

// jsonKind names the kind of a valid JSON value by its first byte.
func jsonKind(data []byte) string {
	for _, b := range data {
		switch b {
		case ' ', '\t', '\n', '\r':
			continue
		case '{':
			return "object"
		case '[':
			return "array"
		case '"':
			return "string"
		case 't', 'f':
			return "boolean"
		case 'n':
			return "null"
		default:
			return "number"
		}
	}
	return "nothing"
}

// hasNULEscape reports whether a valid JSON text has a \u0000 escape in one
// of its strings.
func hasNULEscape(data []byte) bool {
	inString := false
	for i := 0; i < len(data); i++ {
		switch c := data[i]; {
		case !inString:
			inString = c == '"'
		case c == '"':
			inString = false
		case c == '\\':
			if i+5 < len(data) && data[i+1] == 'u' && string(data[i+2:i+6]) == "0000" {
				return true
			}
			i++ // skip the escaped character
		}
	}
	return false
}
