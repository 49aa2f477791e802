package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
)

// Webhook gates (check.webhook): a check POSTs the step as JSON (rolloutv1alpha1.WebhookPayload) to
// the user's URL; a 2xx answer passes, any other answer or none fails. The same transport (proxy
// settings, TLS) and the same Secret contract as the Prometheus check.

const (
	// seedCheckName is the checkName a webhook of spec.check is called with.
	seedCheckName = "check"
	// defaultWebhookTimeout applies when webhook.timeoutSeconds is unset (the CRD defaults it to 10).
	defaultWebhookTimeout = 10 * time.Second
	// webhookBodyExcerpt is how much of a failing answer's body the check's message quotes.
	webhookBodyExcerpt = 256
)

// callWebhook runs one check of the current step as a call of the webhook wh, named checkName in the
// payload, about the pod of ordinal's step.
func (r *Reconciler) callWebhook(ctx context.Context, s *scope, checkName string, wh *rolloutv1alpha1.WebhookCheck, ordinal int32) CheckResult {
	pr, st := s.pr, s.pr.Status.RollingPodStatus
	creds, failed := r.credentials(ctx, s, wh.SecretRef, "check.webhook.secretRef", rolloutv1alpha1.EventWebhookConfigError)
	if failed != nil {
		return *failed
	}
	payload := rolloutv1alpha1.WebhookPayload{
		APIVersion:      rolloutv1alpha1.WebhookPayloadAPIVersion,
		Name:            pr.Name,
		Namespace:       pr.Namespace,
		PhasedRollout:   pr.Name,
		TargetRef:       s.sts.Name,
		Pod:             fmt.Sprintf("%s-%d", s.sts.Name, ordinal),
		CurrentRevision: pr.Status.CurrentRevision,
		UpdateRevision:  pr.Status.UpdateRevision,
		CheckName:       checkName,
		Attempt:         1,
	}
	if st != nil {
		payload.Pod = st.Pod
		payload.Partition = *st.Partition
		payload.Attempt = st.TotalChecks + 1
	}
	timeout := time.Duration(wh.TimeoutSeconds) * time.Second
	if timeout <= 0 {
		timeout = defaultWebhookTimeout
	}
	res := postWebhook(ctx, wh.URL, payload, creds, wh.InsecureSkipVerify, timeout)
	res.Message = boundMessage(res.Message)
	return res
}

// postWebhook POSTs payload to rawURL within timeout and judges the answer: 2xx passes; another
// status (a redirect included), a timeout or a transport error fails, with a message saying which.
func postWebhook(ctx context.Context, rawURL string, payload rolloutv1alpha1.WebhookPayload, creds credentials, insecureSkipVerify bool, timeout time.Duration) CheckResult {
	u, err := webhookURL(rawURL)
	if err != nil {
		return CheckResult{Verdict: VerdictError, Message: err.Error()}
	}
	where := "webhook " + u.Redacted()
	body, err := json.Marshal(payload)
	if err != nil {
		return CheckResult{Verdict: VerdictError, Message: fmt.Sprintf("encoding the payload of %s: %v", where, err)}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return CheckResult{Verdict: VerdictError, Message: fmt.Sprintf("%s: %v", where, err)}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "rollout-operator")
	transport := newTransport(insecureSkipVerify)
	defer transport.CloseIdleConnections()
	c := &http.Client{
		Transport: withCredentials(transport, creds),
		// A redirect is an answer, and not a 2xx one: it fails the check (following it could send the
		// credentials elsewhere).
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := c.Do(req)
	if err != nil {
		if isTimeout(ctx, err) {
			return CheckResult{Verdict: VerdictFail, Message: fmt.Sprintf("%s did not answer within %s: check failed", where, timeout)}
		}
		return CheckResult{Verdict: VerdictFail, Message: fmt.Sprintf("%s unreachable: check failed: %v", where, unwrapURLError(err))}
	}
	defer resp.Body.Close()
	excerpt, _ := io.ReadAll(io.LimitReader(resp.Body, webhookBodyExcerpt))
	status := resp.Status
	if status == "" {
		status = fmt.Sprint(resp.StatusCode)
	}
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return CheckResult{Verdict: VerdictPass, Message: fmt.Sprintf("%s answered %s: check passed", where, status)}
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return CheckResult{Verdict: VerdictFail, Message: fmt.Sprintf("%s answered %s, a redirect to %q, which is not followed: check failed (point check.webhook.url at the final address)",
			where, status, resp.Header.Get("Location"))}
	}
	msg := fmt.Sprintf("%s answered %s: check failed", where, status)
	if text := strings.TrimSpace(string(excerpt)); text != "" {
		msg += ": " + text
	}
	return CheckResult{Verdict: VerdictFail, Message: msg}
}

// webhookURL parses check.webhook.url: an http or https URL with a host (the CRD's rules refuse any
// other).
func webhookURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return nil, fmt.Errorf("check.webhook.url %q is not an http or https URL with a host", raw)
	}
	return u, nil
}

// isTimeout reports whether a call failed because its deadline passed.
func isTimeout(ctx context.Context, err error) bool {
	var ne net.Error
	return errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// unwrapURLError drops the "Post \"<url>\": " prefix of a client error: the message names the URL
// already.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
