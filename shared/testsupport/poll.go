// Package testsupport holds the few test helpers that every module's tests share.
package testsupport

import (
	"time"

	"github.com/stretchr/testify/require"
)

// T is the part of *testing.T the helpers use.
type T interface {
	require.TestingT
	Helper()
}

// NeverWithin polls cond in the caller's goroutine every tick for d and fails the test if it ever
// holds. It replaces require.Never, whose condition runs in a goroutine that can outlive the call:
// a last poll still in flight when the test ends sees t.Context() canceled and fails a test that
// had passed.
func NeverWithin(t T, d, tick time.Duration, cond func() bool, msgAndArgs ...any) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if cond() {
			require.Fail(t, "condition held within "+d.String(), msgAndArgs...)
		}
		if !time.Now().Before(deadline) {
			return
		}
		time.Sleep(tick)
	}
}
