package podmutation

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

var testConfig = Config{SidecarImage: "statefulops/status-sidecar:v0", GrantURL: "https://grant.example/v1/grant"}

func singleton(mode singletonv1.HoldMode, grace int32, respect *bool) *singletonv1.StatefulSingleton {
	return &singletonv1.StatefulSingleton{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns"},
		Spec: singletonv1.StatefulSingletonSpec{
			Selector:               metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			TerminationGracePeriod: grace, MaxTransitionTime: 300, RespectPodGracePeriod: respect, HoldMode: mode,
		},
	}
}

func appPod(containers ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "db-0", Namespace: "ns", Labels: map[string]string{"app": "db"}},
		Spec:       corev1.PodSpec{Containers: containers},
	}
}

func container(name string, command []string, args ...string) corev1.Container {
	return corev1.Container{Name: name, Image: "app:1", Command: command, Args: args}
}

func env(c corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

func findContainer(cs []corev1.Container, name string) *corev1.Container {
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i]
		}
	}
	return nil
}

func TestMutateAddsTheCommonParts(t *testing.T) {
	for _, mode := range []singletonv1.HoldMode{singletonv1.HoldModeWrapper, singletonv1.HoldModeSchedulingGate} {
		t.Run(string(mode), func(t *testing.T) {
			pod := appPod(container("app", []string{"/app"}))
			got := Mutate(pod, singleton(mode, 45, nil), testConfig)
			assert.Equal(t, "true", got.Labels[singletonv1.LabelManaged])
			assert.Equal(t, "db", got.Labels[singletonv1.LabelSingleton])
			assert.Equal(t, "db", got.Labels["app"], "the pod's own labels stay")
			assert.Equal(t, "true", got.Annotations[singletonv1.AnnotationManaged])
			assert.Equal(t, string(mode), got.Annotations[singletonv1.AnnotationHoldMode])
			assert.Equal(t, []corev1.PodReadinessGate{{ConditionType: singletonv1.ReadinessGate}}, got.Spec.ReadinessGates)
			require.NotNil(t, got.Spec.Affinity)
			terms := got.Spec.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution
			require.Len(t, terms, 1)
			assert.Equal(t, int32(100), terms[0].Weight)
			assert.Equal(t, "kubernetes.io/hostname", terms[0].PodAffinityTerm.TopologyKey)
			assert.Equal(t, AntiAffinityTerm("db"), terms[0])
			assert.Equal(t, int64(45), *got.Spec.TerminationGracePeriodSeconds)
			assert.Empty(t, pod.Labels[singletonv1.LabelManaged], "the input pod is not modified")
		})
	}
}

func TestMutateGracePeriod(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pod     *int64
		spec    int32
		respect *bool
		want    int64
	}{
		{"pod unset takes the spec", nil, 120, nil, 120},
		{"pod longer is kept by default", ptr.To(int64(600)), 120, nil, 600},
		{"pod longer is kept when respected", ptr.To(int64(600)), 120, ptr.To(true), 600},
		{"pod longer is overridden when not respected", ptr.To(int64(600)), 120, ptr.To(false), 120},
		{"pod shorter takes the spec", ptr.To(int64(5)), 120, nil, 120},
		{"spec unset means 30", nil, 0, nil, 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := appPod(container("app", []string{"/app"}))
			pod.Spec.TerminationGracePeriodSeconds = tc.pod
			got := Mutate(pod, singleton(singletonv1.HoldModeSchedulingGate, tc.spec, tc.respect), testConfig)
			assert.Equal(t, tc.want, *got.Spec.TerminationGracePeriodSeconds)
		})
	}
}

func TestMutateWrapperHold(t *testing.T) {
	argv := []string{"/bin/server", "--name=a b", `--quote="x"`, "--list=a,b,c", "$(HOME)", "$$(LITERAL)", "]"}
	pod := appPod(container("app", argv[:1], argv[1:]...), container("second", []string{"run"}))
	got := Mutate(pod, singleton(singletonv1.HoldModeWrapper, 30, nil), testConfig)

	app := findContainer(got.Spec.Containers, "app")
	// What the wrapper receives decodes to the exact argv.
	assert.Equal(t, argv, wrappedArgv(t, app))
	assert.Contains(t, app.VolumeMounts, corev1.VolumeMount{Name: singletonv1.SignalVolumeName, MountPath: "/var/run/signal", ReadOnly: true})
	assert.Contains(t, app.VolumeMounts, corev1.VolumeMount{Name: singletonv1.WrapperVolumeName, MountPath: "/opt/wrapper", ReadOnly: true})
	assert.Equal(t, []string{singletonv1.WrapperBinary}, findContainer(got.Spec.Containers, "second").Command)

	side := findContainer(got.Spec.Containers, "status-sidecar")
	require.NotNil(t, side)
	assert.Equal(t, "10m", side.Resources.Requests.Cpu().String())
	assert.Equal(t, "32Mi", side.Resources.Requests.Memory().String())
	assert.Equal(t, testConfig.SidecarImage, side.Image)
	grantURL, _ := env(*side, "GRANT_URL")
	assert.Equal(t, testConfig.GrantURL, grantURL)
	assert.Contains(t, side.VolumeMounts, corev1.VolumeMount{Name: singletonv1.SignalVolumeName, MountPath: "/var/run/signal"})

	// No init container: the sidecar comes first and its postStart hook installs the wrapper, which the
	// kubelet waits for before it starts the app containers.
	assert.Empty(t, got.Spec.InitContainers)
	assert.Equal(t, "status-sidecar", got.Spec.Containers[0].Name, "the sidecar is the first container")
	require.NotNil(t, side.Lifecycle)
	assert.Equal(t, []string{"/status-sidecar", "install-wrapper", "/opt/wrapper/singleton-wrapper"}, side.Lifecycle.PostStart.Exec.Command)
	assert.Contains(t, side.VolumeMounts, corev1.VolumeMount{Name: singletonv1.WrapperVolumeName, MountPath: "/opt/wrapper"})
	assert.Equal(t, "app", got.Annotations["kubectl.kubernetes.io/default-container"], "kubectl logs still defaults to the app")
	assert.Len(t, got.Spec.Volumes, 3)
	assert.Empty(t, got.Spec.SchedulingGates)
	for _, v := range got.Spec.Volumes {
		if v.Name == singletonv1.GrantTokenVolumeName {
			assert.Equal(t, "statefulsingleton", v.Projected.Sources[0].ServiceAccountToken.Audience)
		}
	}
}

func TestMutateSchedulingGateHold(t *testing.T) {
	got := Mutate(appPod(container("app", nil)), singleton(singletonv1.HoldModeSchedulingGate, 30, nil), testConfig)
	assert.Equal(t, []corev1.PodSchedulingGate{{Name: singletonv1.SchedulingGate}}, got.Spec.SchedulingGates)
	assert.Len(t, got.Spec.Containers, 1, "no sidecar")
	assert.Empty(t, got.Spec.InitContainers)
	assert.Empty(t, got.Spec.Containers[0].Command, "no command rewrite")
	assert.Empty(t, got.Annotations[singletonv1.AnnotationHoldFallback])
}

func TestMutateWrapperFallsBackToTheSchedulingGate(t *testing.T) {
	withInit := appPod(container("app", []string{"/app"}))
	withInit.Spec.InitContainers = []corev1.Container{container("migrate", []string{"/migrate"})}
	conflicting := appPod(container("app", []string{"/app"}))
	conflicting.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "mine", MountPath: "/opt/wrapper"}}
	for name, pod := range map[string]*corev1.Pod{
		"no command":      appPod(container("app", []string{"/app"}), container("postgres", nil, "postgres")),
		"init containers": withInit,
		"mount conflict":  conflicting,
	} {
		t.Run(name, func(t *testing.T) {
			got := Mutate(pod, singleton(singletonv1.HoldModeWrapper, 30, nil), testConfig)
			assert.Equal(t, []corev1.PodSchedulingGate{{Name: singletonv1.SchedulingGate}}, got.Spec.SchedulingGates)
			assert.Equal(t, "SchedulingGate", got.Annotations[singletonv1.AnnotationHoldMode])
			assert.NotEmpty(t, got.Annotations[singletonv1.AnnotationHoldFallback])
			assert.Nil(t, findContainer(got.Spec.Containers, "status-sidecar"))
			assert.Equal(t, pod.Spec.Containers, got.Spec.Containers, "no container is rewritten")
		})
	}
}

func TestMutateIsIdempotent(t *testing.T) {
	for _, mode := range []singletonv1.HoldMode{singletonv1.HoldModeWrapper, singletonv1.HoldModeSchedulingGate, ""} {
		once := Mutate(appPod(container("app", []string{"/app"}, "x")), singleton(mode, 60, nil), testConfig)
		twice := Mutate(once, singleton(mode, 60, nil), testConfig)
		assert.True(t, equality.Semantic.DeepEqual(once, twice), "mode %q", mode)
	}
}

func TestMutateKeepsExistingAffinity(t *testing.T) {
	pod := appPod(container("app", []string{"/app"}))
	other := corev1.WeightedPodAffinityTerm{Weight: 5, PodAffinityTerm: corev1.PodAffinityTerm{TopologyKey: "zone"}}
	pod.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{other}}}
	got := Mutate(pod, singleton(singletonv1.HoldModeSchedulingGate, 30, nil), testConfig)
	assert.Equal(t, []corev1.WeightedPodAffinityTerm{other, AntiAffinityTerm("db")}, got.Spec.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution)
}

func TestSingletonLabelValue(t *testing.T) {
	assert.Equal(t, "db", SingletonLabelValue("db"))
	long := strings.Repeat("a", 100)
	v := SingletonLabelValue(long)
	assert.Len(t, v, 63)
	assert.NotEqual(t, v, SingletonLabelValue(strings.Repeat("a", 99)+"b"), "distinct names keep distinct values")
}

// FuzzMutate checks that Mutate never panics on arbitrary pods, is idempotent, and keeps the
// structural invariants the API server's validation needs (unique container and volume names, every
// mount backed by a volume, labels within limits). Full API validation of mutated pods runs against a
// real API server in the webhook-server integration tests.
func FuzzMutate(f *testing.F) {
	f.Add([]byte(`{"metadata":{"name":"p","labels":{"app":"db"}},"spec":{"containers":[{"name":"app","image":"x","command":["/app"],"args":["a b"]}]}}`), "Wrapper", int32(30), true)
	f.Add([]byte(`{"spec":{"containers":[{"name":"app","image":"x"}],"initContainers":[{"name":"i","image":"y"}]}}`), "Wrapper", int32(600), false)
	f.Add([]byte(`{"spec":{"containers":[{"name":"app","image":"x","command":["a"]}],"terminationGracePeriodSeconds":900}}`), "SchedulingGate", int32(10), true)
	f.Add([]byte(`{"metadata":{"annotations":{"apps.statefulsingleton.com/hold-mode":"Bogus"}},"spec":{"containers":[{"name":"status-sidecar","image":"x"}]}}`), "", int32(0), true)
	f.Fuzz(func(t *testing.T, raw []byte, mode string, grace int32, respect bool) {
		pod := &corev1.Pod{}
		if err := json.Unmarshal(raw, pod); err != nil {
			return
		}
		ss := singleton(singletonv1.HoldMode(mode), grace, &respect)
		once := Mutate(pod, ss, testConfig)
		twice := Mutate(once, ss, testConfig)
		if !equality.Semantic.DeepEqual(once, twice) {
			t.Fatalf("not idempotent:\nonce:  %+v\ntwice: %+v", once.Spec, twice.Spec)
		}
		if once.Labels[singletonv1.LabelManaged] != "true" || len(once.Labels[singletonv1.LabelSingleton]) > 63 {
			t.Fatalf("labels: %v", once.Labels)
		}
		gated := len(once.Spec.SchedulingGates) > 0 && once.Spec.SchedulingGates[len(once.Spec.SchedulingGates)-1].Name == singletonv1.SchedulingGate
		wrapped := findContainer(once.Spec.Containers, singletonv1.SidecarContainerName) != nil
		if !gated && !wrapped {
			t.Fatalf("the pod carries no hold: %+v", once.Spec)
		}
		if wrapped {
			for _, c := range once.Spec.Containers {
				if c.Name != singletonv1.SidecarContainerName && (len(c.Command) != 1 || c.Command[0] != singletonv1.WrapperBinary) {
					t.Fatalf("container %q is not wrapped: %v", c.Name, c.Command)
				}
			}
		}
		volumes := map[string]bool{}
		for _, v := range once.Spec.Volumes {
			if volumes[v.Name] && isOurs(v.Name) {
				t.Fatalf("volume %q added twice", v.Name)
			}
			volumes[v.Name] = true
		}
		names := map[string]int{}
		for _, c := range append(append([]corev1.Container{}, once.Spec.InitContainers...), once.Spec.Containers...) {
			names[c.Name]++
			for _, m := range c.VolumeMounts {
				if isOurs(m.Name) && !volumes[m.Name] {
					t.Fatalf("mount %q has no volume", m.Name)
				}
			}
		}
		for _, n := range []string{singletonv1.SidecarContainerName, singletonv1.WrapperInitContainerName} {
			if names[n] > 1 && countIn(pod, n) < names[n] {
				t.Fatalf("container %q added twice", n)
			}
		}
		if *once.Spec.TerminationGracePeriodSeconds <= 0 {
			t.Fatalf("grace period %d", *once.Spec.TerminationGracePeriodSeconds)
		}
	})
}

func isOurs(volume string) bool {
	return volume == singletonv1.SignalVolumeName || volume == singletonv1.WrapperVolumeName || volume == singletonv1.GrantTokenVolumeName
}

func countIn(pod *corev1.Pod, name string) int {
	n := 0
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		if c.Name == name {
			n++
		}
	}
	return n
}

// SS-14: antiAffinity Required adds the singleton's term as requiredDuringScheduling too (hard spread);
// Preferred (the default) adds only the seed's preferred term. Both are idempotent.
func TestMutateRequiredAntiAffinity(t *testing.T) {
	for _, mode := range []singletonv1.AntiAffinityMode{"", singletonv1.AntiAffinityPreferred, singletonv1.AntiAffinityRequired} {
		t.Run(string(mode), func(t *testing.T) {
			ss := singleton(singletonv1.HoldModeSchedulingGate, 30, nil)
			ss.Spec.AntiAffinity = mode
			once := Mutate(appPod(container("app", []string{"/app"})), ss, testConfig)
			anti := once.Spec.Affinity.PodAntiAffinity
			assert.Equal(t, []corev1.WeightedPodAffinityTerm{AntiAffinityTerm("db")}, anti.PreferredDuringSchedulingIgnoredDuringExecution)
			if mode == singletonv1.AntiAffinityRequired {
				require.Len(t, anti.RequiredDuringSchedulingIgnoredDuringExecution, 1)
				term := anti.RequiredDuringSchedulingIgnoredDuringExecution[0]
				assert.Equal(t, corev1.LabelHostname, term.TopologyKey)
				assert.Equal(t, AntiAffinityTerm("db").PodAffinityTerm, term)
			} else {
				assert.Empty(t, anti.RequiredDuringSchedulingIgnoredDuringExecution)
			}
			assert.True(t, equality.Semantic.DeepEqual(once, Mutate(once, ss, testConfig)), "idempotent")
		})
	}
	// The pods of another singleton get a term against their own singleton only.
	other := singleton(singletonv1.HoldModeSchedulingGate, 30, nil)
	other.Name, other.Spec.AntiAffinity = "cache", singletonv1.AntiAffinityRequired
	got := Mutate(appPod(container("app", []string{"/app"})), other, testConfig)
	assert.Equal(t, []corev1.PodAffinityTerm{AntiAffinityTerm("cache").PodAffinityTerm}, got.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution)
	assert.NotEqual(t, AntiAffinityTerm("db").PodAffinityTerm, AntiAffinityTerm("cache").PodAffinityTerm)
}
