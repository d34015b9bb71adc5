package riversql

import (
	"strconv"
	"testing"
)

// The limit is written twice, as a number for Go and as text inside the SQL
// constants (which must stay constants); they must agree.
func TestPayloadInlineMaxText(t *testing.T) {
	if got := strconv.Itoa(PayloadInlineMax); got != payloadInlineMaxText {
		t.Fatalf("PayloadInlineMax is %s but the SQL uses %s", got, payloadInlineMaxText)
	}
}
