//go:build integration

package grant_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	"github.com/statefulops/statefulops/singleton-operator/internal/grant"
)

// The exit report against a real API server, with real pod-bound tokens: recorded on a terminating
// Wrapper pod whose report covers every app container (and handed to the controller through Exits), and
// refused — the pod left unannotated, nothing handed on — for a pod that is not terminating, a report
// that leaves out a container, another pod's token, a pod not held by the wrapper, and a pod that is
// gone.
func TestExitEndpoint(t *testing.T) {
	e := startEndpointEnv(t)
	ctx, c := e.ctx, e.c
	exits := grant.NewExits()
	var toldMu sync.Mutex
	told := map[types.UID]bool{} // the pods whose exit the grant server was told of (PredecessorExited)
	toldOf := func(uid types.UID) bool {
		toldMu.Lock()
		defer toldMu.Unlock()
		return told[uid]
	}
	handler := func(authenticate grant.Authenticator) *httptest.Server {
		srv := httptest.NewTLSServer(&grant.ExitHandler{Authenticate: authenticate,
			Cache: e.mgr.GetCache(), APIReader: e.mgr.GetAPIReader(), Client: c, Exits: exits,
			PredecessorExited: func(uid types.UID) {
				toldMu.Lock()
				defer toldMu.Unlock()
				told[uid] = true
			}})
		t.Cleanup(srv.Close)
		return srv
	}
	srv := handler(grant.TokenReviewAuthenticator(c))

	// wrapperPod is a pod as the webhook admits it with the Wrapper hold: two app containers and the
	// status-sidecar; a finalizer keeps it terminating once deleted (no kubelet confirms the stop).
	wrapperPod := func(name string, mods ...func(*corev1.Pod)) *corev1.Pod {
		return e.newPod(t, name, append([]func(*corev1.Pod){func(p *corev1.Pod) {
			p.Annotations = map[string]string{singletonv1.AnnotationHoldMode: string(singletonv1.HoldModeWrapper)}
			p.Finalizers = []string{"test.statefulops.io/keep"}
			p.Spec.Containers = []corev1.Container{{Name: "app", Image: "app:1"}, {Name: "logs", Image: "logs:1"},
				{Name: singletonv1.SidecarContainerName, Image: "sidecar:1"}}
		}}, mods...)...)
	}
	terminate := func(pod *corev1.Pod) { require.NoError(t, c.Delete(ctx, pod)) }
	// report sends pod's exit report and returns the status code and the refusal's text; answered checks them.
	report := func(srv *httptest.Server, pod *corev1.Pod, tok string, containers ...string) (int, string) {
		var r grant.ExitResponse
		code, refusal := post(t, srv, grant.ExitPath, tok, grant.ExitRequest{
			Request:    grant.Request{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
			Containers: containers,
		}, &r)
		if code == http.StatusOK {
			assert.True(t, r.Recorded)
		}
		return code, refusal
	}
	answered := func(code int, why string) func(int, string) {
		return func(gotCode int, refusal string) {
			t.Helper()
			assert.Equal(t, code, gotCode, refusal)
			assert.Contains(t, refusal, why)
		}
	}
	exited := func(pod *corev1.Pod) (string, bool) {
		live := &corev1.Pod{}
		require.NoError(t, e.mgr.GetAPIReader().Get(ctx, client.ObjectKeyFromObject(pod), live))
		v, ok := live.Annotations[singletonv1.AnnotationExited]
		return v, ok
	}

	t.Run("recorded on a terminating pod", func(t *testing.T) {
		pod := wrapperPod("exiting-0")
		tok := e.token(t, pod, singletonv1.GrantTokenAudience)
		terminate(pod) // the report follows at once: the cache may not show the deletion yet
		answered(http.StatusOK, "")(report(srv, pod, tok, "logs", "app"))
		v, ok := exited(pod)
		assert.True(t, ok)
		assert.Equal(t, "app,logs", v, "the app containers in spec order")
		assert.True(t, exits.Accepted(pod.UID), "handed to the controller")
		assert.True(t, toldOf(pod.UID), "and to the grants of the pods released on its exit")
		assert.NoError(t, exits.Recorded(ctx, pod.UID), "and recorded")
		require.Len(t, exits.Events(), 1)
		assert.Equal(t, pod.UID, (<-exits.Events()).Object.GetUID())
		answered(http.StatusOK, "")(report(srv, pod, tok, "app", "logs")) // a retried report is answered alike
		assert.Empty(t, exits.Events(), "and not handed on twice")
	})

	t.Run("not terminating", func(t *testing.T) {
		pod := wrapperPod("running-0")
		answered(http.StatusConflict, "not terminating")(report(srv, pod, e.token(t, pod, singletonv1.GrantTokenAudience), "app", "logs"))
		_, ok := exited(pod)
		assert.False(t, ok)
		assert.False(t, exits.Accepted(pod.UID))
		assert.False(t, toldOf(pod.UID))
	})

	t.Run("an app container left out", func(t *testing.T) {
		pod := wrapperPod("partial-0")
		tok := e.token(t, pod, singletonv1.GrantTokenAudience)
		terminate(pod)
		answered(http.StatusConflict, "leaves out app container logs")(report(srv, pod, tok, "app", singletonv1.SidecarContainerName))
		_, ok := exited(pod)
		assert.False(t, ok)
		assert.False(t, toldOf(pod.UID))
	})

	t.Run("another pod's token", func(t *testing.T) {
		pod, other := wrapperPod("victim-0"), wrapperPod("other-0")
		terminate(pod)
		answered(http.StatusForbidden, "not bound to this pod")(report(srv, pod, e.token(t, other, singletonv1.GrantTokenAudience), "app", "logs"))
		_, ok := exited(pod)
		assert.False(t, ok)
		assert.False(t, toldOf(pod.UID))
	})

	t.Run("not held by the wrapper", func(t *testing.T) {
		pod := wrapperPod("gated-0", func(p *corev1.Pod) {
			p.Annotations[singletonv1.AnnotationHoldMode] = string(singletonv1.HoldModeSchedulingGate)
		})
		tok := e.token(t, pod, singletonv1.GrantTokenAudience)
		terminate(pod)
		answered(http.StatusConflict, "Wrapper")(report(srv, pod, tok, "app", "logs"))
		_, ok := exited(pod)
		assert.False(t, ok)
		assert.False(t, toldOf(pod.UID))
	})

	t.Run("pod gone", func(t *testing.T) {
		// The API server refuses the token of a pod that is gone, so the pod goes between the token
		// review and the handler's read: the review passes, then the pod is removed.
		pod := wrapperPod("gone-0")
		tok := e.token(t, pod, singletonv1.GrantTokenAudience)
		terminate(pod)
		review := grant.TokenReviewAuthenticator(c)
		srv := handler(func(ctx context.Context, token string) (authenticationv1.UserInfo, error) {
			user, err := review(ctx, token)
			if err != nil {
				return user, err
			}
			// Not require: this runs on the server's goroutine; an error fails the review (401, not 404).
			live := &corev1.Pod{}
			if err := e.mgr.GetAPIReader().Get(ctx, client.ObjectKeyFromObject(pod), live); err != nil {
				return user, err
			}
			live.Finalizers = nil
			if err := c.Update(ctx, live); err != nil {
				return user, err
			}
			return user, wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
				err := e.mgr.GetAPIReader().Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{})
				return apierrors.IsNotFound(err), nil
			})
		})
		answered(http.StatusNotFound, "gone")(report(srv, pod, tok, "app", "logs"))
	})
}

// The stopping notice against a real API server: answered 204 for the pod's own token, refused for a
// token that does not authenticate or is bound to another pod; and with the grant server's cached
// authenticator, the exit report after it costs no second TokenReview.
func TestStoppingNotice(t *testing.T) {
	e := startEndpointEnv(t)
	reviews := 0
	review := grant.TokenReviewAuthenticator(e.c)
	authenticate := grant.CachedAuthenticator(func(ctx context.Context, token string) (authenticationv1.UserInfo, error) {
		reviews++ // the handlers run one request at a time here
		return review(ctx, token)
	})
	mux := http.NewServeMux()
	mux.Handle(grant.StoppingPath, &grant.StoppingHandler{Authenticate: authenticate})
	mux.Handle(grant.ExitPath, &grant.ExitHandler{Authenticate: authenticate, Cache: e.mgr.GetCache(),
		APIReader: e.mgr.GetAPIReader(), Client: e.c})
	srv := httptest.NewTLSServer(mux)
	t.Cleanup(srv.Close)
	pod := e.newPod(t, "stopping-0", func(p *corev1.Pod) {
		p.Annotations = map[string]string{singletonv1.AnnotationHoldMode: string(singletonv1.HoldModeWrapper)}
		p.Finalizers = []string{"test.statefulops.io/keep"}
	})
	other := e.newPod(t, "stopping-1")
	request := grant.Request{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
	tok := e.token(t, pod, singletonv1.GrantTokenAudience)

	code, refusal := post(t, srv, grant.StoppingPath, "not-a-token", request, nil)
	assert.Equal(t, http.StatusUnauthorized, code, refusal)
	code, refusal = post(t, srv, grant.StoppingPath, e.token(t, other, singletonv1.GrantTokenAudience), request, nil)
	assert.Equal(t, http.StatusForbidden, code, refusal)

	before := reviews
	code, refusal = post(t, srv, grant.StoppingPath, tok, request, nil)
	assert.Equal(t, http.StatusNoContent, code, refusal)
	require.NoError(t, e.c.Delete(e.ctx, pod))
	var answer grant.ExitResponse
	code, refusal = post(t, srv, grant.ExitPath, tok, grant.ExitRequest{Request: request, Containers: []string{"app"}}, &answer)
	assert.Equal(t, http.StatusOK, code, refusal)
	assert.True(t, answer.Recorded)
	assert.Equal(t, 1, reviews-before, "one TokenReview for the notice and the report")
	_ = e.c.Patch(context.Background(), pod, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
}
