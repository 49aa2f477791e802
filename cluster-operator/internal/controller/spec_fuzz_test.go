package controller

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
	"github.com/statefulops/statefulops/shared/api/crdvalidation"
)

// FuzzStatefulClusterSpec checks that the CRD's validation (schema and CEL, run in process by
// shared/api/crdvalidation) and the operator's own checks agree. It mutates a documented example or a
// bad input of docs/bad-input.md; for every object the API server would accept:
//   - checkSpec finds nothing (InvalidSelector and SelectorMismatch are for objects stored before the
//     CRD refused them; no spec the CRD accepts today may reach them), so the operator acts;
//   - what it would create is valid: pod names (first and far identities, Ordinal and Random formats),
//     hostnames and subdomains, labels (selector, cluster, identity, revision), claim names, the
//     ControllerRevision's name; the selector selects every pod it builds; the update bounds are sane.
//
// InvalidTemplate (the API server refuses a pod built from spec.template, e.g. a container spec the CRD
// does not model) and HookPortNotFound (no pod has the hook's named port) depend on the API server's pod
// validation and on the pods' containers at run time: they are Stalled reasons CEL cannot express, and
// this target does not reach them. A refused object asserts nothing.
func FuzzStatefulClusterSpec(f *testing.F) {
	crdvalidation.Fuzz(f, "StatefulCluster", func(t *testing.T, sc *clusterv1alpha1.StatefulCluster, fail func(string, ...any)) {
		if p := checkSpec(sc); p != nil {
			fail("the API server accepts a spec the operator does not act on: %s: %s", p.reason, p.message)
		}
		sel, err := metav1.LabelSelectorAsSelector(sc.Spec.Selector)
		if err != nil {
			fail("selector: %v", err)
		}
		replicas := int64(ptr.Deref(sc.Spec.Replicas, 1))
		revision := revisionName(sc, []byte(sc.Spec.Template.String()), 3)
		if errs := validation.IsDNS1123Subdomain(revision); len(errs) > 0 {
			fail("ControllerRevision name %q: %v", revision, errs)
		}
		for _, identity := range []string{identityName(sc, 0), identityName(sc, replicas+9999999), randomIdentity(sc)} {
			pod := buildPod(sc, &sc.Spec.Template, revision, identity)
			if errs := validation.IsDNS1123Label(pod.Name); len(errs) > 0 {
				fail("pod name %q: %v", pod.Name, errs)
			}
			if errs := metavalidation.ValidateLabels(pod.Labels, field.NewPath("metadata", "labels")); len(errs) > 0 {
				fail("pod %s labels: %v", pod.Name, errs)
			}
			if !sel.Matches(labels.Set(pod.Labels)) {
				fail("spec.selector %s does not select pod %s (labels %v)", sel, pod.Name, pod.Labels)
			}
			if pod.Spec.Subdomain != "" {
				if errs := validation.IsDNS1123Label(pod.Spec.Subdomain); len(errs) > 0 {
					fail("pod subdomain %q: %v", pod.Spec.Subdomain, errs)
				}
			}
			for _, claim := range claimNames(sc, identity) {
				if errs := validation.IsDNS1123Subdomain(claim); len(errs) > 0 {
					fail("claim name %q: %v", claim, errs)
				}
			}
		}
		u, s, p := updateBounds(sc)
		if u < 0 || s < 0 || (u == 0 && s == 0) || p < 0 {
			fail("update bounds maxUnavailable %d maxSurge %d partition %d", u, s, p)
		}
	})
}
