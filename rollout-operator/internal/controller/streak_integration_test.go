//go:build integration

package controller

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
)

// The passes in a row that move the partition are what the operator saw, not what its status says:
// a lost status write of a failing check, or a status written by an earlier process, must not let
// one more pass move the partition (streak.go).

// scriptedChecker answers the queries of its namespace (namespacedQuery) with the verdicts of its
// script in turn, then Fail; it records the StatefulSet's partition at each answer (the partition a
// move made after answer i shows from answer i+1). When it answers Fail, it arms failStatus: the
// status write of that reconcile is lost. A query of another namespace (a rollout another test left)
// is answered Fail and spends nothing of the script.
type scriptedChecker struct {
	mu         sync.Mutex
	ns         string
	script     []Verdict
	partitions []int32
	failStatus *atomic.Bool
}

func (c *scriptedChecker) Check(ctx context.Context, q Query) CheckResult {
	if !strings.Contains(q.Expr, `namespace="`+c.ns+`"`) {
		return CheckResult{Verdict: VerdictFail, Message: "not this test's rollout"}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	v := VerdictFail
	if i := len(c.partitions); i < len(c.script) {
		v = c.script[i]
	}
	p := int32(-1)
	sts := &appsv1.StatefulSet{}
	if err := suite.Client.Get(ctx, client.ObjectKey{Namespace: c.ns, Name: "web"}, sts); err == nil && sts.Spec.UpdateStrategy.RollingUpdate != nil {
		p = ptr.Deref(sts.Spec.UpdateStrategy.RollingUpdate.Partition, -1)
	}
	c.partitions = append(c.partitions, p)
	if v == VerdictFail && c.failStatus != nil && len(c.partitions) <= len(c.script) {
		c.failStatus.Store(true)
	}
	return CheckResult{Verdict: v, Message: "scripted " + v.String()}
}

func (c *scriptedChecker) seen() []int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int32(nil), c.partitions...)
}

// statusFault answers 500 to the next status PATCH of the PhasedRollout "pr" in namespace ns once
// armed, as an API server that lost the write would.
type statusFault struct {
	next  http.RoundTripper
	ns    *string
	armed *atomic.Bool
	hits  atomic.Int32
}

func (f *statusFault) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPatch && strings.HasSuffix(req.URL.Path, "/namespaces/"+*f.ns+"/phasedrollouts/pr/status") && f.armed.CompareAndSwap(true, false) {
		f.hits.Add(1)
		body := `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"injected: status write lost","reason":"InternalError","code":500}`
		return &http.Response{StatusCode: http.StatusInternalServerError, Status: "500 Internal Server Error", Header: http.Header{"Content-Type": []string{"application/json"}},
			Body: io.NopCloser(strings.NewReader(body)), Request: req, ProtoMajor: 1, ProtoMinor: 1}, nil
	}
	return f.next.RoundTrip(req)
}

// lostFailWrite runs a rollout of 3 pods whose first step's check answers Pass, Fail, Pass, Pass with
// the status write of the Fail lost: the partition must move only after the fourth answer.
func lostFailWrite(t *testing.T, mods ...func(*rolloutv1alpha1.PhasedRollout)) {
	var ns string
	armed := &atomic.Bool{}
	fault := &statusFault{ns: &ns, armed: armed}
	cfg := rest.CopyConfig(suite.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { fault.next = rt; return fault }
	checker := &scriptedChecker{script: []Verdict{VerdictPass, VerdictFail, VerdictPass, VerdictPass}, failStatus: armed}
	f := newFixture(t, 3, 0)
	ns, checker.ns = f.ns, f.ns
	startOperatorWith(t, cfg, checker)
	f.simulateStatefulSetController()
	f.createRollout(mods...)
	f.waitPartition(3)
	f.newRevision("web-r2")
	f.waitPartition(2)
	seen := checker.seen()
	require.GreaterOrEqual(t, len(seen), 4, "the partition moved after %d answers (pass, FAIL, pass must not reach successThreshold=2)", len(seen))
	assert.Equal(t, []int32{3, 3, 3, 3}, seen[:4], "the partition moved before the fourth answer (pass, FAIL, pass must not reach successThreshold=2)")
	assert.Equal(t, int32(1), fault.hits.Load(), "the status write of the Fail was lost once")
}

// TestLostStatusWriteOfAFailBreaksTheStreak: spec.check (the seed path, step.go runCheck).
func TestLostStatusWriteOfAFailBreaksTheStreak(t *testing.T) {
	lostFailWrite(t, withNamespacedQuery)
}

// TestLostStatusWriteOfAFailBreaksTheStreakOfChecks: spec.checks (checks.go runChecks).
func TestLostStatusWriteOfAFailBreaksTheStreakOfChecks(t *testing.T) {
	lostFailWrite(t, withChecks(promCheck("errors", "prom:9090", namespacedQuery, func(c *rolloutv1alpha1.NamedCheck) { c.SuccessThreshold = 2 })))
}

// TestRestartReEarnsTheStreak: a status that records one pass at the current partition, written by an
// earlier process, counts nothing: the new process needs two passes of its own before the move.
func TestRestartReEarnsTheStreak(t *testing.T) {
	for _, tc := range []struct {
		name string
		mods []func(*rolloutv1alpha1.PhasedRollout)
	}{
		{"check", []func(*rolloutv1alpha1.PhasedRollout){withNamespacedQuery}},
		{"checks", []func(*rolloutv1alpha1.PhasedRollout){withChecks(promCheck("errors", "prom:9090", namespacedQuery, func(c *rolloutv1alpha1.NamedCheck) { c.SuccessThreshold = 2 }))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 3, 0)
			stop := startOperator(t, &scriptedChecker{ns: f.ns})
			f.simulateStatefulSetController()
			f.createRollout(tc.mods...)
			f.waitPartition(3)
			f.newRevision("web-r2")
			f.waitPhase(rolloutv1alpha1.PhaseRolling)
			stop()
			// The earlier process's status: one pass at the current partition.
			require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
				pr := f.rollout()
				st := pr.Status.RollingPodStatus
				st.ConsecutiveSuccessfulChecks, st.ConsecutiveFailedChecks, st.LastCheckTime = 1, 0, nil
				for i := range st.Checks {
					st.Checks[i].ConsecutiveSuccessfulChecks, st.Checks[i].ConsecutiveFailedChecks, st.Checks[i].LastCheckTime = 1, 0, nil
				}
				return suite.Client.Status().Update(context.Background(), pr)
			}))
			require.Equal(t, int32(3), f.partition())
			checker := &scriptedChecker{ns: f.ns, script: []Verdict{VerdictPass, VerdictPass}}
			startOperator(t, checker)
			f.waitPartition(2)
			seen := checker.seen()
			require.GreaterOrEqual(t, len(seen), 2, "the partition moved after %d fresh answers", len(seen))
			assert.Equal(t, []int32{3, 3}, seen[:2], "one fresh pass moved the partition on the earlier process's streak")
		})
	}
}
