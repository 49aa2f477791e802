//go:build integration

package podwebhook_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	"github.com/statefulops/statefulops/shared/podmutation"
	"github.com/statefulops/statefulops/webhook-server/internal/imageconfig/registrytest"
	"github.com/statefulops/statefulops/webhook-server/internal/server"
)

// The webhook server runs in-process in loopback mode (the certificate envtest generates, as
// --webhook-cert-path), registered with the real API server through config/webhook/manifests.yaml, so
// every pod below is admitted — and validated — by a real kube-apiserver.

var k8s client.Client

// The grant CA Secret of these tests, in the webhook server's namespace.
const (
	grantNamespace = "webhook-system"
	grantCA1       = "-----BEGIN CERTIFICATE-----\nfirst\n-----END CERTIFICATE-----\n"
	grantCA2       = "-----BEGIN CERTIFICATE-----\nrotated\n-----END CERTIFICATE-----\n"
)

func TestMain(m *testing.M) {
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "..", "singleton-operator", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		WebhookInstallOptions: envtest.WebhookInstallOptions{Paths: []string{filepath.Join("..", "..", "config", "webhook", "manifests.yaml")}},
	}
	cfg, err := env.Start()
	if err != nil {
		panic(err)
	}
	code := func() int {
		defer env.Stop()
		scheme := runtime.NewScheme()
		_ = clientgoscheme.AddToScheme(scheme)
		_ = singletonv1.AddToScheme(scheme)
		wio := env.WebhookInstallOptions
		mgr, err := ctrl.NewManager(cfg, ctrl.Options{
			Scheme:                 scheme,
			Metrics:                metricsserver.Options{BindAddress: "0"},
			HealthProbeBindAddress: "0",
			WebhookServer:          webhook.NewServer(webhook.Options{Host: wio.LocalServingHost, Port: wio.LocalServingPort, CertDir: wio.LocalServingCertDir}),
		})
		if err != nil {
			panic(err)
		}
		// The grant CA comes from the operator's Secret, read through the API (--grant-ca-secret).
		direct, err := client.New(cfg, client.Options{Scheme: scheme})
		if err != nil {
			panic(err)
		}
		if err := direct.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: grantNamespace}}); err != nil {
			panic(err)
		}
		if err := direct.Create(context.Background(), &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: grantNamespace, Name: "grant-cert"},
			Data:       map[string][]byte{"ca.crt": []byte(grantCA1)},
		}); err != nil {
			panic(err)
		}
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		fs.String("webhook-cert-path", "", "")
		c := &server.Config{}
		c.AddFlags(fs)
		if err := fs.Parse([]string{"--webhook-cert-path=" + wio.LocalServingCertDir, "--sidecar-image=s:1", "--grant-url=https://grant/v1/grant",
			"--grant-ca-secret=grant-cert", "--cert-namespace=" + grantNamespace}); err != nil {
			panic(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if err := c.Setup(ctx, mgr); err != nil {
			panic(err)
		}
		go func() { _ = mgr.Start(ctx) }()
		k8s = mgr.GetClient()
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			panic("cache never synced")
		}
		return m.Run()
	}()
	os.Exit(code)
}

func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "pods-"}}
	require.NoError(t, k8s.Create(t.Context(), ns))
	return ns.Name
}

func newSingleton(t *testing.T, ns, name string, mode singletonv1.HoldMode, matchLabels map[string]string) *singletonv1.StatefulSingleton {
	t.Helper()
	ss := &singletonv1.StatefulSingleton{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: singletonv1.StatefulSingletonSpec{
			Selector: metav1.LabelSelector{MatchLabels: matchLabels}, TerminationGracePeriod: 120, HoldMode: mode,
		},
	}
	require.NoError(t, k8s.Create(t.Context(), ss))
	// The webhook reads through its cache: wait until it has seen the singleton.
	require.Eventually(t, func() bool {
		return k8s.Get(t.Context(), client.ObjectKeyFromObject(ss), &singletonv1.StatefulSingleton{}) == nil
	}, 10*time.Second, 10*time.Millisecond)
	return ss
}

func newPod(ns, name string, labels map[string]string, command ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: "registry.example/app:1", Command: command, Args: []string{"--name=a b", "--list=a,b", `"quoted"`},
		}}},
	}
}

func TestAMatchingPodIsMutatedAndAcceptedByTheAPIServer(t *testing.T) {
	ns := newNamespace(t)
	newSingleton(t, ns, "db", singletonv1.HoldModeWrapper, map[string]string{"app": "db"})

	pod := newPod(ns, "db-0", map[string]string{"app": "db"}, "/bin/server")
	require.NoError(t, k8s.Create(t.Context(), pod), "the mutated pod passes the API server's validation")

	assert.Equal(t, "true", pod.Labels[singletonv1.LabelManaged])
	assert.Equal(t, "db", pod.Labels[singletonv1.LabelSingleton])
	assert.Equal(t, "Wrapper", pod.Annotations[singletonv1.AnnotationHoldMode])
	assert.Contains(t, pod.Spec.ReadinessGates, corev1.PodReadinessGate{ConditionType: singletonv1.ReadinessGate})
	assert.Equal(t, int64(120), *pod.Spec.TerminationGracePeriodSeconds)
	require.Len(t, pod.Spec.Containers, 2)
	// The sidecar first (its postStart hook installs the wrapper before the app starts), no init container.
	assert.Equal(t, "status-sidecar", pod.Spec.Containers[0].Name)
	assert.Equal(t, "s:1", pod.Spec.Containers[0].Image)
	assert.Equal(t, []string{singletonv1.WrapperBinary}, pod.Spec.Containers[1].Command)
	assert.Empty(t, pod.Spec.InitContainers)
	assert.Equal(t, grantCA1, sidecarEnv(pod, "GRANT_CA"), "the sidecar trusts the CA of the operator's grant Secret")
	assert.Empty(t, pod.Spec.SchedulingGates)
	checkExitLayout(t, pod, "app")
}

// checkExitLayout checks the exit report's part of a stored Wrapper pod whose app containers are apps:
// the in-memory exit volume, mounted read-write in every app container (told its own name) and in the
// sidecar (told the app containers); the signal volume read-only in the app containers.
func checkExitLayout(t *testing.T, pod *corev1.Pod, apps ...string) {
	t.Helper()
	var exit *corev1.Volume
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Name == singletonv1.ExitVolumeName {
			exit = &pod.Spec.Volumes[i]
		}
	}
	require.NotNil(t, exit, "volume %s", singletonv1.ExitVolumeName)
	require.NotNil(t, exit.EmptyDir)
	assert.Equal(t, corev1.StorageMediumMemory, exit.EmptyDir.Medium)
	assert.Equal(t, "1Mi", exit.EmptyDir.SizeLimit.String())
	mount := func(c corev1.Container, volume string) *corev1.VolumeMount {
		for i := range c.VolumeMounts {
			if c.VolumeMounts[i].Name == volume {
				return &c.VolumeMounts[i]
			}
		}
		return nil
	}
	var got []string
	for _, c := range pod.Spec.Containers {
		m := mount(c, singletonv1.ExitVolumeName)
		if assert.NotNil(t, m, "container %s mounts %s", c.Name, singletonv1.ExitVolumeName) {
			assert.Equal(t, singletonv1.ExitDir, m.MountPath, c.Name)
			assert.False(t, m.ReadOnly, c.Name)
		}
		if c.Name == singletonv1.SidecarContainerName {
			continue
		}
		got = append(got, c.Name)
		if m := mount(c, singletonv1.SignalVolumeName); assert.NotNil(t, m, c.Name) {
			assert.True(t, m.ReadOnly, "the signal stays read-only in %s", c.Name)
		}
		var self []string
		for _, e := range c.Env {
			if e.Name == singletonv1.EnvContainerName {
				self = append(self, e.Value)
			}
		}
		assert.Equal(t, []string{c.Name}, self, "%s of %s", singletonv1.EnvContainerName, c.Name)
	}
	assert.Equal(t, apps, got)
	assert.Equal(t, strings.Join(apps, ","), sidecarEnv(pod, singletonv1.EnvAppContainers))
}

// The injected parts (the sidecar, the exit, signal and wrapper volumes, the token) keep a pod that meets
// the restricted Pod Security profile within it: the API server's PodSecurity admission, enforcing
// restricted on the namespace, stores the mutated pod. The unmutated pod that does not meet the
// profile is refused, so the check is real.
func TestAWrappedPodIsAdmittedUnderRestrictedPodSecurity(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "restricted-", Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest",
	}}}
	require.NoError(t, k8s.Create(t.Context(), ns))
	newSingleton(t, ns.Name, "db", singletonv1.HoldModeWrapper, map[string]string{"app": "db"})

	loose := newPod(ns.Name, "web-0", map[string]string{"app": "web"}, "/bin/web")
	err := k8s.Create(t.Context(), loose)
	require.Error(t, err, "PodSecurity enforces restricted on the namespace")
	assert.Contains(t, err.Error(), "restricted")

	pod := newPod(ns.Name, "db-0", map[string]string{"app": "db"}, "/bin/server")
	pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: "metrics", Image: "registry.example/exporter:1", Command: []string{"/exporter"}})
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: new(true), RunAsUser: new(int64(1000)),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	for i := range pod.Spec.Containers {
		pod.Spec.Containers[i].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: new(false),
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	}
	require.NoError(t, k8s.Create(t.Context(), pod), "the mutated pod meets the restricted profile")
	assert.Equal(t, "Wrapper", pod.Annotations[singletonv1.AnnotationHoldMode])
	require.Len(t, pod.Spec.Containers, 3)
	assert.Equal(t, singletonv1.SidecarContainerName, pod.Spec.Containers[0].Name)
	checkExitLayout(t, pod, "app", "metrics")
}

func TestSchedulingGateModeAndTheFallbackAreAcceptedByTheAPIServer(t *testing.T) {
	ns := newNamespace(t)
	newSingleton(t, ns, "gated", singletonv1.HoldModeSchedulingGate, map[string]string{"app": "gated"})
	newSingleton(t, ns, "wrapped", singletonv1.HoldModeWrapper, map[string]string{"app": "nocommand"})

	for _, pod := range []*corev1.Pod{
		newPod(ns, "gated-0", map[string]string{"app": "gated"}, "/bin/server"),
		newPod(ns, "nocommand-0", map[string]string{"app": "nocommand"}), // image entrypoint: fallback
	} {
		require.NoError(t, k8s.Create(t.Context(), pod))
		assert.Equal(t, []corev1.PodSchedulingGate{{Name: singletonv1.SchedulingGate}}, pod.Spec.SchedulingGates, pod.Name)
		assert.Len(t, pod.Spec.Containers, 1, "no sidecar")
		assert.Equal(t, "SchedulingGate", pod.Annotations[singletonv1.AnnotationHoldMode])
	}
}

func TestANonMatchingPodIsUnchanged(t *testing.T) {
	ns := newNamespace(t)
	newSingleton(t, ns, "db", singletonv1.HoldModeWrapper, map[string]string{"app": "db"})

	pod := newPod(ns, "web-0", map[string]string{"app": "web"}, "/bin/web")
	// What the API server makes of the pod without any webhook (dry run in a namespace whose pods
	// match nothing is the same path, so compare against the defaulted original instead).
	require.NoError(t, k8s.Create(t.Context(), pod))
	assert.NotContains(t, pod.Labels, singletonv1.LabelManaged)
	assert.Empty(t, pod.Annotations)
	assert.Empty(t, pod.Spec.ReadinessGates)
	assert.Nil(t, pod.Spec.Affinity)
	assert.Len(t, pod.Spec.Containers, 1)
	assert.Equal(t, []string{"/bin/web"}, pod.Spec.Containers[0].Command)
	assert.Equal(t, int64(30), *pod.Spec.TerminationGracePeriodSeconds, "the API server's default, not ours")
}

func TestLabellingAndAnnotatingAManagedPodSucceedsAndKeepsItsSpec(t *testing.T) {
	ns := newNamespace(t)
	newSingleton(t, ns, "db", singletonv1.HoldModeWrapper, map[string]string{"app": "db"})
	pod := newPod(ns, "db-0", map[string]string{"app": "db"}, "/bin/server")
	require.NoError(t, k8s.Create(t.Context(), pod))
	before := pod.Spec.DeepCopy()

	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"x"},"annotations":{"note":"y"}}}`))
	require.NoError(t, k8s.Patch(t.Context(), pod, patch))
	assert.Equal(t, "x", pod.Labels["team"])
	assert.Equal(t, "y", pod.Annotations["note"])
	assert.True(t, equality.Semantic.DeepEqual(*before, pod.Spec), "the spec is unchanged")

	pod.Labels["other"] = "z"
	require.NoError(t, k8s.Update(t.Context(), pod), "a full update of a managed pod is not rewritten")
	assert.True(t, equality.Semantic.DeepEqual(*before, pod.Spec))
}

func TestOverlappingSingletonsTheOldestWins(t *testing.T) {
	ns := newNamespace(t)
	newSingleton(t, ns, "zz-older", singletonv1.HoldModeSchedulingGate, map[string]string{"app": "db"})
	time.Sleep(1100 * time.Millisecond) // creationTimestamp has a one-second resolution
	newSingleton(t, ns, "aa-newer", singletonv1.HoldModeWrapper, map[string]string{"app": "db", "tier": "x"})

	for i := range 3 {
		pod := newPod(ns, fmt.Sprintf("db-%d", i), map[string]string{"app": "db", "tier": "x"}, "/bin/server")
		require.NoError(t, k8s.Create(t.Context(), pod))
		assert.Equal(t, "zz-older", pod.Labels[singletonv1.LabelSingleton])
		assert.Equal(t, "SchedulingGate", pod.Annotations[singletonv1.AnnotationHoldMode])
	}
}

func sidecarEnv(pod *corev1.Pod, name string) string {
	for _, c := range pod.Spec.Containers {
		if c.Name != singletonv1.SidecarContainerName {
			continue
		}
		for _, e := range c.Env {
			if e.Name == name {
				return e.Value
			}
		}
	}
	return ""
}

// When the operator's grant CA rotates, pods admitted afterwards get the new CA: the webhook follows
// the Secret through the API, no restart and no volume refresh needed.
func TestTheGrantCAFollowsTheOperatorsSecret(t *testing.T) {
	ns := newNamespace(t)
	newSingleton(t, ns, "db", singletonv1.HoldModeWrapper, map[string]string{"app": "db"})
	secret := &corev1.Secret{}
	require.NoError(t, k8s.Get(t.Context(), client.ObjectKey{Namespace: grantNamespace, Name: "grant-cert"}, secret))
	secret.Data["ca.crt"] = []byte(grantCA2)
	require.NoError(t, k8s.Update(t.Context(), secret))
	t.Cleanup(func() {
		secret.Data["ca.crt"] = []byte(grantCA1)
		_ = k8s.Update(context.Background(), secret)
	})
	i := 0
	require.Eventually(t, func() bool {
		i++
		pod := newPod(ns, fmt.Sprintf("db-%d", i), map[string]string{"app": "db"}, "/bin/server")
		require.NoError(t, k8s.Create(t.Context(), pod))
		return sidecarEnv(pod, "GRANT_CA") == grantCA2
	}, 10*time.Second, 50*time.Millisecond)
}

// A pod without command, its image in a private registry (a real one on loopback, behind basic auth)
// and its pull secret named by the pod: the webhook server, as set up by its flags, reads the secret
// from its cache of the namespace (which holds a StatefulSingleton), the image config with it, and the
// API server stores the pod in Wrapper mode with the image's ENTRYPOINT and the pod's args.
func TestAPodWithoutCommandGetsWrapperModeFromItsPrivateImage(t *testing.T) {
	reg, image := registrytest.Serve(t, "puller", "s3cret", "private/db:1", v1.Config{Entrypoint: []string{"docker-entrypoint.sh"}, Cmd: []string{"postgres"}})
	ns := newNamespace(t)
	require.NoError(t, k8s.Create(t.Context(), reg.PullSecret(ns, "registry", "puller", "s3cret")))
	newSingleton(t, ns, "db", singletonv1.HoldModeWrapper, map[string]string{"app": "db"})

	i := 0
	var pod *corev1.Pod
	// The namespace's pull secret cache starts with its first StatefulSingleton: until it is in sync
	// the image is read anonymously (refused) and the pod falls back.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		i++
		pod = newPod(ns, fmt.Sprintf("db-%d", i), map[string]string{"app": "db"})
		pod.Spec.Containers[0].Image = image
		pod.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "registry"}}
		require.NoError(c, k8s.Create(t.Context(), pod))
		assert.Equal(c, "Wrapper", pod.Annotations[singletonv1.AnnotationHoldMode], pod.Annotations[singletonv1.AnnotationHoldFallback])
	}, 30*time.Second, 100*time.Millisecond)
	assert.Empty(t, pod.Spec.SchedulingGates)
	app := pod.Spec.Containers[1]
	assert.Equal(t, []string{singletonv1.WrapperBinary}, app.Command)
	var entry string
	for _, e := range app.Env {
		if e.Name == singletonv1.EnvOriginalEntrypoint {
			entry = e.Value
		}
	}
	argv, err := podmutation.OriginalArgv(strings.ReplaceAll(entry, "$$", "$"))
	require.NoError(t, err)
	assert.Equal(t, []string{"docker-entrypoint.sh", "--name=a b", "--list=a,b", `"quoted"`}, argv, "ENTRYPOINT, then the pod's args instead of CMD")
}

// SS-14: the seed's preferred anti-affinity by default; with spec.antiAffinity Required the pod also
// gets the same term as requiredDuringScheduling, against the pods of its own singleton only, and the
// API server accepts it.
func TestRequiredAntiAffinityIsAddedAtAdmission(t *testing.T) {
	ns := newNamespace(t)
	newSingleton(t, ns, "db", singletonv1.HoldModeSchedulingGate, map[string]string{"app": "db"})
	hard := &singletonv1.StatefulSingleton{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cache"},
		Spec: singletonv1.StatefulSingletonSpec{Selector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "cache"}},
			HoldMode: singletonv1.HoldModeSchedulingGate, AntiAffinity: singletonv1.AntiAffinityRequired},
	}
	require.NoError(t, k8s.Create(t.Context(), hard))

	soft := newPod(ns, "db-0", map[string]string{"app": "db"}, "/bin/server")
	require.NoError(t, k8s.Create(t.Context(), soft))
	assert.Equal(t, []corev1.WeightedPodAffinityTerm{podmutation.AntiAffinityTerm("db")}, soft.Spec.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution)
	assert.Empty(t, soft.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution)

	require.EventuallyWithT(t, func(c *assert.CollectT) { // the webhook reads the singleton through its cache
		pod := newPod(ns, "", map[string]string{"app": "cache"}, "/bin/server")
		pod.GenerateName = "cache-"
		if !assert.NoError(c, k8s.Create(t.Context(), pod)) || !assert.NotNil(c, pod.Spec.Affinity, "mutated") {
			return
		}
		assert.Equal(c, []corev1.PodAffinityTerm{podmutation.AntiAffinityTerm("cache").PodAffinityTerm},
			pod.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution)
	}, 10*time.Second, 100*time.Millisecond)
}
