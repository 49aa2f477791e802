package controller

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/statefulops/statefulops/shared/api/crdvalidation"
	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
)

// maxStatefulSetName is the longest StatefulSet name whose pods can be created: the StatefulSet
// controller labels every pod with controller-revision-hash = <name>-<10 characters>, a label value of
// at most 63 characters.
const maxStatefulSetName = 63 - 11

// FuzzExtendedStatefulSetSpec checks that the CRD's validation (schema and CEL, run in process by
// shared/api/crdvalidation) and the operator's own planning agree. It mutates a documented example or a
// bad input of docs/bad-input.md; for every object the API server would accept, what the operator would
// create is what the apps and batch APIs accept (else the operator would report InvalidTemplate, a
// Stalled reason for what the API server refuses and the CRD could have refused):
//   - the zones share the desired replicas exactly;
//   - each version's StatefulSet (versions 1 and 999, in every zone) has a name its pods can carry, valid
//     labels on itself, its selector and its pod template, a selector that parses, is not empty and
//     selects its pod template (the apps API's rule), the versions' selectors do not select each other's
//     pods (in place: the versions are one StatefulSet, whose name has no version), restartPolicy Always and a known podManagementPolicy;
//   - each upgrade Job has a name within a label value's 63 characters (batch's job-name label), valid
//     labels and restartPolicy Never or OnFailure;
//   - the watch times are positive.
//
// What the CRD does not model (the pod spec's containers beyond what CEL checks) can still be refused
// by the API server: InvalidTemplate is then Stalled with the server's message; this target builds no
// such objects. A refused object asserts nothing.
func FuzzExtendedStatefulSetSpec(f *testing.F) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	crdvalidation.Fuzz(f, "ExtendedStatefulSet", func(t *testing.T, ests *extendedv1alpha1.ExtendedStatefulSet, fail func(string, ...any)) {
		validLabels := func(what string, l map[string]string) {
			t.Helper()
			if errs := metavalidation.ValidateLabels(l, field.NewPath(what)); len(errs) > 0 {
				fail("%s: %v", what, errs)
			}
		}
		zones := desiredZones(ests)
		total := int32(0)
		for _, z := range zones {
			if z.replicas < 0 {
				fail("zone %q gets %d replicas", z.name, z.replicas)
			}
			total += z.replicas
		}
		if total != ests.Spec.DesiredReplicas() {
			fail("the zones share %d replicas, the spec wants %d", total, ests.Spec.DesiredReplicas())
		}
		for _, z := range zones {
			var selectors []labels.Selector
			for _, n := range []int{1, 999} {
				sts := buildStatefulSet(ests, z, n, "cfg", extendedv1alpha1.PhaseCanary, z.replicas, now)
				if errs := validation.IsDNS1123Label(sts.Name); len(errs) > 0 || len(sts.Name) > maxStatefulSetName {
					fail("StatefulSet name %q (%d characters): %v", sts.Name, len(sts.Name), errs)
				}
				validLabels("StatefulSet labels", sts.Labels)
				validLabels("pod template labels", sts.Spec.Template.Labels)
				sel, err := metav1.LabelSelectorAsSelector(sts.Spec.Selector)
				if err != nil {
					fail("StatefulSet %s selector: %v", sts.Name, err)
				}
				validLabels("selector matchLabels", sts.Spec.Selector.MatchLabels)
				if sel.Empty() || !sel.Matches(labels.Set(sts.Spec.Template.Labels)) {
					fail("StatefulSet %s: selector %s does not select its pod template (labels %v)", sts.Name, sel, sts.Spec.Template.Labels)
				}
				if inPlace(ests) {
					// In place the versions are one StatefulSet (its selector selects every version's
					// pods): its name must not depend on the version.
					if sts.Name != statefulSetName(ests, z, 1) {
						fail("in-place StatefulSet of version %d is named %s, not %s", n, sts.Name, statefulSetName(ests, z, 1))
					}
				} else {
					for _, other := range selectors {
						if other.Matches(labels.Set(sts.Spec.Template.Labels)) {
							fail("StatefulSet %s: another version's selector %s selects its pods", sts.Name, other)
						}
					}
					selectors = append(selectors, sel)
				}
				if p := sts.Spec.Template.Spec.RestartPolicy; p != "" && p != corev1.RestartPolicyAlways {
					fail("StatefulSet %s: restartPolicy %s", sts.Name, p)
				}
				switch sts.Spec.PodManagementPolicy {
				case "", "OrderedReady", "Parallel":
				default:
					fail("StatefulSet %s: podManagementPolicy %q", sts.Name, sts.Spec.PodManagementPolicy)
				}
				if ptr.Deref(sts.Spec.Replicas, 0) < 0 {
					fail("StatefulSet %s: %d replicas", sts.Name, *sts.Spec.Replicas)
				}
			}
		}
		for _, kind := range []string{extendedv1alpha1.UpgradeJobPre, extendedv1alpha1.UpgradeJobPost} {
			tmpl := jobTemplate(ests, kind)
			if tmpl == nil {
				continue
			}
			job := buildJob(ests, tmpl, kind, jobName(ests, jobs{}, kind, 999), 999)
			if errs := validation.IsDNS1123Subdomain(job.Name); len(errs) > 0 || len(job.Name) > validation.LabelValueMaxLength {
				fail("Job name %q (%d characters): %v", job.Name, len(job.Name), errs)
			}
			validLabels("Job labels", job.Labels)
			validLabels("Job pod template labels", job.Spec.Template.Labels)
			if p := job.Spec.Template.Spec.RestartPolicy; p != corev1.RestartPolicyNever && p != corev1.RestartPolicyOnFailure {
				fail("Job %s: restartPolicy %q", job.Name, p)
			}
		}
		for _, phase := range []string{extendedv1alpha1.PhaseCanary, ""} {
			if d := watchTime(ests, phase); d <= 0 {
				fail("watch time of phase %q: %s", phase, d)
			}
		}
	})
}
