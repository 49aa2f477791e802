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

// check builds the query of the current step's spec.check and runs it; a webhook gate is called
// instead (webhook.go).
func (r *Reconciler) check(ctx context.Context, s *scope, ordinal int32) CheckResult {
	return r.runQuery(ctx, s, ordinal, seedCheckName, &s.pr.Spec.Check)
}

// runQuery builds the query of one check of the current step (spec.check or a spec.checks element,
// named name) and runs it, or calls its webhook gate.
func (r *Reconciler) runQuery(ctx context.Context, s *scope, ordinal int32, name string, c *rolloutv1alpha1.Check) CheckResult {
	pr := s.pr
	if wh := c.Webhook; wh != nil {
		return r.callWebhook(ctx, s, name, wh, ordinal)
	}
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
	creds, failed := r.credentials(ctx, s, q.SecretRef, "check.query.secretRef", rolloutv1alpha1.EventPrometheusConfigError)
	if failed != nil {
		return *failed
	}
	query.Token, query.Username, query.Password = creds.Token, creds.Username, creds.Password
	if _, err := NormalizeURL(q.URL); err != nil {
		s.event(pr, corev1.EventTypeWarning, rolloutv1alpha1.EventPrometheusConfigError, "%v", err)
	}
	return r.Checker.Check(ctx, query)
}

// credentials reads the credentials of a check from the Secret name (field names it in messages),
// once the operator's read access to Secrets in the namespace is granted (SecretAccess); no name means
// none. A Secret that cannot be read is an error result, with an Event of reason eventReason.
func (r *Reconciler) credentials(ctx context.Context, s *scope, name, field, eventReason string) (credentials, *CheckResult) {
	pr := s.pr
	if name == "" {
		return credentials{}, nil
	}
	if r.SecretAccess != nil {
		if err := r.SecretAccess.Ensure(ctx, pr.Namespace); err != nil {
			return credentials{}, &CheckResult{Verdict: VerdictError, Message: fmt.Sprintf("granting the operator read access to Secret %s (%s): %v", name, field, err)}
		}
	}
	secret := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: pr.Namespace, Name: name}, secret); err != nil {
		msg := fmt.Sprintf("reading Secret %s (%s): %v", name, field, err)
		s.event(pr, corev1.EventTypeWarning, eventReason, "%s", msg)
		return credentials{}, &CheckResult{Verdict: VerdictError, Message: msg}
	}
	return credentials{
		Token:    string(secret.Data[rolloutv1alpha1.SecretKeyToken]),
		Username: string(secret.Data[rolloutv1alpha1.SecretKeyUsername]),
		Password: string(secret.Data[rolloutv1alpha1.SecretKeyPassword]),
	}, nil
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
