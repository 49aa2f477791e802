//go:build e2e

package extended

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
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

// TestExtendedOnTheRealNode: extended-operator installed from deploy/extended-operator.yaml runs as a real
// pod on the real node, and an ExtendedStatefulSet of 2 test-app pods reading a ConfigMap through envFrom
// runs there too. A change of the ConfigMap's data restarts every test-app process exactly once: the
// processes' own start records (one per process, in the record dir) move past the change, and no third
// start follows. Real processes are the point: kwok cannot show that a process really restarted.
func TestExtendedOnTheRealNode(t *testing.T) {
	if !framework.NeedRealNode(t) {
		return
	}
	framework.Install(t)
	_, err := framework.Kubectl().Run(t.Context(), "rollout", "status", "-n", "extended-operator-system",
		"deployment/extended-operator-controller-manager", "--timeout=180s")
	require.NoError(t, err)

	ns := framework.NewNamespace(t)
	_, err = framework.Clientset.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "app-config"}, Data: map[string]string{"LEVEL": "1"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	pod := framework.TestAppPod("app", "--shutdown-seconds=0.2")
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](5)
	pod.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}}}}
	e := framework.NewESTS("app", 2)
	e.Spec.Template.Spec.PodManagementPolicy = appsv1.OrderedReadyPodManagement
	e.Spec.Template.Spec.Template = corev1.PodTemplateSpec{ObjectMeta: pod.ObjectMeta, Spec: pod.Spec}
	start := time.Now()
	createESTS(t, ns, e)
	waitESTSReady(t, ns, "app", 1)
	framework.WaitRolled(t, ns, "app-v1")
	t.Logf("ExtendedStatefulSet of 2 test-app pods Ready in %s", time.Since(start).Round(time.Millisecond))
	before := testAppStarts(t, ns)
	require.Len(t, before, 2, "one start per pod: %v", before)
	for name, starts := range before {
		require.Len(t, starts, 1, "pod %s started once", name)
	}

	cm, err := framework.Clientset.CoreV1().ConfigMaps(ns).Get(t.Context(), "app-config", metav1.GetOptions{})
	require.NoError(t, err)
	cm.Data["LEVEL"] = "2"
	_, err = framework.Clientset.CoreV1().ConfigMaps(ns).Update(t.Context(), cm, metav1.UpdateOptions{})
	require.NoError(t, err)
	changed := time.Now()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		after := testAppStarts(t, ns)
		for _, name := range []string{"app-v1-0", "app-v1-1"} {
			if assert.Len(c, after[name], 2, "pod %s: a second process", name) {
				assert.True(c, after[name][1].After(changed), "pod %s restarted after the change", name)
			}
		}
	}, 3*time.Minute, time.Second, "every process restarted")
	restarted := time.Since(changed)
	waitESTSReady(t, ns, "app", 1)
	testsupport.NeverWithin(t, 10*time.Second, 500*time.Millisecond, func() bool {
		for _, starts := range testAppStarts(t, ns) {
			if len(starts) > 2 {
				return true
			}
		}
		return false
	}, "a process restarted a second time")
	after := testAppStarts(t, ns)
	t.Logf("SUMMARY extended-operator real node: ConfigMap change → every test-app process restarted once in %s (quiet period, rolling update and readiness included); starts before %v, after %v",
		restarted.Round(time.Millisecond), before, after)
	got, err := fetchESTS(t.Context(), ns, "app")
	require.NoError(t, err)
	assert.Equal(t, map[string]bool{"1": true}, got.Status.Versions, "a config change is no new version")
	assert.Equal(t, metav1.ConditionTrue, estsCondition(got, extendedv1alpha1.ConditionReady))
}

// testAppStarts reads the test app's records of ns from the record dir: per pod name, the start times of
// its processes, oldest first.
func testAppStarts(t *testing.T, ns string) map[string][]time.Time {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(realnode.RecordDir(framework.RealNode.StateDir), "*.jsonl"))
	require.NoError(t, err)
	out := map[string][]time.Time{}
	for _, file := range files {
		f, err := os.Open(file)
		if err != nil {
			continue // removed meanwhile
		}
		s := bufio.NewScanner(f)
		for s.Scan() {
			var r framework.AppRecord
			if json.Unmarshal(s.Bytes(), &r) == nil && r.Event == "start" && r.Pod.Namespace == ns {
				out[r.Pod.Name] = append(out[r.Pod.Name], r.Time)
			}
		}
		_ = f.Close()
	}
	for name := range out {
		slices.SortFunc(out[name], func(a, b time.Time) int { return a.Compare(b) })
	}
	return out
}
