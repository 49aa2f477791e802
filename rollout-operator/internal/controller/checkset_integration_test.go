//go:build integration

package controller

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
)

// The features of issue 18 together: a dry run, a webhook of spec.check and the Secret grant each
// see every check of spec.checks, not only spec.check.

// queriesOf counts the queries c ran whose expression starts with prefix.
func queriesOf(c *fakeChecker, prefix string) int {
	n := 0
	for _, q := range c.recorded() {
		if strings.HasPrefix(q.Expr, prefix) {
			n++
		}
	}
	return n
}

// TestAnalysisOnlyRunsEveryCheckOfTheSet: a dry run of a PhasedRollout whose checks are all in
// spec.checks simulates every step with all of them, and moves nothing.
func TestAnalysisOnlyRunsEveryCheckOfTheSet(t *testing.T) {
	checker := newFakeChecker(VerdictPass)
	startOperator(t, checker)
	f, log := idleRollout(t, 2, func(pr *rolloutv1alpha1.PhasedRollout) {
		pr.Spec.AnalysisOnly = true
		pr.Spec.Check = rolloutv1alpha1.Check{}
		pr.Spec.Checks = []rolloutv1alpha1.NamedCheck{
			promCheck("errors", "http://prometheus:9090", `errors{namespace="{{namespace}}",pod="{{pod}}"} > 0`),
			promCheck("latency", "http://prometheus:9090", `latency{namespace="{{namespace}}",pod="{{pod}}"} > 0`),
		}
	})
	f.newRevision("web-r2")
	require.Eventually(t, func() bool {
		d := f.rollout().Status.DryRun
		return d != nil && d.Revision == "web-r2" && d.Step == nil && d.WouldAdvance == rolloutv1alpha1.EventWouldAdvance
	}, wait, tick, "the dry run completes")
	assert.Contains(t, f.rollout().Status.DryRun.Message, "would be complete")
	values, _ := log.get()
	assert.Equal(t, []int32{2}, values, "the partition never moved")
	// Three simulated steps (partition 2, 1, 0), each running both checks once.
	assert.Equal(t, 3, queriesOf(checker, `errors{namespace="`+f.ns+`"`))
	assert.Equal(t, 3, queriesOf(checker, `latency{namespace="`+f.ns+`"`))
}

// TestSeedWebhookBesideChecks: a webhook gate in spec.check stays a check of every step when
// spec.checks adds more: the partition waits for the gate although the other check passes.
func TestSeedWebhookBesideChecks(t *testing.T) {
	var open atomic.Bool
	g := newGate(t, func(w http.ResponseWriter, _ *http.Request) {
		if !open.Load() {
			w.WriteHeader(http.StatusConflict)
		}
	})
	startOperator(t, newFakeChecker(VerdictPass))
	f := newFixture(t, 2, 0)
	f.simulateStatefulSetController()
	f.createRollout(webhookRollout(g.srv.URL+"/gate"), func(pr *rolloutv1alpha1.PhasedRollout) {
		pr.Spec.Check.InitialDelaySeconds = ptr.To[int32](0)
		pr.Spec.Check.PeriodSeconds = 1
		pr.Spec.Check.SuccessThreshold = 1
		pr.Spec.Checks = []rolloutv1alpha1.NamedCheck{promCheck("errors", "http://prometheus:9090", `errors{pod="{{pod}}"} > 0`)}
	})
	pr := f.rollToAndWaitRuns(rolloutv1alpha1.SeedCheckName, 3)
	assert.Equal(t, int32(2), f.partition(), "the refusing gate of spec.check holds the step")
	assert.True(t, checkStatus(pr, "errors").Passed)
	assert.Equal(t, rolloutv1alpha1.CheckResultFail, checkStatus(pr, rolloutv1alpha1.SeedCheckName).LastResult)
	open.Store(true)
	f.waitRolledTo("web-r2")
}

// TestSecretAccessForAChecksElement: a Secret named by a spec.checks element gets the operator's
// per-namespace grant, and the grant stays while the PhasedRollout names it (the grant controller
// reconciles the namespace on every change of a PhasedRollout there).
func TestSecretAccessForAChecksElement(t *testing.T) {
	ctx := context.Background()
	sa := installManifestRBAC(t)
	asOperator := rest.CopyConfig(suite.Config)
	asOperator.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + sa.Namespace + ":" + sa.Name}
	startOperatorWith(t, asOperator, newFakeChecker(VerdictPass))
	f := newFixture(t, 1, 0)
	f.simulateStatefulSetController()
	f.createSecret("prom-secret", map[string]string{"token": "tok"})
	f.createRollout(withChecks(promCheck("errors", "http://prometheus:9090", `errors{pod="{{pod}}"} > 0`, func(c *rolloutv1alpha1.NamedCheck) {
		c.Query.SecretRef = "prom-secret"
	})))
	key := client.ObjectKey{Namespace: f.ns, Name: SecretReaderRoleBinding}
	require.Eventually(t, func() bool { return suite.Client.Get(ctx, key, &rbacv1.RoleBinding{}) == nil }, wait, tick,
		"a checks element's secretRef gets the secret reader bound in the PhasedRollout's namespace")
	f.waitPartition(1)
	f.newRevision("web-r2")
	f.waitRolledTo("web-r2")
	// A change of the PhasedRollout reconciles the grant of its namespace: it must keep the binding.
	f.updateRollout(func(pr *rolloutv1alpha1.PhasedRollout) { pr.Spec.Checks[0].PeriodSeconds = 2 })
	require.Never(t, func() bool { return suite.Client.Get(ctx, key, &rbacv1.RoleBinding{}) != nil }, 3*time.Second, tick,
		"the grant stays while a checks element names the Secret")
}
