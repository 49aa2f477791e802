package podmutation

import (
	"encoding/json"
	"slices"
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
	assert.Len(t, got.Spec.Volumes, 4)
	assert.Empty(t, got.Spec.SchedulingGates)
	for _, v := range got.Spec.Volumes {
		if v.Name == singletonv1.GrantTokenVolumeName {
			assert.Equal(t, "statefulsingleton", v.Projected.Sources[0].ServiceAccountToken.Audience)
		}
	}
}

// The exit report's layout: an in-memory emptyDir of 1Mi, read-write in every wrapped app container
// (each told its own name) and in the sidecar (told the wrapped containers, in spec order); the signal
// volume stays read-only in the app containers.
func TestMutateWrapperHoldAddsTheExitReportLayout(t *testing.T) {
	got := Mutate(appPod(container("app", []string{"/app"}), container("second", []string{"run"}), container("third", []string{"x"})),
		singleton(singletonv1.HoldModeWrapper, 30, nil), testConfig)

	exit := volume(got, singletonv1.ExitVolumeName)
	require.NotNil(t, exit)
	require.NotNil(t, exit.EmptyDir)
	assert.Equal(t, corev1.StorageMediumMemory, exit.EmptyDir.Medium)
	assert.Equal(t, "1Mi", exit.EmptyDir.SizeLimit.String())

	exitMount := corev1.VolumeMount{Name: singletonv1.ExitVolumeName, MountPath: "/var/run/statefulsingleton-exit"}
	for _, name := range []string{"app", "second", "third"} {
		c := findContainer(got.Spec.Containers, name)
		assert.Contains(t, c.VolumeMounts, exitMount, name)
		assert.Contains(t, c.VolumeMounts, corev1.VolumeMount{Name: singletonv1.SignalVolumeName, MountPath: singletonv1.SignalDir, ReadOnly: true}, name)
		self, ok := env(*c, singletonv1.EnvContainerName)
		assert.True(t, ok, name)
		assert.Equal(t, name, self)
		// Beside ORIGINAL_ENTRYPOINT, at the end.
		assert.Equal(t, []string{singletonv1.EnvContainerName, singletonv1.EnvOriginalEntrypoint}, envNames(c.Env[len(c.Env)-2:]), name)
	}
	side := findContainer(got.Spec.Containers, singletonv1.SidecarContainerName)
	assert.Contains(t, side.VolumeMounts, exitMount)
	apps, ok := env(*side, singletonv1.EnvAppContainers)
	assert.True(t, ok)
	assert.Equal(t, "app,second,third", apps)
	assert.True(t, equality.Semantic.DeepEqual(got, Mutate(got, singleton(singletonv1.HoldModeWrapper, 30, nil), testConfig)), "idempotent")
}

// A variable the app sets under our names does not reach the wrapper: its own name does, once.
func TestMutateReplacesTheAppsOwnContainerNameVariable(t *testing.T) {
	app := container("app", []string{"/app"})
	app.Env = []corev1.EnvVar{{Name: singletonv1.EnvContainerName, Value: "other"}, {Name: "KEEP", Value: "1"},
		{Name: singletonv1.EnvContainerName, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
	got := findContainer(Mutate(appPod(app), singleton(singletonv1.HoldModeWrapper, 30, nil), testConfig).Spec.Containers, "app")
	assert.Equal(t, []string{"KEEP", singletonv1.EnvContainerName, singletonv1.EnvOriginalEntrypoint}, envNames(got.Env))
	assert.Equal(t, corev1.EnvVar{Name: singletonv1.EnvContainerName, Value: "app"}, got.Env[1])
}

// A container added after the mutation (as another webhook would, were ours invoked again) is wrapped
// on the next run, and the sidecar then waits for it too.
func TestMutateAgainWrapsAnAddedContainerAndTellsTheSidecar(t *testing.T) {
	ss := singleton(singletonv1.HoldModeWrapper, 30, nil)
	once := Mutate(appPod(container("app", []string{"/app"})), ss, testConfig)
	added := once.DeepCopy()
	added.Spec.Containers = append(added.Spec.Containers, container("proxy", []string{"/proxy"}, "--port=1"))
	again := Mutate(added, ss, testConfig)

	assert.Len(t, again.Spec.Containers, 3, "no second sidecar")
	assert.Equal(t, []string{"/proxy", "--port=1"}, wrappedArgv(t, findContainer(again.Spec.Containers, "proxy")))
	proxy := findContainer(again.Spec.Containers, "proxy")
	self, _ := env(*proxy, singletonv1.EnvContainerName)
	assert.Equal(t, "proxy", self)
	assert.Contains(t, proxy.VolumeMounts, corev1.VolumeMount{Name: singletonv1.ExitVolumeName, MountPath: singletonv1.ExitDir})
	side := findContainer(again.Spec.Containers, singletonv1.SidecarContainerName)
	apps, _ := env(*side, singletonv1.EnvAppContainers)
	assert.Equal(t, "app,proxy", apps)
	assert.Equal(t, 1, countFunc(side.Env, func(e corev1.EnvVar) bool { return e.Name == singletonv1.EnvAppContainers }))
	assert.Equal(t, findContainer(once.Spec.Containers, "app"), findContainer(again.Spec.Containers, "app"), "the app container is unchanged")
	assert.True(t, equality.Semantic.DeepEqual(again, Mutate(again, ss, testConfig)), "idempotent")
}

// Pods admitted by older webhooks, before the exit report: the first with the wrapper's init container
// and the sidecar last, the other with the sidecar first. Both are still recognised as wrapped (no
// second sidecar, no fallback, ORIGINAL_ENTRYPOINT kept) and get the exit report's layout.
func TestMutateRecognisesPodsOfOlderWebhooks(t *testing.T) {
	ss := singleton(singletonv1.HoldModeWrapper, 30, nil)
	current := Mutate(appPod(container("app", []string{"/app"}, "$(X)"), container("second", []string{"run"})), ss, testConfig)
	before := olderLayout(current)
	initLayout := before.DeepCopy()
	side := *findContainer(initLayout.Spec.Containers, singletonv1.SidecarContainerName)
	initLayout.Spec.Containers = append(initLayout.Spec.Containers[1:], side)
	initLayout.Spec.InitContainers = []corev1.Container{{Name: singletonv1.WrapperInitContainerName, Image: "wrapper:0",
		Command:      []string{"/singleton-wrapper", "install", singletonv1.WrapperBinary},
		VolumeMounts: []corev1.VolumeMount{{Name: singletonv1.WrapperVolumeName, MountPath: singletonv1.WrapperDir}}}}

	for name, pod := range map[string]*corev1.Pod{"sidecar first": before, "init container": initLayout} {
		t.Run(name, func(t *testing.T) {
			got := Mutate(pod, ss, testConfig)
			assert.Equal(t, "Wrapper", got.Annotations[singletonv1.AnnotationHoldMode])
			assert.Empty(t, got.Annotations[singletonv1.AnnotationHoldFallback])
			assert.Empty(t, got.Spec.SchedulingGates)
			assert.Len(t, got.Spec.Containers, 3, "no second sidecar")
			assert.Equal(t, pod.Spec.InitContainers, got.Spec.InitContainers)
			assert.NotNil(t, volume(got, singletonv1.ExitVolumeName))
			for _, c := range []string{"app", "second"} {
				app := findContainer(got.Spec.Containers, c)
				assert.Equal(t, wrappedArgv(t, findContainer(current.Spec.Containers, c)), wrappedArgv(t, app), "the wrapped argv is kept")
				assert.Equal(t, findContainer(current.Spec.Containers, c).Env, app.Env)
				assert.ElementsMatch(t, findContainer(current.Spec.Containers, c).VolumeMounts, app.VolumeMounts)
			}
			side := findContainer(got.Spec.Containers, singletonv1.SidecarContainerName)
			apps, _ := env(*side, singletonv1.EnvAppContainers)
			assert.Equal(t, "app,second", apps)
			assert.Contains(t, side.VolumeMounts, corev1.VolumeMount{Name: singletonv1.ExitVolumeName, MountPath: singletonv1.ExitDir})
			assert.True(t, equality.Semantic.DeepEqual(got, Mutate(got, ss, testConfig)), "idempotent")
		})
	}
}

// olderLayout is a pod mutated before the exit report: pod without the exit volume, its mounts and the
// two variables.
func olderLayout(pod *corev1.Pod) *corev1.Pod {
	old := pod.DeepCopy()
	old.Spec.Volumes = slices.DeleteFunc(old.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == singletonv1.ExitVolumeName })
	for i := range old.Spec.Containers {
		c := &old.Spec.Containers[i]
		c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == singletonv1.ExitVolumeName })
		c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool {
			return e.Name == singletonv1.EnvContainerName || e.Name == singletonv1.EnvAppContainers
		})
	}
	return old
}

// The app containers' mounts of our volumes come out exactly ours: read-only where the pod had them
// read-write, without subPath, and once (a second one at the same directory spelt differently would
// undo the read-only one).
func TestMutateMakesTheMountsOfOurVolumesExactlyOurs(t *testing.T) {
	app := container("app", []string{"/app"})
	app.VolumeMounts = []corev1.VolumeMount{
		{Name: singletonv1.SignalVolumeName, MountPath: singletonv1.SignalDir},
		{Name: "data", MountPath: "/data"},
		{Name: singletonv1.SignalVolumeName, MountPath: singletonv1.SignalDir + "/"},
		{Name: singletonv1.ExitVolumeName, MountPath: singletonv1.ExitDir, SubPath: "x", ReadOnly: true},
	}
	got := Mutate(appPod(app), singleton(singletonv1.HoldModeWrapper, 30, nil), testConfig)
	require.Equal(t, "Wrapper", got.Annotations[singletonv1.AnnotationHoldMode], got.Annotations[singletonv1.AnnotationHoldFallback])
	assert.Equal(t, []corev1.VolumeMount{
		{Name: singletonv1.SignalVolumeName, MountPath: singletonv1.SignalDir, ReadOnly: true},
		{Name: "data", MountPath: "/data"},
		{Name: singletonv1.ExitVolumeName, MountPath: singletonv1.ExitDir},
		{Name: singletonv1.WrapperVolumeName, MountPath: singletonv1.WrapperDir, ReadOnly: true},
	}, findContainer(got.Spec.Containers, "app").VolumeMounts)
}

func volume(pod *corev1.Pod, name string) *corev1.Volume {
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Name == name {
			return &pod.Spec.Volumes[i]
		}
	}
	return nil
}

func envNames(env []corev1.EnvVar) []string {
	var names []string
	for _, e := range env {
		names = append(names, e.Name)
	}
	return names
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
	mounting := func(mounts ...corev1.VolumeMount) *corev1.Pod {
		pod := appPod(container("app", []string{"/app"}))
		pod.Spec.Containers[0].VolumeMounts = mounts
		return pod
	}
	exitVolumeTaken := appPod(container("app", []string{"/app"}))
	exitVolumeTaken.Spec.Volumes = []corev1.Volume{{Name: singletonv1.ExitVolumeName, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp"}}}}
	grantToken := appPod(container("app", []string{"/app"}))
	grantToken.Spec.Volumes = []corev1.Volume{{Name: "mine", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: singletonv1.GrantTokenAudience, Path: "t"}}}}}}}
	for name, pod := range map[string]*corev1.Pod{
		"no command":                     appPod(container("app", []string{"/app"}), container("postgres", nil, "postgres")),
		"init containers":                withInit,
		"mount conflict":                 mounting(corev1.VolumeMount{Name: "mine", MountPath: "/opt/wrapper"}),
		"mount conflict, trailing slash": mounting(corev1.VolumeMount{Name: "mine", MountPath: "/opt/wrapper/"}),
		"mount at the exit directory":    mounting(corev1.VolumeMount{Name: "mine", MountPath: singletonv1.ExitDir}),
		"mount inside the signal dir":    mounting(corev1.VolumeMount{Name: "mine", MountPath: singletonv1.StartSignalFile, SubPath: "start-signal"}),
		"mount inside the exit dir":      mounting(corev1.VolumeMount{Name: "mine", MountPath: singletonv1.ExitDir + "/app"}),
		"exit volume mounted elsewhere":  mounting(corev1.VolumeMount{Name: singletonv1.ExitVolumeName, MountPath: "/x"}),
		"exit volume name taken":         exitVolumeTaken,
		"a token for the grant endpoint": grantToken,
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
	return volume == singletonv1.SignalVolumeName || volume == singletonv1.WrapperVolumeName || volume == singletonv1.GrantTokenVolumeName ||
		volume == singletonv1.ExitVolumeName
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
