//go:build integration

package grant_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	"github.com/statefulops/statefulops/singleton-operator/internal/grant"
)

// endpointEnv is a real API server with a manager whose cache follows the pods, and a ServiceAccount
// "app" in namespace default whose pod-bound tokens the tests present.
type endpointEnv struct {
	ctx       context.Context
	mgr       ctrl.Manager
	c         client.Client
	clientset *kubernetes.Clientset
}

func startEndpointEnv(t *testing.T) *endpointEnv {
	t.Helper()
	env := &envtest.Environment{}
	cfg, err := env.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = env.Stop() })
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	_, err = mgr.GetCache().GetInformer(ctx, &corev1.Pod{})
	require.NoError(t, err)
	clientset, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	e := &endpointEnv{ctx: ctx, mgr: mgr, c: mgr.GetClient(), clientset: clientset}
	go func() { _ = mgr.Start(ctx) }()
	require.True(t, mgr.GetCache().WaitForCacheSync(ctx))
	require.NoError(t, e.c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "app"}}))
	return e
}

// newPod creates a pod of ServiceAccount app in namespace default.
func (e *endpointEnv) newPod(t *testing.T, name string, mods ...func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.PodSpec{ServiceAccountName: "app", AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "app", Image: "app:1"}}},
	}
	for _, m := range mods {
		m(pod)
	}
	require.NoError(t, e.c.Create(e.ctx, pod))
	return pod
}

// token is a TokenRequest-issued token of ServiceAccount app bound to pod, as the kubelet projects it.
func (e *endpointEnv) token(t *testing.T, pod *corev1.Pod, audience string) string {
	t.Helper()
	tr, err := e.clientset.CoreV1().ServiceAccounts("default").CreateToken(e.ctx, "app", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			Audiences:      []string{audience},
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	return tr.Status.Token
}

// post sends body with the bearer token and returns the status code and either the decoded 200 answer
// or the refusal's text.
func post(t *testing.T, srv *httptest.Server, path, tok string, body, answer any) (int, string) {
	t.Helper()
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+path, bytes.NewReader(raw))
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(answer))
		return resp.StatusCode, ""
	}
	text, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(text)
}

// The grant endpoint against a real API server: real pod-bound ServiceAccount tokens (TokenRequest),
// real TokenReviews, and grants driven by annotating the pod, as the controller will.
func TestGrantEndpoint(t *testing.T) {
	e := startEndpointEnv(t)
	ctx, c := e.ctx, e.c
	informer, err := e.mgr.GetCache().GetInformer(ctx, &corev1.Pod{})
	require.NoError(t, err)
	grants, err := grant.NewAnnotationGrants(ctx, informer)
	require.NoError(t, err)

	srv := httptest.NewTLSServer(&grant.Handler{
		Authenticate: grant.TokenReviewAuthenticator(c),
		Grants:       grants,
		MaxWait:      2 * time.Second,
	})
	t.Cleanup(srv.Close)
	newPod := func(name string) *corev1.Pod { return e.newPod(t, name) }
	token := func(pod *corev1.Pod, audience string) string { return e.token(t, pod, audience) }
	ask := func(pod *corev1.Pod, tok string) (int, bool) {
		var r grant.Response
		code, _ := post(t, srv, grant.Path, tok, grant.Request{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}, &r)
		return code, r.Granted
	}

	held, other := newPod("held-0"), newPod("other-0")
	heldToken := token(held, singletonv1.GrantTokenAudience)

	t.Run("refused tokens", func(t *testing.T) {
		code, _ := ask(held, "not-a-token")
		assert.Equal(t, http.StatusUnauthorized, code)
		code, _ = ask(held, token(held, "another-audience"))
		assert.Equal(t, http.StatusUnauthorized, code, "only the statefulsingleton audience")
		code, _ = ask(held, token(other, singletonv1.GrantTokenAudience))
		assert.Equal(t, http.StatusForbidden, code, "a pod cannot ask for another pod's grant")
	})

	t.Run("long poll without a grant", func(t *testing.T) {
		start := time.Now()
		code, granted := ask(held, heldToken)
		assert.Equal(t, http.StatusOK, code)
		assert.False(t, granted)
		assert.GreaterOrEqual(t, time.Since(start), 2*time.Second, "the answer waits for MaxWait")
	})

	t.Run("granted by the pod annotation", func(t *testing.T) {
		type answer struct {
			code    int
			granted bool
			at      time.Time
		}
		answers := make(chan answer, 1)
		go func() {
			code, granted := ask(held, heldToken)
			answers <- answer{code, granted, time.Now()}
		}()
		time.Sleep(300 * time.Millisecond) // the request is waiting
		annotated := time.Now()
		patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+singletonv1.AnnotationStartGranted+`":"1"}}}`))
		require.NoError(t, c.Patch(ctx, held, patch))
		a := <-answers
		assert.Equal(t, http.StatusOK, a.code)
		assert.True(t, a.granted)
		t.Logf("annotation → grant answered in %v", a.at.Sub(annotated))
		assert.Less(t, a.at.Sub(annotated), time.Second)

		code, granted := ask(held, heldToken)
		assert.Equal(t, http.StatusOK, code)
		assert.True(t, granted, "a granted pod is answered at once")
		code, granted = ask(other, token(other, singletonv1.GrantTokenAudience))
		assert.Equal(t, http.StatusOK, code)
		assert.False(t, granted, "the grant is for that pod only")
	})
}
