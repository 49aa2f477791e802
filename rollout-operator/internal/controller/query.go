package controller

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
)

// The query of a step's check: spec.check with its placeholders filled for the pod under check, and
// the credentials of its Secret. prometheus.go runs it.

// check builds the query of the current step's spec.check and runs it.
func (r *Reconciler) check(ctx context.Context, s *scope, ordinal int32) CheckResult {
	return r.runQuery(ctx, s, ordinal, &s.pr.Spec.Check)
}

// runQuery builds the query of one check of the current step (spec.check or a spec.checks element)
// and runs it.
func (r *Reconciler) runQuery(ctx context.Context, s *scope, ordinal int32, c *rolloutv1alpha1.Check) CheckResult {
	pr := s.pr
	q := c.Query
	if q == nil {
		return CheckResult{Verdict: VerdictError, Message: "spec.check.query is not set"}
	}
	query := Query{
		URL:                q.URL,
		Expr:               expandQuery(q.Expr, pr.Namespace, s.sts.Name, pr.Status.RollingPodStatus.Pod, ordinal, pr.Status.UpdateRevision),
		InsecureSkipVerify: q.InsecureSkipVerify,
		SuccessWhen:        c.SuccessWhen,
		Timeout:            r.QueryTimeout,
		SuccessCondition:   c.SuccessCondition,
		NoDataPolicy:       c.NoDataPolicy,
	}
	if q.SecretRef != "" {
		if r.SecretAccess != nil {
			if err := r.SecretAccess.Ensure(ctx, pr.Namespace); err != nil {
				return CheckResult{Verdict: VerdictError, Message: fmt.Sprintf("granting the operator read access to Secret %s (check.query.secretRef): %v", q.SecretRef, err)}
			}
		}
		secret := &corev1.Secret{}
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: pr.Namespace, Name: q.SecretRef}, secret); err != nil {
			msg := fmt.Sprintf("reading Secret %s (check.query.secretRef): %v", q.SecretRef, err)
			s.event(pr, corev1.EventTypeWarning, rolloutv1alpha1.EventPrometheusConfigError, "%s", msg)
			return CheckResult{Verdict: VerdictError, Message: msg}
		}
		query.Token = string(secret.Data[rolloutv1alpha1.SecretKeyToken])
		query.Username = string(secret.Data[rolloutv1alpha1.SecretKeyUsername])
		query.Password = string(secret.Data[rolloutv1alpha1.SecretKeyPassword])
	}
	if _, err := NormalizeURL(q.URL); err != nil {
		s.event(pr, corev1.EventTypeWarning, rolloutv1alpha1.EventPrometheusConfigError, "%v", err)
	}
	return r.Checker.Check(ctx, query)
}

// expandQuery substitutes the placeholders {{namespace}}, {{statefulset}}, {{pod}}, {{ordinal}} and
// {{revision}} of a query.
func expandQuery(expr, namespace, sts, pod string, ordinal int32, revision string) string {
	return strings.NewReplacer(
		"{{namespace}}", namespace,
		"{{statefulset}}", sts,
		"{{pod}}", pod,
		"{{ordinal}}", strconv.Itoa(int(ordinal)),
		"{{revision}}", revision,
	).Replace(expr)
}
