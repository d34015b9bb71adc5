package pools_test

import (
	"testing"

	"github.com/riverbus/riverbus/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
