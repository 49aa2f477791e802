//go:build e2e && bench

package singleton

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/statefulops/statefulops/e2e/benchfmt"
	"github.com/statefulops/statefulops/e2e/framework"
	"github.com/statefulops/statefulops/e2e/localcluster"
	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

const (
	// benchHandovers is the sample count of the controller-attributable handover: each costs well
	// under a second on kwok, so enough for a stable p99.
	benchHandovers = 60
	// benchRollouts is the sample count of each side of the end-to-end gap on kwok (a rollout each).
	benchRollouts = 25
	// benchRealNodeHandovers is the sample count of each side on the real node (seconds each).
	benchRealNodeHandovers = 30
)

// TestBenchSingletonHandover measures, on kwok nodes, the singleton operator's own share of a
// handover (old pod gone → new pod released) and the end-to-end gap of a singleton Deployment's
// rollout beside a plain Deployment with strategy Recreate. The operator and the webhook-server run as
// local processes (the operator under its manifest's ServiceAccount); the API-level invariant checker
// (two released pods at once) watches every namespace and must count 0.
func TestBenchSingletonHandover(t *testing.T) {
	framework.Install(t)
	// framework.StartLocalOperator applies the manifest (once per run): before the webhook is pointed elsewhere.
	// It then waits until no pod labelled app.kubernetes.io/name=singleton-operator is left, which the
	// webhook-server's pods also are: they are parked first.
	require.NoError(t, framework.InstallManifestOnce("singleton-operator"))
	_, webhook := startBenchLocalWebhook(t)
	op := framework.StartLocalOperator(t, "singleton-operator")
	fast := benchFastClient(t)

	t.Run("controller-attributable", func(t *testing.T) {
		ns := newSingletonNamespace(t, singletonv1.HoldModeWrapper)
		watchReleased(t, ns)
		clock := benchWatchPods(t, ns)
		prev := benchCreateSingletonPod(t, fast, ns, 0)
		clock.wait(t, prev, "released", func(p benchPodTimes) bool { return !p.released.IsZero() })
		var samples []float64
		// CPU profiles of the operator, the webhook-server and the kube-apiserver over the handovers
		// (docs/performance.md).
		profiled := framework.CPUProfilesUntil(t, "singleton-handover", op.Profiled(), webhook)
		for i := range benchHandovers {
			next := benchCreateSingletonPod(t, fast, ns, (i+1)%3)
			// The held pod runs (kwok) and the operator has seen it before the old pod goes.
			clock.wait(t, next, "running", func(p benchPodTimes) bool { return !p.running.IsZero() })
			require.NoError(t, fast.CoreV1().Pods(ns).Delete(t.Context(), prev, metav1.DeleteOptions{}))
			clock.wait(t, next, "released", func(p benchPodTimes) bool { return !p.released.IsZero() })
			samples = append(samples, benchMs(clock.get(next).released.Sub(clock.get(prev).deleted)))
			prev = next
		}
		profiled()
		framework.RecordFigure(t, benchfmt.Figure{
			Operator: "singleton", Name: "controller-attributable handover (old pod gone -> release written)", Unit: "ms", Where: "kwok",
			Samples: samples,
			Targets: []benchfmt.Target{benchfmt.AtMost("p99", 30)},
			Note: fmt.Sprintf("%d handovers between bare Wrapper-mode pods on kwok nodes (the held pod running before the old one is deleted; "+
				"kwok removes a deleted pod at once). The clock is the harness's own watch stream of the namespace's pods: the old pod's "+
				"DELETED event to the first event of the new pod carrying the epoch annotation (the release patch). singleton-operator and "+
				"webhook-server run as local processes on this host. No baseline: Kubernetes has no controller that does this. "+
				"The operator's part is three API round trips (a live list and the epoch reservation, concurrent, then the release patch; "+
				"queueing is < 1 ms): a p99 above the target is the API server's latency on this machine, which the operator's "+
				"'Released pod' log line splits into queued, liveList, reserveEpoch and releasePatch.", benchHandovers),
		})
	})

	t.Run("end-to-end", func(t *testing.T) {
		singletonNS := newSingletonNamespace(t, singletonv1.HoldModeWrapper)
		watchReleased(t, singletonNS)
		singletonClock := benchWatchPods(t, singletonNS)
		plainNS := framework.NewNamespace(t)
		plainClock := benchWatchPods(t, plainNS)
		benchCreateDeployment(t, fast, singletonNS, appsv1.RollingUpdateDeploymentStrategyType)
		benchCreateDeployment(t, fast, plainNS, appsv1.RecreateDeploymentStrategyType)
		var singleton, plain []float64
		for i := range benchRollouts { // alternating, so that both see the same load
			singleton = append(singleton, benchRollout(t, fast, singletonNS, singletonClock, i))
			plain = append(plain, benchRollout(t, fast, plainNS, plainClock, i))
		}
		framework.RecordFigure(t, benchfmt.Figure{
			Operator: "singleton", Name: "end-to-end gap (old pod gone -> new pod Ready)", Unit: "ms", Where: "kwok",
			Samples: singleton, Baseline: "plain Deployment, strategy Recreate", BaselineSamples: plain,
			Note: fmt.Sprintf("%d rollouts each, alternating: a one-replica Deployment (RollingUpdate) under a Wrapper-mode StatefulSingleton "+
				"(the operator stops the old pod once the new one runs, then releases it) beside the same Deployment with strategy Recreate "+
				"and no singleton. Harness watch clock: the old pod's DELETED event to the new pod's first Ready=True (on kwok a held pod "+
				"is Running at once, so Ready, which follows the release through the readiness gate, is when it may serve).", benchRollouts),
		})
	})
}

// TestBenchSingletonRealNode measures on the real node, from the test app's own start and stop
// records, the gap between two processes of a Wrapper-mode singleton (RollingUpdate rollouts and pod
// deletions of a one-replica Deployment, installed from deploy/singleton-operator.yaml) beside a plain
// Deployment with strategy Recreate of the same app, and the grant → wrapped process start time. The
// same singleton Deployment also runs from an image without command (served by a registry the kubelet
// pulls from, ENTRYPOINT read by the webhook-server), in Wrapper mode and in SchedulingGate mode, all
// interleaved in the same run. The process-interval checker (overlaps) and the API-level checker must
// count 0.
func TestBenchSingletonRealNode(t *testing.T) {
	if !framework.NeedRealNode(t) {
		return
	}
	framework.Install(t)
	for _, d := range []string{"singleton-operator-controller-manager", framework.WebhookDeployment} {
		_, err := framework.Kubectl().Run(t.Context(), "rollout", "status", "-n", framework.SingletonNamespace, "deployment/"+d, "--timeout=240s")
		require.NoError(t, err)
	}
	deploy := func(ns string, strategy appsv1.DeploymentStrategyType, image string, noReport bool) {
		template := singletonAppTemplate(t, "app", image)
		// With a shared process namespace the wrapper is not its container's PID 1: it cannot see
		// that every process of its container is gone, so it execs the app as before and the
		// status-sidecar reports nothing; the handover waits for the kubelet's confirmation.
		template.Spec.ShareProcessNamespace = ptr.To(noReport)
		_, err := framework.Clientset.AppsV1().Deployments(ns).Create(t.Context(), &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "app"},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](1),
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "app"}},
				Strategy: appsv1.DeploymentStrategy{Type: strategy},
				Template: template,
			},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	// The singleton sides, each a one-replica RollingUpdate Deployment under a StatefulSingleton.
	type side struct {
		label    string
		mode     singletonv1.HoldMode
		image    string
		ns       string
		timeline *podTimeline
		noReport bool // shareProcessNamespace: no exit report
		marks    []benchMark
	}
	image := framework.ServeTestAppRegistry(t)
	sides := []*side{
		{label: "Wrapper", mode: singletonv1.HoldModeWrapper},
		{label: "Wrapper without the exit report", mode: singletonv1.HoldModeWrapper, noReport: true},
		{label: "Wrapper, image without command", mode: singletonv1.HoldModeWrapper, image: image},
		{label: "SchedulingGate, image without command", mode: singletonv1.HoldModeSchedulingGate, image: image},
	}
	for _, sd := range sides {
		sd.ns = newSingletonNamespace(t, sd.mode)
		sd.timeline = watchPodTimeline(t, sd.ns)
		watchReleased(t, sd.ns)
		deploy(sd.ns, appsv1.RollingUpdateDeploymentStrategyType, sd.image, sd.noReport)
	}
	plainNS := framework.NewNamespace(t)
	plainTimeline := watchPodTimeline(t, plainNS)
	deploy(plainNS, appsv1.RecreateDeploymentStrategyType, "", false)
	for _, sd := range sides {
		waitSingletonActive(t, sd.ns, "app", 1)
		p, err := framework.FetchPod(t, sd.ns, singletonStatus(t, sd.ns).Status.ActivePod)
		require.NoError(t, err)
		require.Equal(t, string(sd.mode), p.Annotations[singletonv1.AnnotationHoldMode], "%s: held in its mode, no fallback (%s)", sd.label, p.Annotations[singletonv1.AnnotationHoldFallback])
	}
	benchWaitOneReadyPod(t, framework.Clientset, plainNS)

	for i := range benchRealNodeHandovers {
		for _, sd := range sides {
			epoch := singletonEpoch(t, sd.ns, "app")
			if i%2 == 0 {
				sd.marks = append(sd.marks, benchMark{time.Now(), benchScenarioRollout})
				benchBumpTemplate(t, framework.Clientset, sd.ns, i)
			} else {
				sd.marks = append(sd.marks, benchMark{time.Now(), benchScenarioPodDelete})
				require.NoError(t, framework.Clientset.CoreV1().Pods(sd.ns).Delete(t.Context(), singletonStatus(t, sd.ns).Status.ActivePod, metav1.DeleteOptions{}))
			}
			waitSingletonActive(t, sd.ns, "app", epoch+1)
			waitDeploymentSettled(t, sd.ns)
		}
		benchBumpTemplate(t, framework.Clientset, plainNS, i)
		benchWaitOneReadyPod(t, framework.Clientset, plainNS)
	}

	plainOverlaps, plainHs := checkHandovers(t, readIntervals(t, plainNS, "app-"), plainTimeline, func(time.Time) string { return "rollout" })
	logHandovers(t, "BENCH plain Recreate:", plainHs)
	assert.Zero(t, plainOverlaps, "process intervals of the Recreate Deployment overlap")
	var plainGaps []float64
	for _, h := range plainHs {
		plainGaps = append(plainGaps, benchMs(h.gap))
	}
	const method = "the e2e test app's own start/stop records on the real node (kubelet + containerd; the app takes 0.2 s to stop); " +
		"singleton: a one-replica Deployment (RollingUpdate) under a StatefulSingleton, alternately rolled out and its pod deleted " +
		"(%d handovers of this kind, operator and webhook-server installed from deploy/singleton-operator.yaml, running on the real " +
		"node); baseline: the same Deployment with strategy Recreate and no singleton, rolled out as often, same run (the rows of this " +
		"test interleave their handovers). "
	for _, sd := range sides {
		scenarioAt := func(at time.Time) string {
			name := "initial start"
			for _, m := range sd.marks {
				if !at.Before(m.at) {
					name = m.name
				}
			}
			return name
		}
		overlaps, hs := checkHandovers(t, readIntervals(t, sd.ns, "app-"), sd.timeline, scenarioAt)
		logHandovers(t, "BENCH singleton "+sd.label+":", hs)
		assert.Zero(t, overlaps, "process intervals of the singleton (%s) overlap", sd.label)
		for _, scenario := range []string{benchScenarioRollout, benchScenarioPodDelete} {
			var gaps, grants []float64
			reported, onExit := 0, 0
			for _, h := range hs {
				if h.scenario != scenario {
					continue
				}
				if h.reported {
					reported++
				}
				if h.onExit {
					onExit++
				}
				gaps = append(gaps, benchMs(h.gap))
				if h.prestarted && !h.onExit { // released on exit: the grant is not in the API (the gap is its figure)
					grants = append(grants, benchMs(h.toRun))
				}
			}
			require.NotEmpty(t, gaps, "handovers measured (%s, %s)", sd.label, scenario)
			if sd.mode == singletonv1.HoldModeWrapper && !sd.noReport {
				assert.Positive(t, reported, "%s, %s: handovers on the old pod's exit report", sd.label, scenario)
				assert.Positive(t, onExit, "%s, %s: handovers released ahead on the old pod's exit", sd.label, scenario)
			} else {
				assert.Zero(t, reported, "%s, %s: handovers on an exit report", sd.label, scenario)
				assert.Zero(t, onExit, "%s, %s: handovers released on an exit", sd.label, scenario)
			}
			name := fmt.Sprintf("real gap, %s, %s (old process exit -> new process start)", sd.label, scenario)
			note := fmt.Sprintf(method, len(gaps))
			// Issue 20: tens of milliseconds between processes, at most 0.15 x Recreate's median.
			targets := []benchfmt.Target{benchfmt.AtMost("p50", 100), benchfmt.AtMost("p99", 250), benchfmt.AtMost("ratio", 0.15)}
			switch {
			case sd.noReport:
				note += "The same pods with shareProcessNamespace: true, where the wrapper is not its container's PID 1 and cannot " +
					"know that every process of the container is gone: it execs the app, nothing is reported, and the operator waits " +
					"for the kubelet's confirmation of the stop (old pod gone from the API), as every Wrapper pod did before the exit report."
				targets = nil
			case sd.mode != singletonv1.HoldModeWrapper:
				note += "The pod names the test app's image in a registry and sets no command, held with the scheduling gate, as every " +
					"pod without command was before image configs were read: the new pod is scheduled and started only once released."
				targets = nil
			default:
				note += fmt.Sprintf("%d of %d handovers went on the old pod's exit report (its status-sidecar saw every app process "+
					"exit; the operator released the new pod without waiting for the kubelet's confirmation), %d of them released "+
					"ahead on that exit (start-on-exit-of: the grant server answered the new pod the moment it accepted the report, "+
					"before any API write). ", reported, len(gaps), onExit)
				if sd.image != "" {
					note += "The pod names the test app's image in a registry the kubelet pulls from (go-containerregistry's registry " +
						"on the pod network's gateway) and sets no command: the webhook-server read its ENTRYPOINT from the registry. "
				}
				if scenario == benchScenarioPodDelete {
					note += "After a pod deletion the ReplicaSet creates the replacement only then, and a pod takes longer to start on " +
						"this node (~0.5-0.8 s) than the test app takes to stop (0.2 s): the old pod's app keeps running until the " +
						"replacement runs and waits for its grant (spec.successorWait, default 10 s), so the replacement's start " +
						"is not in the gap."
				}
			}
			framework.RecordFigure(t, benchfmt.Figure{
				Operator: "singleton", Name: name, Unit: "ms", Where: "real node",
				Samples: gaps, Baseline: "plain Deployment, strategy Recreate, same app", BaselineSamples: plainGaps,
				Targets: targets, Note: note,
			})
			if sd.label == "Wrapper" && scenario == benchScenarioRollout && len(grants) > 0 {
				framework.RecordFigure(t, benchfmt.Figure{
					Operator: "singleton", Name: "grant -> wrapped process started", Unit: "ms", Where: "real node",
					Samples: grants,
					Targets: []benchfmt.Target{benchfmt.AtMost("p99", 50)},
					Note: "the rollouts of the Wrapper-mode figure above (the new pod ran, wrapper waiting, before the release): the " +
						"harness's watch event of the release (epoch annotation) to the app's own start record (status-sidecar long-poll " +
						"answered, start signal written, inotify wakes the wrapper, which starts the app). No baseline: nothing native " +
						"holds a started process.",
				})
			}
		}
	}
}

// The scenarios of TestBenchSingletonRealNode, and when each trigger was pulled.
const (
	benchScenarioRollout   = "RollingUpdate rollout"
	benchScenarioPodDelete = "pod delete"
)

type benchMark struct {
	at   time.Time
	name string
}

// benchPodTimes is what a benchPodClock saw of one pod, in the harness's clock.
type benchPodTimes struct {
	running  time.Time // first seen with every container running
	released time.Time // first seen with the epoch annotation
	ready    time.Time // first seen Ready
	deleted  time.Time // DELETED event
}

// benchPodClock records, from one watch of a namespace's pods, when each pod reached each state.
type benchPodClock struct {
	mu   sync.Mutex
	pods map[string]*benchPodTimes // by name
}

// benchWatchPods starts a benchPodClock on ns for the rest of the test.
func benchWatchPods(t *testing.T, ns string) *benchPodClock {
	t.Helper()
	w, err := framework.Clientset.CoreV1().Pods(ns).Watch(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	c := &benchPodClock{pods: map[string]*benchPodTimes{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			now := time.Now()
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			c.mu.Lock()
			pt := c.pods[pod.Name]
			if pt == nil {
				pt = &benchPodTimes{}
				c.pods[pod.Name] = pt
			}
			if pt.running.IsZero() && allRunning(pod) {
				pt.running = now
			}
			if pt.released.IsZero() && pod.Annotations[singletonv1.AnnotationEpoch] != "" {
				pt.released = now
			}
			if pt.ready.IsZero() && framework.PodCondition(pod, corev1.PodReady) == corev1.ConditionTrue {
				pt.ready = now
			}
			if ev.Type == watch.Deleted {
				pt.deleted = now
			}
			c.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		w.Stop()
		<-done
	})
	return c
}

func (c *benchPodClock) get(name string) benchPodTimes {
	c.mu.Lock()
	defer c.mu.Unlock()
	if pt := c.pods[name]; pt != nil {
		return *pt
	}
	return benchPodTimes{}
}

// wait polls the clock (not the API) until pod name satisfies cond.
func (c *benchPodClock) wait(t *testing.T, name, what string, cond func(benchPodTimes) bool) {
	t.Helper()
	require.Eventually(t, func() bool { return cond(c.get(name)) }, framework.Timeout, 5*time.Millisecond, "pod %s %s", name, what)
}

// benchCreateSingletonPod creates a pod of the singleton "app" on kwok node i, removed by kwok as soon
// as it is deleted, and returns its name.
func benchCreateSingletonPod(t *testing.T, c kubernetes.Interface, ns string, node int) string {
	t.Helper()
	pod := appPod("app-", "app")
	pod.Annotations = map[string]string{localcluster.TerminatingSecondsAnnotation: "0"}
	pod.Spec.NodeName = localcluster.NodeName(node)
	created, err := c.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Equal(t, "true", created.Labels[singletonv1.LabelManaged], "admitted held")
	return created.Name
}

// benchCreateDeployment creates the one-replica Deployment "app" of pause pods on the kwok nodes and
// waits for its pod to be Ready.
func benchCreateDeployment(t *testing.T, c kubernetes.Interface, ns string, strategy appsv1.DeploymentStrategyType) {
	t.Helper()
	pod := appPod("", "app")
	pod.Annotations = map[string]string{localcluster.TerminatingSecondsAnnotation: "0"}
	_, err := c.AppsV1().Deployments(ns).Create(t.Context(), &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "app"}},
			Strategy: appsv1.DeploymentStrategy{Type: strategy},
			Template: corev1.PodTemplateSpec{ObjectMeta: pod.ObjectMeta, Spec: pod.Spec},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	benchWaitOneReadyPod(t, c, ns)
}

// benchRollout rolls the Deployment "app" of ns out once and returns the gap between the old pod's
// DELETED event and the new pod's first Ready, in ms.
func benchRollout(t *testing.T, c kubernetes.Interface, ns string, clock *benchPodClock, i int) float64 {
	t.Helper()
	old := benchWaitOneReadyPod(t, c, ns)
	benchBumpTemplate(t, c, ns, i)
	clock.wait(t, old, "deleted", func(p benchPodTimes) bool { return !p.deleted.IsZero() })
	next := benchWaitOneReadyPod(t, c, ns)
	require.NotEqual(t, old, next)
	clock.wait(t, next, "ready", func(p benchPodTimes) bool { return !p.ready.IsZero() })
	return benchMs(clock.get(next).ready.Sub(clock.get(old).deleted))
}

// benchBumpTemplate changes the pod template of the Deployment "app": a rollout.
func benchBumpTemplate(t *testing.T, c kubernetes.Interface, ns string, i int) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"bench/rollout":%q}}}}}`, strconv.Itoa(i))
	_, err := c.AppsV1().Deployments(ns).Patch(t.Context(), "app", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)
}

// benchWaitOneReadyPod waits until ns has exactly one pod of app "app", Ready and not terminating,
// and returns its name.
func benchWaitOneReadyPod(t *testing.T, c kubernetes.Interface, ns string) string {
	t.Helper()
	var name string
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		pods, err := c.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app=app"})
		if !assert.NoError(ct, err) || !assert.Len(ct, pods.Items, 1) {
			return
		}
		pod := &pods.Items[0]
		assert.Nil(ct, pod.DeletionTimestamp)
		assert.Equal(ct, corev1.ConditionTrue, framework.PodCondition(pod, corev1.PodReady), "pod %s Ready", pod.Name)
		name = pod.Name
	}, 3*time.Minute, 20*time.Millisecond)
	return name
}

func benchMs(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// benchImageCacheSamples is the sample count of each side of the admission latency with a cold and a
// warm image cache (a push of a new image each for the cold side).
const benchImageCacheSamples = 30

// TestBenchSingletonAdmissionImageCache measures, on the real node, what reading an image's config
// costs a pod admission (issue 20): client-observed dry-run creations through the API server and the
// in-cluster webhook-server of deploy/singleton-operator.yaml, of a Wrapper singleton's pod without
// command whose image (a) nobody has read yet (cold cache: a new image pushed for each sample, read
// from the registry within the admission) and (b) was read a moment before (warm cache: the same tag,
// within --image-config-tag-ttl), beside the same pod with a command (no image read), same run.
func TestBenchSingletonAdmissionImageCache(t *testing.T) {
	if !framework.NeedRealNode(t) {
		return
	}
	framework.Install(t)
	_, err := framework.Kubectl().Run(t.Context(), "rollout", "status", "-n", framework.SingletonNamespace, "deployment/"+framework.WebhookDeployment, "--timeout=240s")
	require.NoError(t, err)
	image := framework.ServeTestAppRegistry(t)
	ns := newSingletonNamespace(t, singletonv1.HoldModeWrapper)
	admit := func(image string, command []string) float64 {
		pod := appPod("bench-", "app")
		pod.Spec.Containers[0].Image, pod.Spec.Containers[0].Command = image, command
		start := time.Now()
		got, err := framework.Clientset.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		took := time.Since(start)
		require.NoError(t, err)
		require.Equal(t, string(singletonv1.HoldModeWrapper), got.Annotations[singletonv1.AnnotationHoldMode],
			"admitted in Wrapper mode, no fallback (%s)", got.Annotations[singletonv1.AnnotationHoldFallback])
		return benchMs(took)
	}
	var cold, warm, baseline []float64
	var first string
	for i := range benchImageCacheSamples {
		variant := framework.PushTestAppVariant(t, image, fmt.Sprintf("cold-%d", i))
		if first == "" {
			first = variant
		}
		cold = append(cold, admit(variant, nil))
		warm = append(warm, admit(first, nil))
		baseline = append(baseline, admit(framework.PauseImage, []string{"/pause"}))
	}
	const method = "client-observed pod creations (dry run) through the API server and the webhook-server of " +
		"deploy/singleton-operator.yaml on the real node, %d samples, interleaved; the image in go-containerregistry's registry on the " +
		"pod network's gateway (no network latency: a remote registry adds its round trips to the cold side, at most " +
		"--image-config-budget, 2 s, before the pod falls back to SchedulingGate). %s"
	framework.RecordFigure(t, benchfmt.Figure{
		Operator: "singleton", Name: "admission of a pod without command, cold image cache", Unit: "ms", Where: "real node",
		Samples: cold, Baseline: "the same pod with a command (no image read), same run", BaselineSamples: baseline,
		Note: fmt.Sprintf(method, benchImageCacheSamples, "Cold: each sample names an image pushed just before (its own config, so its own digest) that "+
			"no admission has read: the webhook resolves the tag and reads the config from the registry within the admission."),
	})
	framework.RecordFigure(t, benchfmt.Figure{
		Operator: "singleton", Name: "admission of a pod without command, warm image cache", Unit: "ms", Where: "real node",
		Samples: warm, Baseline: "the same pod with a command (no image read), same run", BaselineSamples: baseline,
		Note: fmt.Sprintf(method, benchImageCacheSamples, "Warm: the first cold sample's image again, within --image-config-tag-ttl (5 minutes): "+
			"the config comes from the webhook's cache, no registry call."),
	})
}
