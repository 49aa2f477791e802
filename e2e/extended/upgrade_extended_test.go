//go:build e2e

package extended

import (
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/statefulops/statefulops/e2e/framework"
	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
)

// TestExtendedUpgradeUnderLoad moves the in-cluster extended-operator (deploy/extended-operator.yaml, a
// real pod on the real node) to the next release and back (framework.UpgradeSteps) while an
// ExtendedStatefulSet of 3 kwok pods is mid-way through a version change: before each move the test
// changes the template (a new image), so version N+1 starts with one canary and moves each ordinal's
// volume over from version N. The test holds a pod of the new version not Ready (a readiness gate it
// owns, standing in for a slow readiness probe) until the move is over: the canary itself on moves 1
// and 3, a non-canary pod of the rollout on move 2. So the version change is genuinely unfinished at
// the move and only the operator of the new image can finish it once the pod turns Ready. TestExtended's
// two invariant checkers watch the namespace for the whole test: spurious restarts (config rolls or pod
// re-creations: the ExtendedStatefulSet references a ConfigMap and a Secret, so an operator that hashed
// them differently across versions would roll every pod) and moments at which one volume is used by two
// live pods (the ordinal-by-ordinal handover across an operator swap). Both must read 0.
func TestExtendedUpgradeUnderLoad(t *testing.T) {
	const operator = "extended-operator"
	if !framework.PrepareUpgradeTest(t, operator) {
		return
	}

	ns := framework.NewNamespace(t)
	createConfAndCreds(t, ns, "1", "one")
	// The checkers start before the first pod, so they see every pod of every version.
	rc, cc := watchRestarts(t, ns), watchClaims(t, ns)
	gates := watchUpgradeGates(t, ns)

	e := framework.NewESTS("web", 3)
	pod := &e.Spec.Template.Spec.Template.Spec
	referenceConfAndCreds(pod)
	pod.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: upgradeGate}}
	withClaims(e)
	// Long enough to outlast a move (a Deployment rollout of at most 180s, then the leader election), so
	// a held pod turns Ready because the test releases it, never ends as a stale version.
	e.Spec.UpdateStrategy.CanaryWatchTime = &metav1.Duration{Duration: 4 * time.Minute}
	e.Spec.UpdateStrategy.UpdateWatchTime = &metav1.Duration{Duration: 4 * time.Minute}
	createESTS(t, ns, e)
	waitESTSReady(t, ns, "web", 1)
	framework.WaitRolled(t, ns, "web-v1")
	volumes := upgradeVolumes(t, ns, "web-v1")
	require.Len(t, volumes, 3, "every ordinal of version 1 has a bound volume")

	// violations reads both checkers: spurious restarts of every version's StatefulSet so far (no data
	// change, no planned restart) and moments with a volume used by two live pods.
	violations := func(versions int) int {
		n := 0
		for v := 1; v <= versions; v++ {
			sts := fmt.Sprintf("web-v%d", v)
			s, forced := rc.spurious(sts, 3, 0, 0)
			if s > 0 {
				t.Logf("checker: %s: %d spurious restarts (%d rolls; %d pods force-deleted by the simulator left out); pods: %v",
					sts, s, rc.rollCount(sts), forced, rc.pods(sts))
			}
			n += s
		}
		doubles, events := cc.counts()
		if doubles > 0 {
			t.Logf("checker: %d of %d pod events with a volume used by two live pods", doubles, events)
		}
		return n + doubles
	}

	steps := framework.UpgradeSteps()
	var leaderships []time.Duration
	inFlight := 0
	for i, step := range steps {
		version := i + 2
		sts := fmt.Sprintf("web-v%d", version)
		// Hold the canary (phase Canary), or let the canary through and hold the next ordinal (phase
		// Rollout), so both phases cross a move.
		phase, held, released := extendedv1alpha1.PhaseCanary, sts+"-0", ""
		if i%2 == 1 {
			phase, held, released = extendedv1alpha1.PhaseRollout, sts+"-1", sts+"-0"
		}
		gates.hold(sts, released)
		updateESTS(t, ns, "web", func(e *extendedv1alpha1.ExtendedStatefulSet) {
			e.Spec.Template.Spec.Template.Spec.Containers[0].Image = framework.PauseImage + "-v" + strconv.Itoa(version)
		})
		waitVersionInFlight(t, ns, sts, version, phase, held)
		// The reading just before the move: the version change is started and not finished.
		state := versionInFlight(t, ns, sts, version, phase, held)
		t.Logf("upgrade: move %d (%s by %s): version %d in flight: %s", i+1, step.Version, step.Move, version, state)
		inFlight++

		leaderships = append(leaderships, framework.UpgradeOperator(t, operator, step.Version, step.Move).Round(time.Millisecond))

		// Nothing finished it during the move (the pod is still held): the new operator finishes it.
		t.Logf("upgrade: after move %d: version %d still in flight: %s", i+1, version, versionInFlight(t, ns, sts, version, phase, held))
		releasedAt := time.Now()
		gates.release(t, sts)
		waitESTSReady(t, ns, "web", version)
		framework.WaitRolled(t, ns, sts)
		got, err := fetchESTS(t.Context(), ns, "web")
		require.NoError(t, err)
		require.Equal(t, int32(version), got.Status.CurrentVersion, "version %d serves", version)
		require.Equal(t, int32(version), got.Status.UpdateVersion, "no upgrade left under way")
		old, err := framework.FetchStatefulSet(t.Context(), ns, fmt.Sprintf("web-v%d", version-1))
		require.NoError(t, err)
		require.Nil(t, old, "version %d deleted once version %d rolled out", version-1, version)
		require.Equal(t, volumes, upgradeVolumes(t, ns, sts), "every ordinal of version %d runs on the volume it had in version 1", version)
		n := violations(version)
		t.Logf("upgrade: move %d: version %d completed %s after its pod was released; checkers: %d violations",
			i+1, version, time.Since(releasedAt).Round(time.Millisecond), n)
		require.Zero(t, n, "invariant violations after move %d", i+1)
	}

	n := violations(len(steps) + 1)
	rolls := 0
	for v := 1; v <= len(steps)+1; v++ {
		rolls += rc.rollCount(fmt.Sprintf("web-v%d", v))
	}
	doubles, events := cc.counts()
	t.Logf("upgrade: checkers: %d versions, %d config rolls, %d pod events, %d with a volume used by two live pods",
		len(steps)+1, rolls, events, doubles)
	t.Logf("upgrade: %s: %d moves, %d operations in flight across moves, %d violations, leadership after each move: %v",
		operator, len(steps), inFlight, n, leaderships)
	assert.Zero(t, n, "invariant violations")
}

// upgradeGate is the readiness gate of TestExtendedUpgradeUnderLoad's pods: kwok keeps a running pod's
// Ready equal to "every readiness gate condition is True" (localcluster/stages/pod-ready.yaml) and
// never sets the gate itself, so the test decides when a pod of a new version becomes Ready.
const upgradeGate = "e2e.statefulops.dev/upgrade-ready"

// upgradeGates sets upgradeGate True on every running pod of the namespace, like a kubelet whose
// readiness probe passes, except on the pods it holds: those of one StatefulSet (a version in flight),
// but for one pod let through (the canary, to hold the rollout after it).
type upgradeGates struct {
	ns           string
	mu           sync.Mutex
	sts, through string
}

func watchUpgradeGates(t *testing.T, ns string) *upgradeGates {
	t.Helper()
	g := &upgradeGates{ns: ns}
	w, err := framework.Clientset.CoreV1().Pods(ns).Watch(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	go func() {
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted || g.held(pod) {
				continue
			}
			if err := g.open(t, pod); err != nil {
				t.Errorf("setting %s on pod %s: %v", upgradeGate, pod.Name, err)
			}
		}
	}()
	return g
}

// held reports whether the pod is one the test holds not Ready.
func (g *upgradeGates) held(pod *corev1.Pod) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	ref := metav1.GetControllerOf(pod)
	return ref != nil && g.sts != "" && ref.Name == g.sts && pod.Name != g.through
}

// hold holds the pods of StatefulSet sts not Ready from now on, but for pod through ("" for none).
func (g *upgradeGates) hold(sts, through string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sts, g.through = sts, through
}

// release lets the pods of sts become Ready: the ones that run now here, later ones by the watch.
func (g *upgradeGates) release(t *testing.T, sts string) {
	t.Helper()
	g.hold("", "")
	pods, err := framework.Clientset.CoreV1().Pods(g.ns).List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	for i := range pods.Items {
		if ref := metav1.GetControllerOf(&pods.Items[i]); ref != nil && ref.Name == sts {
			require.NoError(t, g.open(t, &pods.Items[i]))
		}
	}
}

// open sets the gate True on a running pod that has no gate condition yet.
func (g *upgradeGates) open(t *testing.T, pod *corev1.Pod) error {
	if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning || framework.PodCondition(pod, upgradeGate) != "" {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{{
		Type: upgradeGate, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now(),
	}}}})
	if err != nil {
		return err
	}
	_, err = framework.Clientset.CoreV1().Pods(g.ns).Patch(t.Context(), pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) || t.Context().Err() != nil {
		return nil // gone meanwhile, or the test is over
	}
	return err
}

// waitVersionInFlight waits until version (StatefulSet sts) is in phase, its pod held runs not Ready
// (the canary, or in phase Rollout the next ordinal moved after the Ready canary), and the status tells
// an upgrade from version-1 under way.
func waitVersionInFlight(t *testing.T, ns, sts string, version int, phase, held string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		s, err := framework.FetchStatefulSet(t.Context(), ns, sts)
		if !assert.NoError(c, err) || !assert.NotNil(c, s) {
			return
		}
		assert.Equal(c, phase, s.Annotations[extendedv1alpha1.PhaseAnnotation], "phase of %s", sts)
		p, err := framework.FetchPod(t, ns, held)
		if assert.NoError(c, err) {
			assert.Equal(c, corev1.PodRunning, p.Status.Phase, "%s running", held)
		}
		if phase == extendedv1alpha1.PhaseRollout {
			canary, err := framework.FetchPod(t, ns, sts+"-0")
			if assert.NoError(c, err) {
				assert.Equal(c, corev1.ConditionTrue, framework.PodCondition(canary, corev1.PodReady), "canary Ready")
			}
		}
		e, err := fetchESTS(t.Context(), ns, "web")
		if assert.NoError(c, err) {
			assert.Equal(c, int32(version-1), e.Status.CurrentVersion, "current version")
			assert.Equal(c, int32(version), e.Status.UpdateVersion, "update version")
		}
	}, framework.Timeout, framework.Tick, "version %d in flight in phase %s", version, phase)
}

// versionInFlight checks that version is started and not finished (its StatefulSet in phase, its held
// pod not Ready, version-1 still serving) and describes it.
func versionInFlight(t *testing.T, ns, sts string, version int, phase, held string) string {
	t.Helper()
	s, err := framework.FetchStatefulSet(t.Context(), ns, sts)
	require.NoError(t, err)
	require.NotNil(t, s, "StatefulSet %s", sts)
	require.Equal(t, phase, s.Annotations[extendedv1alpha1.PhaseAnnotation], "phase of %s", sts)
	p := framework.GetPod(t, ns, held)
	require.NotEqual(t, corev1.ConditionTrue, framework.PodCondition(p, corev1.PodReady), "%s held not Ready", held)
	e, err := fetchESTS(t.Context(), ns, "web")
	require.NoError(t, err)
	require.Equal(t, int32(version-1), e.Status.CurrentVersion, "version %d still serves", version-1)
	require.Equal(t, int32(version), e.Status.UpdateVersion)
	return fmt.Sprintf("%s phase %s with %d/%d pods Ready (%s held not Ready), status current %d update %d versions %v Progressing=%s",
		sts, phase, s.Status.ReadyReplicas, s.Status.Replicas, held, e.Status.CurrentVersion, e.Status.UpdateVersion,
		e.Status.Versions, estsCondition(e, extendedv1alpha1.ConditionProgressing))
}

// upgradeVolumes returns, per ordinal, the PersistentVolume the claim "data" of StatefulSet sts is
// bound to.
func upgradeVolumes(t *testing.T, ns, sts string) map[int]string {
	t.Helper()
	out := map[int]string{}
	for i := range 3 {
		pvc, err := framework.Clientset.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), fmt.Sprintf("data-%s-%d", sts, i), metav1.GetOptions{})
		if err == nil && pvc.Status.Phase == corev1.ClaimBound {
			out[i] = pvc.Spec.VolumeName
		}
	}
	return out
}
