//go:build e2e

package singleton

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/statefulops/statefulops/e2e/framework"
	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

// upgradeGracePeriod is the terminationGracePeriodSeconds of the test app's pods (longer than the
// StatefulSingleton's terminationGracePeriod, so the pod's own is kept: respectPodGracePeriod). The
// old app is frozen across a move (see TestSingletonUpgradeUnderLoad); the kubelet must not SIGKILL it
// before the test resumes it, whatever the move takes (UpgradeOperator allows 180 s per rollout).
const upgradeGracePeriod = 240

// upgradeLeaseName is the singleton operator's leader-election Lease (LeaderElectionID in its main.go).
const upgradeLeaseName = "statefulsingleton-operator.apps.statefulsingleton.com"

// TestSingletonUpgradeUnderLoad: singleton-operator and its webhook server, installed from
// deploy/singleton-operator.yaml, run on the real node; a one-replica RollingUpdate Deployment of the
// e2e test app runs there under a Wrapper-mode StatefulSingleton. Before each move of
// framework.UpgradeSteps a handover is started (move 1 and 3: the active pod deleted; move 2: a
// rollout of the Deployment) and kept in flight across the move: the old pod's app process is frozen
// (SIGSTOP) before it is told to stop, so the old pod cannot be gone and the new pod stays held — its
// containers running, its wrapper waiting for the grant, its sidecar long-polling the grant endpoint
// of the operator being replaced. Once a pod of the new image leads, the old app is resumed (SIGCONT):
// it handles its pending SIGTERM and exits, and the held pod must be released and granted by the NEW
// leader (its log says so) and its app must really start (its own start record): the sidecar
// reconnected to the new operator, whose grant certificate its CA (given at admission, before the
// move) still trusts.
// Checkers for the whole test: the process-level overlap checker of TestSingletonOnTheRealNode (the
// test app's own start/stop records), the API-level ones (watchReleased, released intervals of the
// pod timeline) and the revision rule: 0. A loop of dry-run pod creations (one every 0.5 s) in the
// namespace runs throughout, as the rolling-restart subtest of TestSingletonAdmissionOnTheRealNode
// does: the webhook server rolls with every move and must refuse none.
func TestSingletonUpgradeUnderLoad(t *testing.T) {
	const operator = "singleton-operator"
	if !framework.PrepareUpgradeTest(t, operator) {
		return
	}

	ns := newSingletonNamespace(t, singletonv1.HoldModeWrapper)
	timeline := watchPodTimeline(t, ns)
	watchReleased(t, ns) // asserts its own count (two released, non-terminal pods at once) at the end
	creations := startDryRunCreations(t, ns, "app", 500*time.Millisecond)

	// The Deployment: RollingUpdate, so a deleted or rolled-out pod's successor is created at once
	// (beside the old pod) and is held while the old one stops.
	tmpl := singletonAppTemplate(t, "app", "")
	tmpl.Spec.TerminationGracePeriodSeconds = ptr.To[int64](upgradeGracePeriod)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "app"}},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType},
			Template: tmpl,
		},
	}
	_, err := framework.Clientset.AppsV1().Deployments(ns).Create(t.Context(), dep, metav1.CreateOptions{})
	require.NoError(t, err)
	waitSingletonActive(t, ns, "app", 1)

	// The scenario each handover belongs to (checkHandovers labels a handover with the one running
	// when its new process started).
	type mark struct {
		at   time.Time
		name string
	}
	var marks []mark
	scenarioAt := func(at time.Time) string {
		name := "initial start"
		for _, m := range marks {
			if !at.Before(m.at) {
				name = m.name
			}
		}
		return name
	}
	// violations is what the checkers counted so far: overlapping process intervals (the test app's
	// own records), overlapping released intervals (API level) and releases of an older revision than
	// a held pod's.
	violations := func() int {
		overlaps, _ := checkHandovers(t, readIntervals(t, ns, "app-"), timeline, scenarioAt)
		_, rule := timeline.revisionRule()
		return overlaps + overlappingIntervals(releasedIntervals(timeline)) + len(rule)
	}
	require.Zero(t, violations(), "violations before the first move")

	var leadership []time.Duration
	inFlight := 0
	for i, step := range framework.UpgradeSteps() {
		move := fmt.Sprintf("move %d (%s to %s)", i+1, step.Move, step.Version)
		ss := singletonStatus(t, ns, "app")
		old, epoch := ss.Status.ActivePod, ss.Status.Epoch
		require.NotEmpty(t, old, "%s: an active pod before the handover", move)
		oldPod, err := framework.Clientset.CoreV1().Pods(ns).Get(t.Context(), old, metav1.GetOptions{})
		require.NoError(t, err)
		require.EqualValues(t, upgradeGracePeriod, ptr.Deref(oldPod.Spec.TerminationGracePeriodSeconds, 0),
			"%s: the pod keeps its own grace period, longer than the freeze", move)

		// Start the handover with the old app frozen: its SIGTERM stays pending until the test resumes
		// it, so the handover cannot finish before the move, whoever leads.
		pid := upgradeAppProcess(t, ns, old)
		upgradeSignal(t, pid, syscall.SIGSTOP)
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) }) // a failed test leaves nothing frozen
		require.Eventually(t, func() bool { return upgradeProcessState(pid) == "T" }, 10*time.Second, 10*time.Millisecond,
			"%s: app process %d of %s stopped", move, pid, old)
		marks = append(marks, mark{time.Now(), move})
		trigger, rollout := "pod delete", i == 1
		if rollout {
			// A rollout: the Deployment creates the new revision's pod (held); the operator deletes the
			// old pod once the new one runs.
			trigger = "RollingUpdate rollout"
			framework.RetryOnConflict(t, func() error {
				d, err := framework.Clientset.AppsV1().Deployments(ns).Get(t.Context(), "app", metav1.GetOptions{})
				if err != nil {
					return err
				}
				if d.Spec.Template.Annotations == nil {
					d.Spec.Template.Annotations = map[string]string{}
				}
				d.Spec.Template.Annotations["e2e/upgrade-rollout"] = strconv.Itoa(i)
				_, err = framework.Clientset.AppsV1().Deployments(ns).Update(t.Context(), d, metav1.UpdateOptions{})
				return err
			})
		} else {
			require.NoError(t, framework.Clientset.CoreV1().Pods(ns).Delete(t.Context(), old, metav1.DeleteOptions{}))
		}

		// In flight (started, not finished): the old pod is terminating, the new one is held — running
		// (the wrapper waits for its grant), no epoch, no start record of its app — and the singleton's
		// epoch has moved at most by the one reserved for a release on the old pod's exit.
		next := upgradeWaitHeld(t, ns, old, rollout, move)
		require.LessOrEqual(t, singletonEpoch(t, ns, "app"), epoch+1, "%s: no release yet", move)
		require.Empty(t, readIntervals(t, ns, next), "%s: the held pod's app has not started", move)
		caBefore, certBefore := upgradeGrantCert(t)
		inFlight++
		t.Logf("%s: handover (%s) in flight: old pod %s terminating with its app frozen (pid %d), new pod %s held (running, waiting for its grant), epoch %d",
			move, trigger, old, pid, next, epoch)

		took := framework.UpgradeOperator(t, operator, step.Version, step.Move)
		leadership = append(leadership, took.Round(time.Millisecond))
		leader := upgradeLeader(t)

		// Still held across the move: the old app could not stop, so no operator could release.
		got, err := framework.Clientset.CoreV1().Pods(ns).Get(t.Context(), next, metav1.GetOptions{})
		require.NoError(t, err, "%s: the held pod %s survived the move", move, next)
		require.Empty(t, got.Annotations[singletonv1.AnnotationEpoch], "%s: %s still held after the move", move, next)
		require.Empty(t, readIntervals(t, ns, next), "%s: the held pod's app has not started during the move", move)
		// The grant endpoint's CA, which the held pod's sidecar got at its admission before the move,
		// is the one the new operator serves with.
		caAfter, certAfter := upgradeGrantCert(t)
		require.Equal(t, caBefore, caAfter, "%s: the grant CA stays the same across the operator's restart", move)

		// Resume the old app: it handles its pending SIGTERM (0.2 s) and exits; the new leader must
		// release the held pod and its app must start.
		upgradeSignal(t, pid, syscall.SIGCONT)
		resumed := time.Now()
		waitSingletonActive(t, ns, "app", epoch+1)
		require.Equal(t, next, singletonStatus(t, ns, "app").Status.ActivePod, "%s: the held pod is the active one", move)
		// Not a tight bound: a sidecar whose retry, right after the old operator stopped, is routed to
		// its stale endpoint waits out its client timeout (45 s, no dial timeout) before it asks again;
		// the release→start time is logged below.
		var started time.Time
		require.Eventually(t, func() bool {
			ivs := readIntervals(t, ns, next)
			if len(ivs) == 0 {
				return false
			}
			started = ivs[0].start
			return true
		}, framework.Timeout, framework.Tick, "%s: the app of %s recorded its start", move, next)
		require.True(t, started.After(resumed), "%s: the app of %s started after the old app was resumed", move, next)
		// Released by the new leader, and granted by it: the sidecar, whose long poll went to the old
		// operator, asked again and reached the new one over TLS (it trusts only the CA it was given).
		var grantLine string
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			logs, err := framework.Kubectl().Run(t.Context(), "logs", "-n", framework.SingletonNamespace, leader, "-c", "manager")
			require.NoError(c, err)
			lines := strings.Split(logs, "\n")
			assert.True(c, slices.ContainsFunc(lines, func(l string) bool {
				return strings.Contains(l, `"Released pod"`) && strings.Contains(l, `"pod":"`+next+`"`)
			}), "the new leader %s logged the release of %s", leader, next)
			at := slices.IndexFunc(lines, func(l string) bool {
				return strings.Contains(l, `"Start granted"`) && strings.Contains(l, `"pod":"`+ns+"/"+next+`"`)
			})
			if assert.GreaterOrEqual(c, at, 0, "the new leader %s granted %s's start", leader, next) {
				grantLine = lines[at]
			}
		}, 30*time.Second, framework.Tick, "%s: released and granted by the new leader", move)
		released := timeline.get(string(got.UID)).released
		// The sidecar's long poll ended with the old operator; it dials again at once, and a dial to the
		// gone pod's endpoint gives up within 2 s: its app starts seconds after the release, not after
		// the long poll's 45 s timeout.
		assert.Less(t, started.Sub(released), 15*time.Second, "%s: the app of %s starts promptly after its release", move, next)
		sidecar, _ := framework.Kubectl().Run(t.Context(), "logs", "-n", ns, next, "-c", singletonv1.SidecarContainerName)
		t.Logf("%s: %s leads %s after the move; old app resumed, %s released after %s, its app started %s after the resume; grant CA unchanged, serving certificate unchanged: %t; new leader: %s; sidecar of %s:\n%s",
			move, leader, took.Round(time.Millisecond), next, released.Sub(resumed).Round(time.Millisecond),
			started.Sub(resumed).Round(time.Millisecond), bytes.Equal(certBefore, certAfter), grantLine, next, strings.TrimSpace(sidecar))

		// Settled before the next move: one app pod, the old webhook replicas drained and gone (the
		// creation loop's window for this move covers the whole webhook roll).
		waitDeploymentSettled(t, ns)
		require.Eventually(t, func() bool {
			pods, err := framework.Clientset.CoreV1().Pods(framework.SingletonNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=webhook-server"})
			return err == nil && len(pods.Items) == 2
		}, 2*time.Minute, framework.Tick, "%s: the old webhook server pods are gone", move)
		created, refused := creations.window()
		t.Logf("%s: dry-run pod creations through the webhook server's roll: %d, refused %d", move, created, refused)
		// A move rolls two webhook replicas, each draining 5 s: well over 10 creations at one per 0.5 s.
		assert.GreaterOrEqual(t, created, 10, "%s: creations ran throughout the webhook server's roll", move)
		require.Zero(t, violations(), "%s: violations", move)
	}

	overlaps, hs := checkHandovers(t, readIntervals(t, ns, "app-"), timeline, scenarioAt)
	logHandovers(t, "SINGLETON upgrade:", hs)
	apiOverlaps := overlappingIntervals(releasedIntervals(timeline))
	releases, rule := timeline.revisionRule()
	total := overlaps + apiOverlaps + len(rule)
	created, refusals := creations.finish()
	refused := len(refusals)
	t.Logf("SINGLETON upgrade: %d handovers, %d overlapping process intervals, %d overlapping released intervals, %d of %d releases chose an older revision; %d dry-run pod creations, %d refused",
		len(hs), overlaps, apiOverlaps, len(rule), releases, created, refused)
	t.Logf("upgrade: %s: %d moves, %d operations in flight across moves, %d violations, leadership after each move: %v",
		operator, len(framework.UpgradeSteps()), inFlight, total, leadership)
	assert.Zero(t, total, "violations: overlapping process intervals, overlapping released intervals, revision rule")
	assert.Len(t, hs, len(framework.UpgradeSteps()), "one handover per move")
	assert.Zero(t, refused, "pod creations refused while the webhook server rolled: %v", refusals)
}

// upgradeWaitHeld waits until the handover from old is in flight — old terminating, its successor
// running and not released, no pod of the singleton released — and returns the successor's name. The
// successor is of old's revision after a pod deletion, of another (the rollout's) otherwise; a rollout
// may also leave a held replacement of the old revision (the old ReplicaSet replaces the pod the
// operator deleted), which is never the one to release.
func upgradeWaitHeld(t *testing.T, ns, old string, rollout bool, move string) string {
	t.Helper()
	var next string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		pods, err := framework.Clientset.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app=app"})
		require.NoError(c, err)
		oldRevision := ""
		for _, p := range pods.Items {
			if p.Name == old {
				oldRevision = podRevision(&p)
				assert.NotNil(c, p.DeletionTimestamp, "old pod %s terminating", old)
			}
		}
		require.NotEmpty(c, oldRevision, "old pod %s still there", old)
		var successors []corev1.Pod
		for _, p := range pods.Items {
			if p.Name == old {
				continue
			}
			assert.Empty(c, p.Annotations[singletonv1.AnnotationEpoch], "pod %s not released", p.Name)
			if p.DeletionTimestamp == nil && (podRevision(&p) != oldRevision) == rollout {
				successors = append(successors, p)
			}
		}
		require.Len(c, successors, 1, "one successor of %s (rollout: %t)", old, rollout)
		p := successors[0]
		assert.Equal(c, "true", p.Labels[singletonv1.LabelManaged], "new pod %s admitted held", p.Name)
		assert.True(c, allRunning(&p), "new pod %s running (its wrapper waits for the grant)", p.Name)
		next = p.Name
	}, framework.Timeout, 50*time.Millisecond, "%s: handover from %s in flight", move, old)
	return next
}

// upgradeAppProcess returns the pid of the test app's process of pod ns/name on the real node (the
// wrapper execs the app: same process, the pod's environment), found as killOperator finds the
// operator's.
func upgradeAppProcess(t *testing.T, ns, name string) int {
	t.Helper()
	var pids []int
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		pids = nil
		entries, err := os.ReadDir("/proc")
		require.NoError(c, err)
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if err != nil {
				continue
			}
			argv0, _, _ := strings.Cut(string(cmdline), "\x00")
			if filepath.Base(argv0) != "testapp" {
				continue
			}
			environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
			if err != nil {
				continue
			}
			env := strings.Split(string(environ), "\x00")
			if slices.Contains(env, "POD_NAME="+name) && slices.Contains(env, "POD_NAMESPACE="+ns) {
				pids = append(pids, pid)
			}
		}
		assert.Len(c, pids, 1, "app processes of %s/%s", ns, name)
	}, framework.Timeout, framework.Tick)
	return pids[0]
}

func upgradeSignal(t *testing.T, pid int, sig syscall.Signal) {
	t.Helper()
	require.NoError(t, syscall.Kill(pid, sig), "%s to %d", sig, pid)
}

// upgradeProcessState is the state letter of /proc/<pid>/stat ("T": stopped), "" when it is gone.
func upgradeProcessState(pid int) string {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// pid (comm) state ...: comm may hold spaces, the state follows the last ')'.
	_, rest, ok := strings.Cut(string(stat[bytes.LastIndexByte(stat, ')')+1:]), " ")
	if !ok || rest == "" {
		return ""
	}
	return rest[:1]
}

// upgradeGrantCert returns the CA and the serving certificate of the grant endpoint (the Secret its
// rotator keeps; the webhook gives the CA to every sidecar it injects).
func upgradeGrantCert(t *testing.T) (ca, cert []byte) {
	t.Helper()
	s, err := framework.Clientset.CoreV1().Secrets(framework.SingletonNamespace).Get(t.Context(), "singleton-operator-grant-cert", metav1.GetOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, s.Data["ca.crt"])
	return s.Data["ca.crt"], s.Data["tls.crt"]
}

// upgradeLeader returns the pod that holds the operator's leader-election Lease (controller-runtime's
// identity is <pod name>_<uuid>).
func upgradeLeader(t *testing.T) string {
	t.Helper()
	l, err := framework.Clientset.CoordinationV1().Leases(framework.SingletonNamespace).Get(t.Context(), upgradeLeaseName, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, l.Spec.HolderIdentity)
	name, _, _ := strings.Cut(*l.Spec.HolderIdentity, "_")
	return name
}
