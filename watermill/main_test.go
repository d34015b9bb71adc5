package watermill_test

import (
	"testing"

	"github.com/riverbus/riverbus/riverbustest"
)

func TestMain(m *testing.M) { riverbustest.Main(m) }
