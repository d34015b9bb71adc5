package cli

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestProgressBar(t *testing.T) {
	bar := progressBar(50, 100, 60) // 60 per minute: one a second
	require.Contains(t, bar, "[###############...............]")
	require.Contains(t, bar, "50.0%  50 behind  ETA 50s")
	require.Contains(t, progressBar(0, 10, 0), "ETA unknown")
	require.Contains(t, progressBar(10, 0, 0), "100.0%")

	require.Empty(t, progress(&poolReport{Checkpoint: 9500}, 10_000), "no bar when less than 1000 behind")
	require.NotEmpty(t, progress(&poolReport{Checkpoint: 10}, 10_000))
}
