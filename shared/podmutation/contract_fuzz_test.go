package podmutation

import (
	"encoding/json"
	"path"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

// FuzzMutateContract checks what FuzzMutate does not: the input pod is left untouched, a new pod never
// keeps the release annotations only the operator writes (start-granted, epoch) and always gets a hold
// mode the operator recognises, the pod keeps
// everything it had that the mutation does not own, the readiness gate and the anti-affinity term are
// there exactly once, the grace period follows spec.terminationGracePeriod and respectPodGracePeriod,
// the singleton label is a valid label value for every valid object name, and in Wrapper mode every app
// container gets its original argv back exactly (the kubelet turns the doubled $$ back into $), its own
// name, and exactly our mounts of the wrapper, the signal (read-only) and the exit directory
// (read-write), the sidecar waits for exactly the wrapped containers, and a container another webhook
// adds afterwards is wrapped and waited for when the mutation runs again.
func FuzzMutateContract(f *testing.F) {
	f.Add([]byte(`{"metadata":{"name":"p","labels":{"app":"db"}},"spec":{"containers":[{"name":"app","image":"x","command":["/app"],"args":["a b","$(HOME)","$$x"]}]}}`),
		"db", uint8(0), int32(30), uint8(0))
	f.Add([]byte(`{"spec":{"containers":[{"name":"a","image":"x","command":["/a"],"env":[{"name":"ORIGINAL_ENTRYPOINT","value":"[\"spoof\"]"}]},{"name":"b","image":"y","command":["/b"],"args":["--x=\"q\""]}],"terminationGracePeriodSeconds":120}}`),
		strings.Repeat("n", 80), uint8(0), int32(60), uint8(1))
	f.Add([]byte(`{"spec":{"containers":[{"name":"app","image":"x","command":["/app"]}],"initContainers":[{"name":"i","image":"y"}],"schedulingGates":[{"name":"other"}]}}`),
		"s.with.dots", uint8(0), int32(0), uint8(2))
	f.Add([]byte(`{"spec":{"containers":[{"name":"app","image":"x"}],"readinessGates":[{"conditionType":"apps.statefulsingleton.com/singleton-ready"}]}}`),
		"s", uint8(1), int32(-5), uint8(0))
	f.Add([]byte(`{"spec":{"containers":[{"name":"app","image":"x","command":["/app"],"volumeMounts":[{"name":"mine","mountPath":"/opt/wrapper"}]}],"volumes":[{"name":"mine","emptyDir":{}}]}}`),
		"s", uint8(0), int32(30), uint8(0))
	f.Add([]byte(`{"metadata":{"annotations":{"apps.statefulsingleton.com/hold-mode":"SchedulingGate"}},"spec":{"containers":[{"name":"app","image":"x","command":["/app"]}]}}`),
		"s", uint8(0), int32(30), uint8(0))
	f.Add([]byte(`{"metadata":{"annotations":{"apps.statefulsingleton.com/start-granted":"3","apps.statefulsingleton.com/epoch":"3","apps.statefulsingleton.com/hold-mode":"Wrapper"}},"spec":{"containers":[{"name":"app","image":"x","command":["/app"]}]}}`),
		"s", uint8(0), int32(30), uint8(0))
	f.Add([]byte(`{"metadata":{"annotations":{"apps.statefulsingleton.com/hold-mode":"Bogus"}},"spec":{"containers":[{"name":"app","image":"x","command":["/app"]}]}}`),
		"s", uint8(1), int32(30), uint8(0))
	f.Add([]byte(`{"spec":{"containers":[{"name":"a","image":"x","command":["/a"],"env":[{"name":"STATEFULSINGLETON_CONTAINER","value":"b"}],"volumeMounts":[{"name":"statefulsingleton-signal","mountPath":"/var/run/signal"},{"name":"statefulsingleton-signal","mountPath":"/var/run/signal/"}]},{"name":"b","image":"y","command":["/b"]}]}}`),
		"s", uint8(0), int32(30), uint8(0))
	// A pod admitted by the webhook before the exit report (no exit volume, mounts or variables).
	f.Add([]byte(`{"metadata":{"annotations":{"apps.statefulsingleton.com/hold-mode":"Wrapper"}},"spec":{"containers":[{"name":"status-sidecar","image":"s","command":["/status-sidecar"],"volumeMounts":[{"name":"statefulsingleton-signal","mountPath":"/var/run/signal"},{"name":"statefulsingleton-wrapper","mountPath":"/opt/wrapper"}]},{"name":"app","image":"x","command":["/opt/wrapper/singleton-wrapper"],"env":[{"name":"ORIGINAL_ENTRYPOINT","value":"[\"/app\"]"}],"volumeMounts":[{"name":"statefulsingleton-wrapper","mountPath":"/opt/wrapper","readOnly":true},{"name":"statefulsingleton-signal","mountPath":"/var/run/signal","readOnly":true}]}],"volumes":[{"name":"statefulsingleton-signal","emptyDir":{"medium":"Memory"}},{"name":"statefulsingleton-wrapper","emptyDir":{}}]}}`),
		"s", uint8(0), int32(30), uint8(0))
	f.Fuzz(func(t *testing.T, raw []byte, name string, mode uint8, grace int32, respect uint8) {
		pod := &corev1.Pod{}
		if json.Unmarshal(raw, pod) != nil || !namesUnique(pod) {
			return // the API server refuses pods with duplicate container or volume names
		}
		ss := singleton([]singletonv1.HoldMode{singletonv1.HoldModeWrapper, singletonv1.HoldModeSchedulingGate, ""}[mode%3], grace,
			[]*bool{nil, new(true), new(false)}[respect%3])
		ss.Name = name
		before := pod.DeepCopy()
		out := Mutate(pod, ss, testConfig)

		if !equality.Semantic.DeepEqual(pod, before) {
			t.Fatal("Mutate modified its input pod")
		}
		if len(validation.IsDNS1123Subdomain(name)) == 0 {
			if errs := validation.IsValidLabelValue(out.Labels[singletonv1.LabelSingleton]); len(errs) > 0 {
				t.Fatalf("label value for singleton %q: %v", name, errs)
			}
		}
		for k, v := range pod.Labels {
			if k != singletonv1.LabelManaged && k != singletonv1.LabelSingleton && out.Labels[k] != v {
				t.Fatalf("the pod's label %s changed", k)
			}
		}
		if n := countFunc(out.Spec.ReadinessGates, func(g corev1.PodReadinessGate) bool { return g.ConditionType == singletonv1.ReadinessGate }); n != 1 {
			t.Fatalf("%d readiness gates %s", n, singletonv1.ReadinessGate)
		}
		term := AntiAffinityTerm(SingletonLabelValue(name))
		if n := countFunc(out.Spec.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution,
			func(w corev1.WeightedPodAffinityTerm) bool { return equality.Semantic.DeepEqual(w, term) }); n != 1 {
			t.Fatalf("%d anti-affinity terms of the singleton", n)
		}
		checkGrace(t, pod, &ss.Spec, *out.Spec.TerminationGracePeriodSeconds)

		// The pod's own scheduling gates, volumes and containers all stay.
		for _, g := range pod.Spec.SchedulingGates {
			if !slices.Contains(out.Spec.SchedulingGates, g) {
				t.Fatalf("scheduling gate %q lost", g.Name)
			}
		}
		for _, v := range pod.Spec.Volumes {
			if !slices.ContainsFunc(out.Spec.Volumes, func(o corev1.Volume) bool { return o.Name == v.Name }) {
				t.Fatalf("volume %q lost", v.Name)
			}
		}
		for _, c := range pod.Spec.Containers {
			if findContainer(out.Spec.Containers, c.Name) == nil {
				t.Fatalf("container %q lost", c.Name)
			}
		}

		switch singletonv1.HoldMode(out.Annotations[singletonv1.AnnotationHoldMode]) {
		case singletonv1.HoldModeSchedulingGate:
			if countFunc(out.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == singletonv1.SchedulingGate }) != 1 {
				t.Fatalf("SchedulingGate hold without exactly one gate: %v", out.Spec.SchedulingGates)
			}
		case singletonv1.HoldModeWrapper:
			checkWrapped(t, pod, out)
			checkAddedContainer(t, out, ss)
		default:
			t.Fatalf("hold mode %q: the operator would not recognise the hold", out.Annotations[singletonv1.AnnotationHoldMode])
		}
		for _, a := range []string{singletonv1.AnnotationStartGranted, singletonv1.AnnotationEpoch} {
			if _, ok := out.Annotations[a]; ok {
				t.Fatalf("a new pod keeps %s: it would count as released without the operator", a)
			}
		}
	})
}

// checkWrapped checks a pod admitted in Wrapper mode against the pod before the mutation.
func checkWrapped(t *testing.T, pod, out *corev1.Pod) {
	t.Helper()
	if !isWrapped(pod) && (len(out.Spec.Containers) == 0 || out.Spec.Containers[0].Name != singletonv1.SidecarContainerName) {
		t.Fatal("the status-sidecar is not the first container")
	}
	var apps []string
	for _, c := range out.Spec.Containers {
		if c.Name == singletonv1.SidecarContainerName {
			continue
		}
		apps = append(apps, c.Name)
		entry := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == singletonv1.EnvOriginalEntrypoint })
		if n := countFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == singletonv1.EnvOriginalEntrypoint }); n != 1 || entry != len(c.Env)-1 {
			t.Fatalf("container %q: %d %s variables, the last at %d of %d", c.Name, n, singletonv1.EnvOriginalEntrypoint, entry, len(c.Env))
		}
		// The kubelet expands $$ to $ in env values; every $ of the JSON was doubled.
		argv, err := OriginalArgv(strings.ReplaceAll(c.Env[entry].Value, "$$", "$"))
		if err != nil {
			t.Fatalf("container %q: %v", c.Name, err)
		}
		in := findContainer(pod.Spec.Containers, c.Name)
		if in != nil && !slices.Equal(in.Command, []string{singletonv1.WrapperBinary}) {
			if want := append(slices.Clone(in.Command), in.Args...); !slices.Equal(argv, want) {
				t.Fatalf("container %q: the wrapper gets %q, the app had %q", c.Name, argv, want)
			}
		}
		// The wrapper learns its own container's name (its files in the exit directory), once, from us.
		if n := countFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == singletonv1.EnvContainerName }); n != 1 || entry < 1 ||
			!equality.Semantic.DeepEqual(c.Env[entry-1], corev1.EnvVar{Name: singletonv1.EnvContainerName, Value: c.Name}) {
			t.Fatalf("container %q: %d %s variables, before %s: %+v", c.Name, n, singletonv1.EnvContainerName, singletonv1.EnvOriginalEntrypoint, c.Env)
		}
		// Each of our directories holds exactly our mount, and nothing is mounted inside it: the signal
		// and the wrapper read-only (the app can neither start itself nor lift the stop fence), the exit
		// directory read-write (the wrapper's state and lock).
		for _, want := range wantedMounts {
			at := slices.DeleteFunc(slices.Clone(c.VolumeMounts), func(m corev1.VolumeMount) bool {
				p := path.Clean(m.MountPath)
				return m.Name != want.Name && p != want.MountPath && !strings.HasPrefix(p, want.MountPath+"/")
			})
			if len(at) != 1 || !equality.Semantic.DeepEqual(at[0], want) {
				t.Fatalf("container %q: the mounts of %s or %s are %+v, want exactly %+v", c.Name, want.Name, want.MountPath, at, want)
			}
		}
	}
	exit := slices.IndexFunc(out.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == singletonv1.ExitVolumeName })
	if exit < 0 {
		t.Fatalf("no volume %s", singletonv1.ExitVolumeName)
	}
	if !isWrapped(pod) {
		if v := out.Spec.Volumes[exit].EmptyDir; v == nil || v.Medium != corev1.StorageMediumMemory || v.SizeLimit == nil || v.SizeLimit.String() != "1Mi" {
			t.Fatalf("volume %s is not our in-memory emptyDir of 1Mi: %+v", singletonv1.ExitVolumeName, out.Spec.Volumes[exit])
		}
	}
	// The sidecar waits for exactly the wrapped containers, in spec order.
	if side := findContainer(out.Spec.Containers, singletonv1.SidecarContainerName); side != nil {
		i := slices.IndexFunc(side.Env, func(e corev1.EnvVar) bool { return e.Name == singletonv1.EnvAppContainers })
		if n := countFunc(side.Env, func(e corev1.EnvVar) bool { return e.Name == singletonv1.EnvAppContainers }); n != 1 ||
			side.Env[i].Value != strings.Join(apps, ",") || side.Env[i].ValueFrom != nil {
			t.Fatalf("the sidecar's %s (%d of them): %+v, the wrapped containers are %q", singletonv1.EnvAppContainers, n, side.Env, apps)
		}
		if !isWrapped(pod) && countFunc(side.VolumeMounts, func(m corev1.VolumeMount) bool { return equality.Semantic.DeepEqual(m, wantedExitMount) }) != 1 {
			t.Fatalf("the sidecar does not mount %s read-write at %s: %+v", singletonv1.ExitVolumeName, singletonv1.ExitDir, side.VolumeMounts)
		}
	}
}

// wantedMounts are the mounts of our volumes in every wrapped app container; the sidecar mounts the exit
// volume the same way.
var (
	wantedExitMount = corev1.VolumeMount{Name: singletonv1.ExitVolumeName, MountPath: "/var/run/statefulsingleton-exit"}
	wantedMounts    = []corev1.VolumeMount{
		{Name: singletonv1.WrapperVolumeName, MountPath: "/opt/wrapper", ReadOnly: true},
		{Name: singletonv1.SignalVolumeName, MountPath: "/var/run/signal", ReadOnly: true},
		wantedExitMount,
	}
)

// checkAddedContainer mutates out again after another webhook added a container to it: the pod keeps
// its Wrapper hold, the new container is wrapped like the others and the sidecar waits for it too.
func checkAddedContainer(t *testing.T, out *corev1.Pod, ss *singletonv1.StatefulSingleton) {
	t.Helper()
	const added = "added-by-another-webhook"
	if findContainer(out.Spec.Containers, added) != nil || findContainer(out.Spec.InitContainers, added) != nil {
		return
	}
	in := out.DeepCopy()
	in.Spec.Containers = append(in.Spec.Containers, corev1.Container{Name: added, Image: "proxy", Command: []string{"/proxy"}, Args: []string{"$(PORT)"}})
	again := Mutate(in, ss, testConfig)
	if mode := again.Annotations[singletonv1.AnnotationHoldMode]; mode != string(singletonv1.HoldModeWrapper) {
		t.Fatalf("mutated again after a container was added: hold %s (%s)", mode, again.Annotations[singletonv1.AnnotationHoldFallback])
	}
	checkWrapped(t, in, again)
	if !equality.Semantic.DeepEqual(again, Mutate(again, ss, testConfig)) {
		t.Fatal("not idempotent after a container was added")
	}
}

// checkGrace checks the grace period against the spec: terminationGracePeriod (30 when unset), or the
// pod's own longer period when respectPodGracePeriod (default true).
func checkGrace(t *testing.T, pod *corev1.Pod, spec *singletonv1.StatefulSingletonSpec, got int64) {
	t.Helper()
	want := int64(spec.TerminationGracePeriod)
	if want <= 0 {
		want = defaultGracePeriod
	}
	own := pod.Spec.TerminationGracePeriodSeconds
	if (spec.RespectPodGracePeriod == nil || *spec.RespectPodGracePeriod) && own != nil && *own > want {
		want = *own
	}
	if got != want {
		t.Fatalf("grace period %d, want %d (spec %d, respect %v, pod %v)", got, want, spec.TerminationGracePeriod, spec.RespectPodGracePeriod, own)
	}
}

// namesUnique reports whether the pod's container names (init, app and ephemeral together) and volume
// names are unique, as the API server's validation requires.
func namesUnique(pod *corev1.Pod) bool {
	seen := map[string]bool{}
	for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
		if seen[c.Name] {
			return false
		}
		seen[c.Name] = true
	}
	for _, c := range pod.Spec.EphemeralContainers {
		if seen[c.Name] {
			return false
		}
		seen[c.Name] = true
	}
	volumes := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		if volumes[v.Name] {
			return false
		}
		volumes[v.Name] = true
	}
	return true
}

func countFunc[T any](s []T, f func(T) bool) int {
	n := 0
	for _, x := range s {
		if f(x) {
			n++
		}
	}
	return n
}
