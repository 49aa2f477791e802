//go:build integration

package api_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPhasedRolloutStepsAndStuckPods: spec.steps with pauses in the duration forms users write, and
// recreateStuckPods, are accepted; progressDeadlineSeconds defaults to 600.
func TestPhasedRolloutStepsAndStuckPods(t *testing.T) {
	got := readBack(t, mustApply(t, `
apiVersion: sts.plus/v1alpha1
kind: PhasedRollout
metadata: {name: pr-steps}
spec:
  targetRef: web
  recreateStuckPods: true
  steps:
  - {pods: 1, pause: {duration: 30s}}
  - {pods: 2, pause: {duration: 1h30m}}
  - {pods: 3, pause: {duration: 1.5s}}
  - {pods: 4}
  check: {query: {expr: 'up == 0', url: 'http://prometheus:9090'}}
`))
	require.EqualValues(t, 600, field(t, got, "spec.progressDeadlineSeconds"))
	require.EqualValues(t, true, field(t, got, "spec.recreateStuckPods"))
	steps := field(t, got, "spec.steps").([]any)
	require.Len(t, steps, 4)
	require.EqualValues(t, "1h30m", steps[1].(map[string]any)["pause"].(map[string]any)["duration"])
}
