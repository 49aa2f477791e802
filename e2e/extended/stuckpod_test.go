//go:build e2e

package extended

import (
	"os"
	"path/filepath"
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
	"github.com/statefulops/statefulops/e2e/realnode"
	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// TestUpdateNotReadyRecreatesACrashLoopingPodOnTheRealNode (ES-07): an ExtendedStatefulSet with
// updateNotReady, OrderedReady, 2 test-app pods on the real node reading a ConfigMap. app-v1-1 breaks
// on the old revision: the test app exits 3 at start while a crash file named after its pod UID
// exists (a pod's own broken state; its replacement, a new UID, starts fine), so after one kill the
// kubelet keeps it in CrashLoopBackOff. A configuration change then rolls the pods, and the
// StatefulSet controller alone would wait for app-v1-1 for ever (kubernetes/kubernetes#67250). The
// operator deletes it exactly once (a watch records every pod deletion), it comes back on the new
// revision, the roll proceeds to app-v1-0 and the ExtendedStatefulSet gets Ready.
func TestUpdateNotReadyRecreatesACrashLoopingPodOnTheRealNode(t *testing.T) {
	if !framework.NeedRealNode(t) {
		return
	}
	framework.Install(t)
	_, err := framework.Kubectl().Run(t.Context(), "rollout", "status", "-n", "extended-operator-system",
		"deployment/extended-operator-controller-manager", "--timeout=180s")
	require.NoError(t, err)

	ns := framework.NewNamespace(t)
	cms := framework.Clientset.CoreV1().ConfigMaps(ns)
	_, err = cms.Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "app-config"}, Data: map[string]string{"LEVEL": "1"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	// $(POD_UID): Kubernetes expands the container's own variable in its arguments.
	pod := framework.TestAppPod("app", "--crash-at-start=3", "--crash-file=/records/$(POD_UID).crash")
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](2)
	pod.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}}}}
	e := framework.NewESTS("app", 2)
	e.Spec.UpdateStrategy.UpdateNotReady = true
	e.Spec.UpdateStrategy.ConfigChangeQuietPeriod = &metav1.Duration{Duration: 0}
	// OrderedReady: the StatefulSet controller waits for a pod that is not Ready (with Parallel it
	// replaces an outdated pod whatever its state).
	e.Spec.Template.Spec.PodManagementPolicy = appsv1.OrderedReadyPodManagement
	e.Spec.Template.Spec.Template = corev1.PodTemplateSpec{ObjectMeta: pod.ObjectMeta, Spec: pod.Spec}
	createESTS(t, ns, e)
	waitESTSReady(t, ns, "app", 1)
	framework.WaitRolled(t, ns, "app-v1")
	sts, err := framework.FetchStatefulSet(t.Context(), ns, "app-v1")
	require.NoError(t, err)
	old := sts.Status.UpdateRevision
	start := time.Now()

	// 1. app-v1-1 breaks for good on the old revision: a real crash loop.
	stuck, err := framework.Clientset.CoreV1().Pods(ns).Get(t.Context(), "app-v1-1", metav1.GetOptions{})
	require.NoError(t, err)
	crashFile := filepath.Join(realnode.RecordDir(framework.RealNode.StateDir), string(stuck.UID)+".crash")
	require.NoError(t, os.WriteFile(crashFile, nil, 0o644))
	t.Cleanup(func() { _ = os.Remove(crashFile) })
	require.NoError(t, syscall.Kill(framework.TestAppPID(t, ns, "app-v1-1"), syscall.SIGKILL))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		p, err := framework.Clientset.CoreV1().Pods(ns).Get(t.Context(), "app-v1-1", metav1.GetOptions{})
		if assert.NoError(c, err) {
			assert.Equal(c, stuck.UID, p.UID)
			assert.True(c, framework.CrashLooping(p, "app", 3), "app-v1-1 exited 3 and is not Ready")
		}
	}, framework.Timeout, framework.Tick, "app-v1-1 crash-loops on the old revision")
	crashing := time.Since(start)
	deletions := framework.RecordPodDeletions(t, ns)

	// 2. A configuration change rolls the pods: the operator deletes the stuck one, the roll proceeds.
	framework.RetryOnConflict(t, func() error {
		cm, err := cms.Get(t.Context(), "app-config", metav1.GetOptions{})
		if err != nil {
			return err
		}
		cm.Data["LEVEL"] = "2"
		_, err = cms.Update(t.Context(), cm, metav1.UpdateOptions{})
		return err
	})
	changed := time.Now()
	waitESTSWithin(t, ns, "app", 2*time.Minute, func(c *assert.CollectT, e *extendedv1alpha1.ExtendedStatefulSet) {
		sts, err := framework.FetchStatefulSet(t.Context(), ns, "app-v1")
		if assert.NoError(c, err) {
			assert.NotEqual(c, old, sts.Status.CurrentRevision, "the roll is over")
		}
		assert.Equal(c, map[string]bool{"1": true}, e.Status.Versions)
		assert.Equal(c, metav1.ConditionTrue, estsCondition(e, extendedv1alpha1.ConditionReady), "Ready")
	}, "rolled and Ready after the configuration change")
	rolled := time.Since(changed)
	framework.WaitRolled(t, ns, "app-v1")
	sts, err = framework.FetchStatefulSet(t.Context(), ns, "app-v1")
	require.NoError(t, err)
	for _, name := range []string{"app-v1-0", "app-v1-1"} {
		p, err := framework.Clientset.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, sts.Status.UpdateRevision, p.Labels[appsv1.ControllerRevisionHashLabelKey], "%s on the new revision", name)
	}
	var stuckDeletions []framework.PodDeletion
	for _, d := range deletions.List() {
		if d.Name == "app-v1-1" {
			stuckDeletions = append(stuckDeletions, d)
		}
	}
	require.Len(t, stuckDeletions, 1, "app-v1-1 deleted exactly once; all deletions: %v", deletions.List())
	assert.Equal(t, string(stuck.UID), stuckDeletions[0].UID, "the stuck pod")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		evs := testsupport.Events(t, framework.Client, ns, "ExtendedStatefulSet", "app", extendedv1alpha1.EventStuckPodRecreated)
		if assert.Len(c, evs, 1) {
			assert.Contains(c, evs[0].Note, "Pod app-v1-1 is not Ready on revision "+old)
		}
	}, framework.Timeout, framework.Tick, "one StuckPodRecreated Event")
	t.Logf("SUMMARY extended-operator stuck pod on the real node: crash loop %s after the break; rolled and Ready %s after the configuration change; deletions %v",
		crashing.Round(time.Millisecond), rolled.Round(time.Millisecond), deletions.List())
}
