package podwebhook

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	"github.com/statefulops/statefulops/shared/podmutation"
	"github.com/statefulops/statefulops/webhook-server/internal/imageconfig"
	"github.com/statefulops/statefulops/webhook-server/internal/imageconfig/registrytest"
)

// admit runs a pod through the handler and returns the pod as the API server would store it (the
// response's patch applied to the request's bytes).
func admit(t testing.TB, m *Mutator, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	req := request(&testing.T{}, admissionv1.Create, pod)
	resp := m.Handle(context.Background(), req)
	require.True(t, resp.Allowed, "%v", resp.Result)
	var doc any
	require.NoError(t, json.Unmarshal(req.Object.Raw, &doc))
	ops, err := json.Marshal(resp.Patches)
	require.NoError(t, err)
	patched, err := applyPatch(doc, ops)
	require.NoError(t, err)
	raw, err := json.Marshal(patched)
	require.NoError(t, err)
	got := &corev1.Pod{}
	require.NoError(t, json.Unmarshal(raw, got))
	return got
}

func imagePod(image string, args ...string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"app": "db"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: image, Args: args}}}}
}

func imageMutator(t testing.TB, opts imageconfig.Options) *Mutator {
	r := fake.NewClientBuilder().WithScheme(scheme()).WithObjects(ss("db", time.Now(), map[string]string{"app": "db"})).Build()
	return &Mutator{Reader: r, Decoder: admission.NewDecoder(scheme()), Images: imageconfig.New(opts)}
}

// originalArgv is the argv the wrapper of container name receives (after the kubelet's $$ → $).
func originalArgv(t testing.TB, pod *corev1.Pod, name string) []string {
	t.Helper()
	for _, c := range pod.Spec.Containers {
		if c.Name != name {
			continue
		}
		require.Equal(t, []string{singletonv1.WrapperBinary}, c.Command)
		for _, e := range c.Env {
			if e.Name == singletonv1.EnvOriginalEntrypoint {
				argv, err := podmutation.OriginalArgv(strings.ReplaceAll(e.Value, "$$", "$"))
				require.NoError(t, err)
				return argv
			}
		}
	}
	t.Fatalf("container %q is not wrapped", name)
	return nil
}

func requireWrapper(t testing.TB, pod *corev1.Pod) {
	t.Helper()
	require.Equal(t, "Wrapper", pod.Annotations[singletonv1.AnnotationHoldMode], pod.Annotations[singletonv1.AnnotationHoldFallback])
	require.Empty(t, pod.Annotations[singletonv1.AnnotationHoldFallback])
	require.Empty(t, pod.Spec.SchedulingGates)
}

func requireFallback(t testing.TB, pod *corev1.Pod, reason string) {
	t.Helper()
	require.Equal(t, "SchedulingGate", pod.Annotations[singletonv1.AnnotationHoldMode])
	require.Contains(t, pod.Annotations[singletonv1.AnnotationHoldFallback], reason)
	require.Equal(t, []corev1.PodSchedulingGate{{Name: singletonv1.SchedulingGate}}, pod.Spec.SchedulingGates)
	require.Empty(t, pod.Spec.Containers[0].Command)
}

var amd64 = registrytest.LinuxAMD64

// A pod without command is admitted in Wrapper mode, its wrapper getting the image's ENTRYPOINT and CMD
// — or ENTRYPOINT and the pod's args — read from a real registry; the image's platform follows the
// pod's nodeSelector.
func TestHandleWrapsAPodWithoutCommandFromItsImageConfig(t *testing.T) {
	reg := registrytest.New(t, "", "")
	reg.Push(t, "postgres:14", registrytest.Image(t, v1.Config{Entrypoint: []string{"docker-entrypoint.sh"}, Cmd: []string{"postgres"}}, amd64))
	arm64 := v1.Platform{OS: "linux", Architecture: "arm64"}
	multi := reg.PushIndex(t, "multi:1",
		registrytest.Manifest{Platform: amd64, Image: registrytest.Image(t, v1.Config{Entrypoint: []string{"/amd64"}}, amd64)},
		registrytest.Manifest{Platform: arm64, Image: registrytest.Image(t, v1.Config{Entrypoint: []string{"/arm64"}}, arm64)})
	m := imageMutator(t, imageconfig.Options{})

	got := admit(t, m, imagePod(reg.Host+"/postgres:14"))
	requireWrapper(t, got)
	assert.Equal(t, []string{"docker-entrypoint.sh", "postgres"}, originalArgv(t, got, "db"))

	got = admit(t, m, imagePod(reg.Host+"/postgres:14", "postgres", "-c", "max_connections=$(MAX)"))
	requireWrapper(t, got)
	assert.Equal(t, []string{"docker-entrypoint.sh", "postgres", "-c", "max_connections=$(MAX)"}, originalArgv(t, got, "db"))

	for _, arch := range []string{"amd64", "arm64"} {
		pod := imagePod(multi)
		pod.Spec.NodeSelector = map[string]string{corev1.LabelArchStable: arch, corev1.LabelOSStable: "linux"}
		got = admit(t, m, pod)
		requireWrapper(t, got)
		assert.Equal(t, []string{"/" + arch}, originalArgv(t, got, "db"))
	}

	// A pod that names its node: the node's platform, over its nodeSelector.
	m.NodeLabels = func(name string) (map[string]string, bool) {
		return map[string]string{corev1.LabelOSStable: "linux", corev1.LabelArchStable: "arm64"}, name == "arm-node"
	}
	pod := imagePod(multi)
	pod.Spec.NodeName = "arm-node"
	pod.Spec.NodeSelector = map[string]string{corev1.LabelArchStable: "amd64"}
	got = admit(t, m, pod)
	requireWrapper(t, got)
	assert.Equal(t, []string{"/arm64"}, originalArgv(t, got, "db"))
}

// Every fallback keeps today's SchedulingGate hold, with the reason in the annotation.
func TestHandleFallsBackWithTheReason(t *testing.T) {
	reg := registrytest.New(t, "", "")
	reg.Push(t, "scratch:1", registrytest.Image(t, v1.Config{}, amd64))
	reg.Push(t, "app:1", registrytest.Image(t, v1.Config{Entrypoint: []string{"/app"}}, amd64))
	m := imageMutator(t, imageconfig.Options{})

	requireFallback(t, admit(t, m, imagePod(reg.Host+"/scratch:1")), "has neither ENTRYPOINT nor CMD")
	requireFallback(t, admit(t, m, imagePod(reg.Host+"/nothing:1")), "NAME_UNKNOWN")
	reg.Fail(http.StatusInternalServerError)
	requireFallback(t, admit(t, m, imagePod(reg.Host+"/app:1")), "500")
	reg.Fail(0)
	requireWrapper(t, admit(t, m, imagePod(reg.Host+"/app:1")))

	m.Images = nil
	requireFallback(t, admit(t, m, imagePod(reg.Host+"/app:1")), "the webhook cannot read its image's entrypoint")
}

// A private registry: refused without credentials (the reason says so), read with the pod's keychain.
func TestHandleReadsPrivateImagesWithThePodsKeychain(t *testing.T) {
	_, image := registrytest.Serve(t, "puller", "s3cret", "private:1", v1.Config{Cmd: []string{"/private"}})
	m := imageMutator(t, imageconfig.Options{})
	requireFallback(t, admit(t, m, imagePod(image)), "UNAUTHORIZED")

	m.Keychain = func(_ context.Context, pod *corev1.Pod) authn.Keychain {
		return staticKeychain{&authn.Basic{Username: "puller", Password: "s3cret"}}
	}
	got := admit(t, m, imagePod(image))
	requireWrapper(t, got)
	assert.Equal(t, []string{"/private"}, originalArgv(t, got, "db"))
}

type staticKeychain struct{ authn.Authenticator }

func (k staticKeychain) Resolve(authn.Resource) (authn.Authenticator, error) {
	return k.Authenticator, nil
}

// A registry slower than the budget: the admission returns within it, held with the scheduling gate;
// the lookup goes on and the next pod of the image gets Wrapper mode.
func TestHandleNeverWaitsPastTheBudget(t *testing.T) {
	reg, image := registrytest.Serve(t, "", "", "slow:1", v1.Config{Entrypoint: []string{"/slow"}})
	m := imageMutator(t, imageconfig.Options{Budget: 300 * time.Millisecond})
	release := reg.Hold()
	defer release()

	start := time.Now()
	requireFallback(t, admit(t, m, imagePod(image)), "did not answer within the webhook's budget")
	assert.Less(t, time.Since(start), 3*time.Second)

	release()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := admit(t, m, imagePod(image))
		assert.Equal(c, "Wrapper", got.Annotations[singletonv1.AnnotationHoldMode])
	}, 10*time.Second, 50*time.Millisecond)
	assert.Equal(t, []string{"/slow"}, originalArgv(t, admit(t, m, imagePod(image)), "db"))
}
