package controller

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	ctrl "sigs.k8s.io/controller-runtime"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
)

// Membership hooks. Quorum applications (etcd, Raft) must remove a lost member before a new one joins,
// or membership grows with every replacement. The retire hook is called, for every retired identity in
// the ledger, before any pod of a new identity is created; the join hook before each new pod is
// created. Both go to one Ready surviving pod, the oldest identity that answers. With failurePolicy
// Fail a failing hook holds creation back (condition MembershipHookFailed) and is retried; with
// Ignore an Event records the failure and creation proceeds. When no pod survives there is nobody to
// tell, and the step proceeds.

// hookRetry is how soon a failing hook (failurePolicy Fail) is called again.
const hookRetry = 5 * time.Second

// hookBody is the JSON body of a hook call.
type hookBody struct {
	Event    string    `json:"event"`
	Identity string    `json:"identity"`
	UID      types.UID `json:"uid,omitempty"`
}

// hookError is a failed hook call. noPort: no surviving Ready pod has the hook's port, so no call
// could be made; that lasts until the pods or the spec change.
type hookError struct {
	msg    string
	noPort bool
}

func (e *hookError) Error() string { return e.msg }

// runRetireHooks calls the retire hook for every ledger entry that is due. It reports whether pod
// creation may proceed.
func (r *Reconciler) runRetireHooks(ctx context.Context, s *scope) bool {
	hooks := s.sc.Spec.MembershipHooks
	if hooks == nil || hooks.Retire == nil {
		return true
	}
	ok := true
	for i := range s.sc.Status.Identities {
		rec := &s.sc.Status.Identities[i]
		if rec.RetireHookAt != nil {
			continue
		}
		if err := s.callHook(ctx, hooks.Retire, hookBody{Event: "Retire", Identity: rec.Name, UID: rec.UID}); err != nil {
			if !s.hookFailed(hooks.Retire, "Retire", rec.Name, err) {
				ok = false
				continue
			}
		}
		now := metav1.NewTime(s.now)
		rec.RetireHookAt = &now
	}
	return ok
}

// runJoinHook calls the join hook for a new identity; it reports whether its pod may be created.
func (s *scope) runJoinHook(ctx context.Context, identity string) bool {
	hooks := s.sc.Spec.MembershipHooks
	if hooks == nil || hooks.Join == nil {
		return true
	}
	if err := s.callHook(ctx, hooks.Join, hookBody{Event: "Join", Identity: identity}); err != nil {
		return s.hookFailed(hooks.Join, "Join", identity, err)
	}
	return true
}

// hookFailed records a failed call; it reports whether the guarded step may proceed (Ignore).
func (s *scope) hookFailed(hook *clusterv1alpha1.MembershipHook, event, identity string, err error) bool {
	s.r.Recorder.Eventf(s.sc, nil, corev1.EventTypeWarning, clusterv1alpha1.ReasonHookFailed, event,
		"%s hook for %s failed: %v", event, identity, err)
	if hook.FailurePolicy == clusterv1alpha1.IgnoreHookPolicy {
		return true
	}
	s.hookMu.Lock()
	defer s.hookMu.Unlock()
	s.hookFailure = fmt.Sprintf("%s hook for %s failed: %v", event, identity, err)
	if he := (*hookError)(nil); errors.As(err, &he) && he.noPort {
		s.hookStalled = fmt.Sprintf("the %s membership hook (failurePolicy Fail) cannot be called: %v; the pod it guards is held back until a Ready pod has that port (spec.template) or the hook changes",
			event, err)
	}
	return false
}

// applyHookCondition sets MembershipHookFailed from this reconcile's calls.
func (s *scope) applyHookCondition() {
	if s.sc.Spec.MembershipHooks == nil {
		meta.RemoveStatusCondition(&s.sc.Status.Conditions, clusterv1alpha1.ConditionMembershipHookFailed)
		return
	}
	cond := metav1.Condition{Type: clusterv1alpha1.ConditionMembershipHookFailed, Status: metav1.ConditionFalse,
		Reason: clusterv1alpha1.ReasonHookSucceeded, Message: "no membership hook is failing", ObservedGeneration: s.sc.Generation}
	if s.hookFailure != "" {
		s.later(s.now.Add(hookRetry)) // nothing else may change meanwhile: retry the call on a timer
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, clusterv1alpha1.ReasonHookFailed, truncate(s.hookFailure, 1024)
		if s.hookStalled != "" {
			cond.Reason = clusterv1alpha1.ReasonHookPortNotFound
		}
	}
	meta.SetStatusCondition(&s.sc.Status.Conditions, cond)
}

// callHook POSTs the body to the oldest Ready surviving pod that answers 2xx.
func (s *scope) callHook(ctx context.Context, hook *clusterv1alpha1.MembershipHook, body hookBody) error {
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	timeout := time.Duration(max(hook.TimeoutSeconds, 1)) * time.Second
	httpClient := &http.Client{Timeout: timeout, Transport: &http.Transport{
		// The pod's certificate is not verified (documented on the field): pods rarely have one a
		// controller could verify.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // documented behaviour
	}}
	scheme := "http"
	if hook.Scheme == corev1.URISchemeHTTPS {
		scheme = "https"
	}
	var lastErr error
	tried := 0
	for _, m := range s.pods {
		if m.pod == nil || !m.ready || m.terminating || m.name == body.Identity || m.pod.Status.PodIP == "" {
			continue
		}
		port, err := hookPort(m.pod, hook.Port)
		if err != nil {
			lastErr = err
			continue
		}
		tried++
		url := fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(m.pod.Status.PodIP, strconv.Itoa(port)), hook.Path)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(raw))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := httpClient.Do(req)
		if err != nil {
			lastErr = fmt.Errorf("pod %s: %w", m.name, err)
			continue
		}
		_ = resp.Body.Close()
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			ctrl.LoggerFrom(ctx).Info("Called membership hook", "event", body.Event, "identity", body.Identity, "pod", m.name)
			return nil
		}
		lastErr = fmt.Errorf("pod %s answered %s", m.name, resp.Status)
	}
	if tried == 0 && lastErr == nil {
		return nil // no surviving pod: nobody to tell
	}
	return &hookError{msg: lastErr.Error(), noPort: tried == 0}
}

// hookPort resolves the hook's port, a number or the name of a container port.
func hookPort(pod *corev1.Pod, port intstr.IntOrString) (int, error) {
	if port.Type == intstr.Int {
		return port.IntValue(), nil
	}
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == port.StrVal {
				return int(p.ContainerPort), nil
			}
		}
	}
	return 0, fmt.Errorf("pod %s has no container port named %q", pod.Name, port.StrVal)
}
