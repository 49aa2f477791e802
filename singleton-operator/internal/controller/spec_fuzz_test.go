package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/statefulops/statefulops/shared/api/crdvalidation"
	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	"github.com/statefulops/statefulops/shared/podmutation"
)

// FuzzStatefulSingletonSpec checks that the CRD's validation (schema and CEL, run in process by
// shared/api/crdvalidation) and the operator's own checks agree. It mutates a documented example or a
// bad input of docs/bad-input.md; for every object the API server would accept:
//   - the selector parses (newScope's check: InvalidSelector is only for objects stored before the CRD
//     refused such selectors) and selects something less than everything, and the pod caches can be
//     keyed and scoped by it (unmanagedPods, podCacheKey);
//   - the spec's concerns (reportSpecConcerns: terminationGracePeriod above maxTransitionTime, accepted
//     as the original project did) are a SpecWarning, never Stalled: the operator acts;
//   - a pod the selector selects, admitted by the webhook's mutation (podmutation.Mutate) for this spec,
//     has valid labels, is still selected, and gets the spec's grace period and a known hold mode.
//
// The Stalled reasons this operator has beside InvalidSelector (SelectorOverlap with another
// StatefulSingleton, SeveralPodsWithoutHold) depend on other objects, not on the spec: CEL cannot see
// them, and this target does not reach them. A refused object asserts nothing.
func FuzzStatefulSingletonSpec(f *testing.F) {
	crdvalidation.Fuzz(f, "StatefulSingleton", func(t *testing.T, ss *singletonv1.StatefulSingleton, fail func(string, ...any)) {
		sel, err := metav1.LabelSelectorAsSelector(&ss.Spec.Selector)
		if err != nil {
			fail("the API server accepts a selector the operator reports as InvalidSelector: %v", err)
		}
		if sel.Empty() {
			fail("the API server accepts a selector that selects every pod of the namespace")
		}
		if key := podCacheKey(ss.Namespace, unmanagedPods(sel)); key == "" {
			fail("no pod cache key")
		}

		s := &scope{ss: ss, status: ss.Status.DeepCopy()}
		reportSpecConcerns(s)
		summarize(s.status, ss)
		if c := meta.FindStatusCondition(s.status.Conditions, singletonv1.ConditionStalled); c != nil {
			fail("an accepted spec is Stalled: %s: %s", c.Reason, c.Message)
		}

		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: ss.Name + "-pod", Namespace: ss.Namespace, Labels: map[string]string{}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app", Command: []string{"/app"}}}}}
		for k, v := range ss.Spec.Selector.MatchLabels {
			pod.Labels[k] = v
		}
		if !sel.Matches(labels.Set(pod.Labels)) {
			return // the expressions ask for labels this pod lacks: nothing the webhook would see
		}
		out := podmutation.Mutate(pod, ss, podmutation.Config{SidecarImage: "sidecar", GrantURL: "https://grant/v1/grant"})
		if errs := metavalidation.ValidateLabels(out.Labels, field.NewPath("metadata", "labels")); len(errs) > 0 {
			fail("the admitted pod's labels: %v", errs)
		}
		if !sel.Matches(labels.Set(out.Labels)) {
			fail("the admitted pod is no longer selected (labels %v)", out.Labels)
		}
		if got := ptr.Deref(out.Spec.TerminationGracePeriodSeconds, -1); ss.Spec.TerminationGracePeriod > 0 && got != int64(ss.Spec.TerminationGracePeriod) {
			fail("the admitted pod's grace period is %d, the spec says %d", got, ss.Spec.TerminationGracePeriod)
		}
		switch singletonv1.HoldMode(out.Annotations[singletonv1.AnnotationHoldMode]) {
		case singletonv1.HoldModeWrapper, singletonv1.HoldModeSchedulingGate:
		default:
			fail("the admitted pod's hold mode is %q", out.Annotations[singletonv1.AnnotationHoldMode])
		}
	})
}
