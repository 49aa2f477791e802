//go:build e2e

package rollout

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/statefulops/statefulops/e2e/framework"
)

// warnings collects the warnings the API server sends (the Warning headers kubectl prints).
type warnings struct {
	mu   sync.Mutex
	text []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.text = append(w.text, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.text
	w.text = nil
	return out
}

// TestAliasWarning (PR-01): a PhasedRollout written with spec.standardRollingUpdate, the later public
// code's name of spec.skipCheck, is accepted, and the API server's answer carries a warning naming
// the canonical field, as `kubectl apply` prints it (the policy rollout-operator-alias-warnings of
// deploy/rollout-operator.yaml, action Warn). One written with spec.skipCheck gets none.
func TestAliasWarning(t *testing.T) {
	require.NoError(t, framework.InstallManifestOnce("rollout-operator"))
	ns := framework.NewNamespace(t)
	w := &warnings{}
	cfg := rest.CopyConfig(framework.RESTConfig)
	cfg.WarningHandler = w
	c, err := client.New(cfg, client.Options{Scheme: framework.Client.Scheme()})
	require.NoError(t, err)
	create := func(name, field string) []string {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "sts.plus/v1alpha1", "kind": "PhasedRollout",
			"metadata": map[string]any{"name": name, "namespace": ns},
			"spec":     map[string]any{"targetRef": "web", field: true},
		}}
		w.take()
		require.NoError(t, c.Create(t.Context(), obj), "%s is accepted", field)
		return w.take()
	}

	// A new policy takes effect once the API server has loaded it: new objects until then.
	var got []string
	i := 0
	require.Eventually(t, func() bool {
		i++
		got = create(fmt.Sprintf("alias-%d", i), "standardRollingUpdate")
		return len(got) > 0
	}, framework.Timeout, framework.Tick, "a warning for spec.standardRollingUpdate")
	require.Len(t, got, 1, "one warning for the alias")
	// The API server words it "Validation failed for ValidatingAdmissionPolicy ...: <message>".
	assert.Contains(t, got[0], "spec.standardRollingUpdate is an alias of spec.skipCheck")
	assert.Contains(t, got[0], "set spec.skipCheck instead")

	assert.Empty(t, create("canonical", "skipCheck"), "no warning for the canonical field")
}
