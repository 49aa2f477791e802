package controller

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/statefulops/statefulops/shared/api/crdvalidation"
	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
)

// stalledBeyondCEL are the reasons checkSpec may give for a spec the API server accepts: what CEL cannot
// express. CEL has no PromQL parser, so a query that does not parse is accepted at apply and reported
// at once (Stalled, InvalidQuery, the parser's message). InvalidURL is not in the list: the CRD's CEL
// refuses every URL NormalizeURL refuses (issue 16 case 5).
var stalledBeyondCEL = map[string]bool{rolloutv1alpha1.ReasonInvalidQuery: true}

// FuzzPhasedRolloutSpec checks that the CRD's validation (schema and CEL, run in process by
// shared/api/crdvalidation) and the operator's own checks agree. It mutates a documented example or a
// bad input of docs/bad-input.md; for every object the API server would accept:
//   - checkSpec finds nothing, or only a problem of stalledBeyondCEL; then the conditions say Stalled
//     with that reason and Ready False, and the operator does nothing else (the target stops there);
//   - otherwise the check is a query with a URL NormalizeURL accepts or a webhook with a URL
//     callWebhook accepts (exactly one of the two), and the operator acts: a step on a 3-replica StatefulSet named spec.targetRef (or spec.targetRefs[0]) judges a pod
//     with a valid name, its first check waits spec.check.initialDelaySeconds, and passing checks pass
//     the step before check.maxTries fails it (the CRD's maxTries >= successThreshold rule).
//
// A refused object asserts nothing.
func FuzzPhasedRolloutSpec(f *testing.F) {
	f.Add(`apiVersion: sts.plus/v1alpha1
kind: PhasedRollout
metadata: {name: web}
spec:
  targetRef: web
  check:
    query: {expr: 'invalid_promql{', url: 'http://prometheus:9090'}
`, []byte(nil))
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	crdvalidation.Fuzz(f, "PhasedRollout", func(t *testing.T, pr *rolloutv1alpha1.PhasedRollout, fail func(string, ...any)) {
		if p := checkSpec(pr); p != nil {
			if !stalledBeyondCEL[p.reason] {
				fail("the API server accepts a spec the operator reports as %s (CEL can express this): %s", p.reason, p.message)
			}
			setConditions(pr)
			setInvalidSpec(pr, p)
			if !meta.IsStatusConditionTrue(pr.Status.Conditions, rolloutv1alpha1.ConditionStalled) || meta.IsStatusConditionTrue(pr.Status.Conditions, rolloutv1alpha1.ConditionReady) {
				fail("an invalid spec's conditions: %+v", pr.Status.Conditions)
			}
			return
		}
		if skipCheck(pr) {
			return // no checks: the StatefulSet rolls as a standard rolling update
		}
		switch q, wh := pr.Spec.Check.Query, pr.Spec.Check.Webhook; {
		case q != nil && wh != nil:
			fail("both check.query and check.webhook are set")
		case q != nil:
			if _, err := NormalizeURL(q.URL); err != nil {
				fail("check.query.url: %v", err)
			}
		case wh != nil:
			if _, err := webhookURL(wh.URL); err != nil {
				fail("check.webhook.url: %v", err)
			}
		default:
			fail("neither check.query nor check.webhook is set")
		}
		target := pr.Spec.Targets()[0] // the first StatefulSet a step can roll
		sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: target, Namespace: pr.Namespace}}
		sts.Spec.Replicas = ptr.To(int32(3))
		sts.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To(int32(2))}
		s := newScope(pr, now)
		s.sts, s.replicas = sts, 3
		partition, ordinal, _ := beginStep(s)
		pod := pr.Status.RollingPodStatus.Pod
		if partition != 2 || ordinal != 2 || pod != fmt.Sprintf("%s-2", target) {
			fail("step at partition %d judges ordinal %d (pod %s)", partition, ordinal, pod)
		}
		if errs := validation.IsDNS1123Label(pod); len(errs) > 0 {
			fail("the judged pod's name %q: %v", pod, errs)
		}
		wait := checkWait(s, time.Time{})
		if want := time.Duration(ptr.Deref(pr.Spec.Check.InitialDelaySeconds, 60)) * time.Second; wait < 0 || wait > want+time.Second {
			fail("the first check waits %s, initialDelaySeconds is %s", wait, want)
		}
		check := pr.Spec.Check
		threshold := max(check.SuccessThreshold, 1)
		if threshold > 1000 {
			return // the same rule, too many checks to play here
		}
		for i := int32(0); ; i++ {
			st := recordCheck(pr, CheckResult{Verdict: VerdictPass, Message: "ok"}, now.Add(time.Duration(i)*time.Second))
			if st.ConsecutiveSuccessfulChecks >= threshold {
				break // the step passes
			}
			if check.MaxTries != nil && st.TotalChecks >= *check.MaxTries {
				fail("only passing checks, and the step fails after %d tries (successThreshold %d)", st.TotalChecks, check.SuccessThreshold)
			}
		}
	})
}
