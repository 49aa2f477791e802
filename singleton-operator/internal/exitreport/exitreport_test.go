package exitreport

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Only the exact forms the wrapper writes are markers: anything else is an exit the sidecar cannot
// vouch for.
func TestParseMarker(t *testing.T) {
	for in, want := range map[string]Marker{
		"running\n":    {},
		"exited 0\n":   {Exited: true},
		"exited 137\n": {Exited: true, Code: 137},
	} {
		got, err := parseMarker(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "running", "exited\n", "exited 7", "exited x\n", "exited 7\n\n", " running\n", "stopped\n"} {
		_, err := parseMarker(in)
		assert.Error(t, err, "%q", in)
	}
}

// The wrapper's side and the sidecar's side of the files, in one process (the process tests in
// cmd/singleton-wrapper run them in the real binaries, locks held by living processes).
func TestFenceAndMarkers(t *testing.T) {
	dir, signalDir := t.TempDir(), t.TempDir()
	stopping := StoppingFile(filepath.Join(signalDir, "start-signal"))
	assert.Equal(t, filepath.Join(signalDir, "stopping"), stopping)

	_, err := WaitExited(dir, "app")
	require.Error(t, err, "no lock, no marker: no wrapper ran")

	stop, err := MarkRunning(dir, "app", stopping)
	require.NoError(t, err)
	require.False(t, stop)
	raw, err := os.ReadFile(filepath.Join(dir, "app"))
	require.NoError(t, err)
	assert.Equal(t, "running\n", string(raw))
	info, err := os.Stat(filepath.Join(dir, "app"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), info.Mode().Perm(), "readable by a sidecar running as another user")

	require.NoError(t, os.WriteFile(filepath.Join(dir, "app.lock"), nil, 0o644)) // free: the wrapper is gone
	_, err = WaitExited(dir, "app")
	require.Error(t, err, `"running" with the lock free: the wrapper died uncleanly`)

	require.NoError(t, MarkExited(dir, "app", 143))
	m, err := WaitExited(dir, "app")
	require.NoError(t, err)
	assert.Equal(t, Marker{Exited: true, Code: 143}, m)

	require.NoError(t, Fence(dir, stopping))
	assert.FileExists(t, stopping)
	stop, err = MarkRunning(dir, "app", stopping)
	require.NoError(t, err)
	assert.True(t, stop, "fenced: the app must not start")
	raw, err = os.ReadFile(filepath.Join(dir, "app"))
	require.NoError(t, err)
	assert.Equal(t, "exited 143\n", string(raw), "a fenced wrapper leaves the marker as it is")

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.ElementsMatch(t, []string{"app", "app.lock"}, names, "no temporary file left behind")
}
