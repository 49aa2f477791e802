//go:build integration

package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// kstatusOf is cli-utils' status.Compute (the library behind Flux, kpt and kubectl-based deploy tools)
// over the StatefulCluster as the API server returns it.
func (f *fixture) kstatusOf(name string) *status.Result {
	f.t.Helper()
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(f.get(name))
	require.NoError(f.t, err)
	res, err := status.Compute(&unstructured.Unstructured{Object: raw})
	require.NoError(f.t, err)
	return res
}

// waitKstatus waits until kstatus reads want for the StatefulCluster.
func (f *fixture) waitKstatus(name string, want status.Status) {
	f.t.Helper()
	require.EventuallyWithT(f.t, func(c *assert.CollectT) {
		assert.Equal(c, want, f.kstatusOf(name).Status)
	}, wait, tick, "kstatus of %s", name)
}

// waitCondition waits until the condition has the status and reason and returns it.
func (f *fixture) waitCondition(name, condType string, st metav1.ConditionStatus, reason string) *metav1.Condition {
	f.t.Helper()
	var got *metav1.Condition
	require.Eventually(f.t, func() bool {
		got = meta.FindStatusCondition(f.get(name).Status.Conditions, condType)
		return got != nil && got.Status == st && got.Reason == reason
	}, wait, tick, "%s=%s (%s)", condType, st, reason)
	return got
}

// waitEvent waits until exactly one Event of the reason and type was recorded about the StatefulCluster,
// and checks that it is not repeated (one per transition, not one per reconcile) for a while.
func (f *fixture) waitEvent(name, reason, eventType string) {
	f.t.Helper()
	require.Eventually(f.t, func() bool {
		return len(testsupport.Events(f.t, suite.Client, f.ns, "StatefulCluster", name, reason)) > 0
	}, wait, tick, "Event %s", reason)
	time.Sleep(time.Second)
	evs := testsupport.Events(f.t, suite.Client, f.ns, "StatefulCluster", name, reason)
	require.Len(f.t, evs, 1)
	assert.Equal(f.t, 1, testsupport.Occurrences(evs), "Event %s once, not per reconcile", reason)
	assert.Equal(f.t, eventType, evs[0].Type)
}

// makeReady makes a pod of sc Ready once the fake kubelet has started it not Ready (the "notready" hold):
// before that, the kubelet's first status would overwrite it.
func (f *fixture) makeReady(sc, name string) {
	f.t.Helper()
	require.Eventually(f.t, func() bool {
		p := f.pods(sc)[name]
		return p != nil && p.Status.Phase == corev1.PodRunning
	}, wait, tick, "pod %s running", name)
	f.setPodStatus(name, func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	})
}

// invalidResources makes the template's pods invalid for the API server (requests above limits), which
// the CRD's schema cannot see.
func invalidResources(sc *clusterv1alpha1.StatefulCluster) {
	sc.Spec.Template.Spec.Containers[0].Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
	}
}

// TestKstatusOracle: kstatus reads a healthy StatefulCluster Current, one whose pods are not Ready yet
// InProgress (Reconciling=True), and one whose template the API server refuses Failed (Stalled=True,
// InvalidTemplate, one Warning Event, no identity spent on retries); once the template is fixed it
// becomes Ready and Current. observedGeneration is on the status and every condition.
func TestKstatusOracle(t *testing.T) {
	startOperator(t, nil)

	t.Run("healthy", func(t *testing.T) {
		f := newFixture(t)
		f.statefulCluster("h", 2)
		f.waitPods("h", "h-0", "h-1")
		f.waitCondition("h", clusterv1alpha1.ConditionReady, metav1.ConditionTrue, clusterv1alpha1.ReasonReconciled)
		f.waitKstatus("h", status.CurrentStatus)
		sc := f.get("h")
		assert.Equal(t, sc.Generation, sc.Status.ObservedGeneration)
		for _, c := range sc.Status.Conditions {
			assert.Equal(t, sc.Generation, c.ObservedGeneration, "condition %s", c.Type)
		}
		assert.Nil(t, meta.FindStatusCondition(sc.Status.Conditions, clusterv1alpha1.ConditionReconciling))
		assert.Nil(t, meta.FindStatusCondition(sc.Status.Conditions, clusterv1alpha1.ConditionStalled))
	})

	t.Run("progressing", func(t *testing.T) {
		f := newFixture(t)
		f.statefulCluster("p", 2, func(sc *clusterv1alpha1.StatefulCluster) {
			sc.Spec.Template.Annotations = map[string]string{holdAnnotation: "notready"}
		})
		rec := f.waitCondition("p", clusterv1alpha1.ConditionReconciling, metav1.ConditionTrue, clusterv1alpha1.ReasonPodsNotReady)
		assert.Contains(t, rec.Message, "2 live, 0 ready")
		f.waitKstatus("p", status.InProgressStatus)
		f.waitEvent("p", clusterv1alpha1.ReasonPodsNotReady, corev1.EventTypeNormal)
		// The pods get Ready: Current.
		f.makeReady("p", "p-0")
		f.makeReady("p", "p-1")
		f.waitKstatus("p", status.CurrentStatus)
	})

	t.Run("broken", func(t *testing.T) {
		f := newFixture(t)
		f.statefulCluster("b", 2, invalidResources)
		stalled := f.waitCondition("b", clusterv1alpha1.ConditionStalled, metav1.ConditionTrue, clusterv1alpha1.ReasonInvalidTemplate)
		assert.Contains(t, stalled.Message, "spec.containers[0].resources.requests")
		res := f.kstatusOf("b")
		assert.Equal(t, status.FailedStatus, res.Status)
		sc := f.get("b")
		ready := meta.FindStatusCondition(sc.Status.Conditions, clusterv1alpha1.ConditionReady)
		require.NotNil(t, ready)
		assert.Equal(t, metav1.ConditionFalse, ready.Status)
		assert.Equal(t, clusterv1alpha1.ReasonInvalidTemplate, ready.Reason)
		assert.Nil(t, meta.FindStatusCondition(sc.Status.Conditions, clusterv1alpha1.ConditionReconciling))
		f.waitEvent("b", clusterv1alpha1.ReasonInvalidTemplate, corev1.EventTypeWarning)
		// Not retried: no identity is spent, no pod exists, however long it waits.
		next := f.get("b").Status.NextIdentity
		testsupport.NeverWithin(t, 2*time.Second, tick, func() bool {
			return f.get("b").Status.NextIdentity != next || len(f.pods("b")) != 0
		}, "the refused template was retried")

		// Fixed by the user: pods, Ready, Current.
		f.update("b", func(sc *clusterv1alpha1.StatefulCluster) {
			sc.Spec.Template.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
		})
		f.waitCondition("b", clusterv1alpha1.ConditionReady, metav1.ConditionTrue, clusterv1alpha1.ReasonReconciled)
		f.waitKstatus("b", status.CurrentStatus)
		assert.Nil(t, meta.FindStatusCondition(f.get("b").Status.Conditions, clusterv1alpha1.ConditionStalled))
	})
}

// TestHookNoPodCanAnswerStalls: a retire hook (failurePolicy Fail) naming a container port no pod has
// can never be called: Stalled=True (HookPortNotFound) with one Warning Event, kstatus Failed, the
// replacement held back; a template change is the way out, so the pods and the spec decide again.
func TestHookNoPodCanAnswerStalls(t *testing.T) {
	f := newFixture(t)
	startOperator(t, nil)
	f.statefulCluster("k", 2, func(sc *clusterv1alpha1.StatefulCluster) {
		sc.Spec.MembershipHooks = &clusterv1alpha1.MembershipHooks{Retire: &clusterv1alpha1.MembershipHook{
			Path: "/members", Port: intstr.FromString("members"), TimeoutSeconds: 1, FailurePolicy: clusterv1alpha1.FailHookPolicy}}
	})
	f.waitPods("k", "k-0", "k-1")
	f.setPodStatus("k-0", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed })
	stalled := f.waitCondition("k", clusterv1alpha1.ConditionStalled, metav1.ConditionTrue, clusterv1alpha1.ReasonHookPortNotFound)
	assert.Contains(t, stalled.Message, `no container port named "members"`)
	f.waitKstatus("k", status.FailedStatus)
	f.waitEvent("k", clusterv1alpha1.ReasonHookPortNotFound, corev1.EventTypeWarning)
	assert.Nil(t, f.pods("k")["k-2"], "the replacement waits for the retire hook")

	// Dropping the hook lets the replacement through.
	f.update("k", func(sc *clusterv1alpha1.StatefulCluster) { sc.Spec.MembershipHooks = nil })
	f.waitPods("k", "k-1", "k-2")
	f.waitKstatus("k", status.CurrentStatus)
}

// TestWaitingStatesHaveEvents: every waiting state has one Event when it is entered (besides the stalled
// ones above and in TestStuckPodsAreReportedNotReplaced): scaling up, pods not yet available
// (minReadySeconds, while Ready is already True), and a failed write other than a pod's (ReconcileError,
// which had only a condition), each read InProgress by kstatus.
func TestWaitingStatesHaveEvents(t *testing.T) {
	f := newFixture(t)
	var failRevisions atomic.Bool
	failRevisions.Store(true)
	startOperator(t, &interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*appsv1.ControllerRevision); ok && obj.GetNamespace() == f.ns && failRevisions.Load() {
				return apierrors.NewInternalError(errors.New("injected: etcd unavailable"))
			}
			return c.Create(ctx, obj, opts...)
		},
	})

	f.statefulCluster("w", 1, func(sc *clusterv1alpha1.StatefulCluster) { sc.Spec.MinReadySeconds = 3600 })
	rec := f.waitCondition("w", clusterv1alpha1.ConditionReconciling, metav1.ConditionTrue, clusterv1alpha1.ReasonReconcileError)
	assert.Contains(t, rec.Message, "injected: etcd unavailable")
	f.waitCondition("w", clusterv1alpha1.ConditionReplicaFailure, metav1.ConditionTrue, clusterv1alpha1.ReasonReconcileError)
	f.waitKstatus("w", status.InProgressStatus)
	f.waitEvent("w", clusterv1alpha1.ReasonReconcileError, corev1.EventTypeNormal)

	failRevisions.Store(false)
	f.waitPods("w", "w-0")
	f.waitCondition("w", clusterv1alpha1.ConditionReady, metav1.ConditionTrue, clusterv1alpha1.ReasonReconciled)
	f.waitCondition("w", clusterv1alpha1.ConditionReconciling, metav1.ConditionTrue, clusterv1alpha1.ReasonMinimumReplicasUnavailable)
	f.waitKstatus("w", status.InProgressStatus)
	f.waitEvent("w", clusterv1alpha1.ReasonMinimumReplicasUnavailable, corev1.EventTypeNormal)
	assert.Len(t, testsupport.Events(t, suite.Client, f.ns, "StatefulCluster", "w", clusterv1alpha1.ReasonScalingUp), 1)
}

// statusChecker watches every status the operator writes for the StatefulClusters of a namespace and
// checks it against itself and the cluster at that moment: observedGeneration on the status and every
// condition; Stalled and Reconciling never together; Ready=False only with one of them (kstatus never
// reads a StatefulCluster that is not Ready as Current); Ready=True only with readyReplicas = replicas =
// spec.replicas; and status.selector selecting every pod the StatefulCluster controls.
type statusChecker struct {
	mu         sync.Mutex
	violations []string
	writes     int
}

func (f *fixture) checkStatuses() *statusChecker {
	ch := &statusChecker{}
	w, err := suite.Client.Watch(f.t.Context(), &clusterv1alpha1.StatefulClusterList{}, client.InNamespace(f.ns))
	require.NoError(f.t, err)
	go func() {
		for ev := range w.ResultChan() {
			sc, ok := ev.Object.(*clusterv1alpha1.StatefulCluster)
			if !ok || ev.Type == watch.Deleted || sc.Status.ObservedGeneration == 0 {
				continue
			}
			problems := f.statusProblems(sc)
			ch.mu.Lock()
			ch.writes++
			for _, p := range problems {
				ch.violations = append(ch.violations, fmt.Sprintf("rv %s: %s", sc.ResourceVersion, p))
			}
			ch.mu.Unlock()
		}
	}()
	f.t.Cleanup(func() {
		w.Stop()
		ch.mu.Lock()
		defer ch.mu.Unlock()
		f.t.Logf("status checker: %d statuses checked, %d violations", ch.writes, len(ch.violations))
		for _, v := range ch.violations {
			f.t.Errorf("status contradicts itself or the cluster: %s", v)
		}
	})
	return ch
}

func (f *fixture) statusProblems(sc *clusterv1alpha1.StatefulCluster) []string {
	st := sc.Status
	out := testsupport.KstatusProblems(st.Conditions, st.ObservedGeneration)
	stalled := meta.IsStatusConditionTrue(st.Conditions, clusterv1alpha1.ConditionStalled)
	reconciling := meta.IsStatusConditionTrue(st.Conditions, clusterv1alpha1.ConditionReconciling)
	if ready := meta.FindStatusCondition(st.Conditions, clusterv1alpha1.ConditionReady); ready != nil {
		switch {
		case ready.Status == metav1.ConditionFalse && !stalled && !reconciling:
			out = append(out, "Ready=False ("+ready.Reason+") with neither Stalled nor Reconciling: kstatus reads Current")
		case ready.Status == metav1.ConditionTrue && st.ReadyReplicas != st.Replicas:
			out = append(out, fmt.Sprintf("Ready=True with %d of %d pods ready", st.ReadyReplicas, st.Replicas))
		case ready.Status == metav1.ConditionTrue && st.ObservedGeneration == sc.Generation && st.Replicas != ptr.Deref(sc.Spec.Replicas, 0):
			// Only against the spec it observed: the high-water mark is written mid-reconcile, before the
			// status of a newer generation is decided.
			out = append(out, fmt.Sprintf("Ready=True with %d pods of %d", st.Replicas, ptr.Deref(sc.Spec.Replicas, 0)))
		}
	}
	sel, err := labels.Parse(st.Selector)
	if err != nil || st.Selector == "" {
		return append(out, fmt.Sprintf("status.selector %q does not parse", st.Selector))
	}
	var pods corev1.PodList
	if err := suite.Client.List(context.Background(), &pods, client.InNamespace(sc.Namespace)); err != nil {
		return out
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if ref := metav1.GetControllerOf(p); ref != nil && ref.UID == sc.UID && !sel.Matches(labels.Set(p.Labels)) {
			out = append(out, fmt.Sprintf("pod %s is controlled by it but status.selector %q does not select it", p.Name, st.Selector))
		}
	}
	return out
}

// TestStatusNeverContradictsItself drives a StatefulCluster (selector by matchExpressions, the template
// carrying the label) through creation, not-Ready pods, a failed pod's replacement, a rolling update, a
// scale-up and a scale-down, while statusChecker checks every status written.
func TestStatusNeverContradictsItself(t *testing.T) {
	f := newFixture(t)
	ch := f.checkStatuses()
	startOperator(t, nil)
	f.statefulCluster("s", 2, func(sc *clusterv1alpha1.StatefulCluster) {
		sc.Spec.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"s", "s2"}}}}
		sc.Spec.Template.Annotations = map[string]string{holdAnnotation: "notready"}
	})
	f.waitCondition("s", clusterv1alpha1.ConditionReconciling, metav1.ConditionTrue, clusterv1alpha1.ReasonPodsNotReady)
	ready := func(name string) { f.makeReady("s", name) }
	ready("s-0")
	ready("s-1")
	f.waitCondition("s", clusterv1alpha1.ConditionReady, metav1.ConditionTrue, clusterv1alpha1.ReasonReconciled)

	// A failed pod is replaced by a new identity.
	f.setPodStatus("s-1", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed })
	ready("s-2")
	f.waitPods("s", "s-0", "s-2")
	f.waitCondition("s", clusterv1alpha1.ConditionReady, metav1.ConditionTrue, clusterv1alpha1.ReasonReconciled)

	// A rolling update to a template with the other selected label and no hold.
	f.update("s", func(sc *clusterv1alpha1.StatefulCluster) {
		sc.Spec.Template.Annotations = nil
		sc.Spec.Template.Labels = map[string]string{"app": "s2"}
	})
	require.Eventually(t, func() bool {
		sc := f.get("s")
		return sc.Status.ObservedGeneration == sc.Generation && sc.Status.UpdatedReplicas == 2 && sc.Status.Replicas == 2 &&
			meta.IsStatusConditionTrue(sc.Status.Conditions, clusterv1alpha1.ConditionReady)
	}, wait, tick, "rolled to the new template")
	f.update("s", func(sc *clusterv1alpha1.StatefulCluster) { sc.Spec.Replicas = ptr.To[int32](4) })
	require.Eventually(t, func() bool {
		sc := f.get("s")
		return sc.Status.ReadyReplicas == 4 && meta.IsStatusConditionTrue(sc.Status.Conditions, clusterv1alpha1.ConditionReady)
	}, wait, tick, "scaled up")
	f.update("s", func(sc *clusterv1alpha1.StatefulCluster) { sc.Spec.Replicas = ptr.To[int32](1) })
	require.Eventually(t, func() bool {
		sc := f.get("s")
		return sc.Status.Replicas == 1 && meta.IsStatusConditionTrue(sc.Status.Conditions, clusterv1alpha1.ConditionReady)
	}, wait, tick, "scaled down")
	f.waitKstatus("s", status.CurrentStatus)
	ch.mu.Lock()
	defer ch.mu.Unlock()
	assert.Greater(t, ch.writes, 5, "statuses checked")
}

// withoutSelectorRules removes the CRD's selector rules (the CEL rules whose message names the selector)
// for the rest of the test, so that a StatefulCluster stored before the CRD had them can be made; the
// CRD is restored when the test ends.
func withoutSelectorRules(t *testing.T) {
	t.Helper()
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	key := client.ObjectKey{Name: "statefulclusters." + clusterv1alpha1.GroupVersion.Group}
	require.NoError(t, suite.Client.Get(t.Context(), key, crd))
	origSpec := runtime.DeepCopyJSONValue(crd.Object["spec"])
	var strip func(v any)
	strip = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if rules, ok := v["x-kubernetes-validations"].([]any); ok {
				var kept []any
				for _, r := range rules {
					if msg, _ := r.(map[string]any)["message"].(string); !strings.Contains(msg, "selector") {
						kept = append(kept, r)
					}
				}
				v["x-kubernetes-validations"] = kept
			}
			for _, c := range v {
				strip(c)
			}
		case []any:
			for _, c := range v {
				strip(c)
			}
		}
	}
	strip(crd.Object["spec"])
	require.NoError(t, suite.Client.Update(t.Context(), crd))
	t.Cleanup(func() {
		require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := suite.Client.Get(context.Background(), key, crd); err != nil {
				return err
			}
			crd.Object["spec"] = origSpec
			return suite.Client.Update(context.Background(), crd)
		}))
	})
}

// TestLegacyInvalidSelectorStalls: a StatefulCluster whose selector does not parse, or does not select
// the pods its template makes (issue 16's case 3), stored before the CRD refused them, is reported and
// not acted on: Stalled=True with the reason and one Warning Event, Ready=False (never Ready=True while
// status.selector selects none of its pods), kstatus Failed, no pod created; and it is deleted at once.
func TestLegacyInvalidSelectorStalls(t *testing.T) {
	withoutSelectorRules(t)
	startOperator(t, nil)
	for name, tc := range map[string]struct {
		sel          metav1.LabelSelector
		reason       string
		statusSelect string
	}{
		"invalid": {metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Bogus", Values: []string{"x"}}}},
			clusterv1alpha1.ReasonInvalidSelector, ""},
		"mismatch": {metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"web"}}}},
			clusterv1alpha1.ReasonSelectorMismatch, "app in (web)"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			sc := &clusterv1alpha1.StatefulCluster{
				ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: f.ns},
				Spec: clusterv1alpha1.StatefulClusterSpec{Replicas: ptr.To[int32](2), Selector: &tc.sel,
					Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "db"}},
						Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "app:v1"}}}}},
			}
			// The CRD's new schema reaches the API server's handler shortly after its update.
			require.Eventually(t, func() bool { return suite.Client.Create(t.Context(), sc.DeepCopy()) == nil }, wait, 100*time.Millisecond, "stored")
			stalled := f.waitCondition("l", clusterv1alpha1.ConditionStalled, metav1.ConditionTrue, tc.reason)
			assert.Contains(t, stalled.Message, "spec.selector")
			got := f.get("l")
			ready := meta.FindStatusCondition(got.Status.Conditions, clusterv1alpha1.ConditionReady)
			require.NotNil(t, ready)
			assert.Equal(t, metav1.ConditionFalse, ready.Status)
			assert.Equal(t, tc.statusSelect, got.Status.Selector)
			assert.Equal(t, status.FailedStatus, f.kstatusOf("l").Status)
			f.waitEvent("l", tc.reason, corev1.EventTypeWarning)
			assert.Empty(t, f.pods("l"), "no pod created for a spec the operator does not act on")

			require.NoError(t, suite.Client.Delete(t.Context(), got))
			require.Eventually(t, func() bool {
				return apierrors.IsNotFound(suite.Client.Get(t.Context(), client.ObjectKeyFromObject(got), &clusterv1alpha1.StatefulCluster{}))
			}, wait, tick, "deleted at once")
		})
	}
}
