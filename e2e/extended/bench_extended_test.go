//go:build e2e && bench

package extended

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/statefulops/statefulops/e2e/benchfmt"
	"github.com/statefulops/statefulops/e2e/framework"
)

// Sample counts of the extended bench: a change with no quiet period and a native template change
// cost a 2-pod roll each (about a second on kwok); one with the default 2s quiet period costs 3s.
const (
	extendedBenchChanges        = 20
	extendedBenchDefaultChanges = 8
	extendedBenchReplicas       = 2
)

// extendedBenchQuietField is spec.updateStrategy.configChangeQuietPeriod, the debounce of
// configuration changes ("0s": apply at once).
var extendedBenchQuietField = []string{"spec", "updateStrategy", "configChangeQuietPeriod"}

// TestBenchExtendedConfigChange measures extended-operator's reaction to a ConfigMap data change: from
// the watch event of the ConfigMap's update to the watch event of the StatefulSet's pod template
// carrying the new config hash, with configChangeQuietPeriod "0s" (the controller's own latency) and
// with the default 2s quiet period. The baseline is the native StatefulSet controller reacting to a
// template change: from the watch event of the new template to the one of the first old pod deleted.
// The spurious-restart checker of TestExtended runs throughout (must be 0).
func TestBenchExtendedConfigChange(t *testing.T) {
	startExtendedOperator(t)
	immediate := extendedBenchHasQuietField(t)

	var samples, defaults []float64
	if immediate {
		samples = extendedBenchRun(t, "0s", extendedBenchChanges)
	}
	defaults = extendedBenchRun(t, "", extendedBenchDefaultChanges)

	// Baseline: a plain StatefulSet of the same size whose template changes.
	ns := framework.NewNamespace(t)
	framework.RolloutStatefulSet(t, ns, "web", extendedBenchReplicas, 0)
	marks := watchExtendedBenchTemplate(t, ns)
	var baseline []float64
	for i := range extendedBenchChanges {
		framework.BumpTemplate(t, ns, "web", fmt.Sprint(i+2))
		var changed, deleted time.Time
		require.Eventually(t, func() bool {
			changed, deleted = marks.templateToDeletion(i + 1)
			return !deleted.IsZero()
		}, framework.Timeout, 10*time.Millisecond, "template change %d: an old pod deleted", i+1)
		baseline = append(baseline, framework.LeaseBenchMillis(deleted.Sub(changed)))
		framework.WaitStatefulSetReady(t, ns, "web", extendedBenchReplicas)
	}

	base := "StatefulSet controller reacting to a template change (template updated -> first old pod deleted)"
	if immediate {
		framework.RecordFigure(t, benchfmt.Figure{
			Operator: "extended", Name: "ConfigMap change -> pod template updated (configChangeQuietPeriod 0s)", Unit: "ms", Where: "kwok",
			Samples: samples, Baseline: base, BaselineSamples: baseline, Targets: []benchfmt.Target{benchfmt.AtMost("p99", 100)},
			Note: fmt.Sprintf("%d ConfigMap data changes of a %d-replica ExtendedStatefulSet referencing it (envFrom), each after the previous "+
				"roll finished; from the ConfigMap's watch event to the StatefulSet's watch event with the new config hash. 0 spurious restarts.",
				extendedBenchChanges, extendedBenchReplicas),
		})
	}
	note := fmt.Sprintf("As above with the default quiet period (2s), %d changes: the figure is the quiet period plus the controller's latency.", extendedBenchDefaultChanges)
	if !immediate {
		note += " spec.updateStrategy.configChangeQuietPeriod is not in this build's CRD, so the 0s figure (the one with the 100ms target) could not be measured."
	}
	framework.RecordFigure(t, benchfmt.Figure{
		Operator: "extended", Name: "ConfigMap change -> pod template updated (default 2s quiet period)", Unit: "ms", Where: "kwok",
		Samples: defaults, Baseline: base, BaselineSamples: baseline, Note: note,
	})
}

// extendedBenchRun changes the ConfigMap of a new ExtendedStatefulSet n times (its quiet period set to
// quiet unless empty) and returns each change's latency to the template update, in ms.
func extendedBenchRun(t *testing.T, quiet string, n int) []float64 {
	t.Helper()
	ns := framework.NewNamespace(t)
	_, err := framework.Clientset.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "conf"}, Data: map[string]string{"level": "1"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	rc := watchRestarts(t, ns)
	cms := watchExtendedBenchConfigMap(t, ns)
	e := framework.NewESTS("web", extendedBenchReplicas)
	pod := &e.Spec.Template.Spec.Template.Spec
	pod.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "conf"}}}}
	u := toUnstructured(t, e)
	if quiet != "" {
		require.NoError(t, unstructured.SetNestedField(u.Object, quiet, extendedBenchQuietField...))
	}
	_, err = framework.ESTSClient(ns).Create(t.Context(), u, metav1.CreateOptions{})
	require.NoError(t, err)
	waitESTSReady(t, ns, "web", 1)
	framework.WaitRolled(t, ns, "web-v1")

	var out []float64
	for i := range n {
		framework.RetryOnConflict(t, func() error {
			cm, err := framework.Clientset.CoreV1().ConfigMaps(ns).Get(t.Context(), "conf", metav1.GetOptions{})
			if err != nil {
				return err
			}
			cm.Data["level"] = fmt.Sprint(i + 2)
			_, err = framework.Clientset.CoreV1().ConfigMaps(ns).Update(t.Context(), cm, metav1.UpdateOptions{})
			return err
		})
		require.Eventually(t, func() bool { return !rc.rollTime("web-v1", i+1).IsZero() && !cms.changedAt(i+1).IsZero() },
			framework.Timeout, 10*time.Millisecond, "roll %d of web-v1", i+1)
		out = append(out, framework.LeaseBenchMillis(rc.rollTime("web-v1", i+1).Sub(cms.changedAt(i+1))))
		framework.WaitRolled(t, ns, "web-v1")
	}
	spurious, forced := rc.spurious("web-v1", extendedBenchReplicas, n, 0)
	t.Logf("invariant checker (quiet period %q): %d config rolls for %d data changes, %d spurious restarts (%d pods force-deleted by the kwok simulator left out)",
		quiet, rc.rollCount("web-v1"), n, spurious, forced)
	if !assert.Zero(t, spurious, "spurious restarts") {
		t.Logf("pods of web-v1: %s", strings.Join(rc.pods("web-v1"), "; "))
	}
	return out
}

// extendedBenchHasQuietField reports whether the installed ExtendedStatefulSet CRD has
// spec.updateStrategy.configChangeQuietPeriod.
func extendedBenchHasQuietField(t *testing.T) bool {
	t.Helper()
	crds := dynamic.NewForConfigOrDie(framework.RESTConfig).Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	crd, err := crds.Get(t.Context(), framework.ExtendedGVR.Resource+"."+framework.ExtendedGVR.Group, metav1.GetOptions{})
	require.NoError(t, err)
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range versions {
		m, _ := v.(map[string]any)
		path := []string{"schema", "openAPIV3Schema"}
		for _, f := range extendedBenchQuietField {
			path = append(path, "properties", f)
		}
		if _, found, _ := unstructured.NestedMap(m, path...); found {
			return true
		}
	}
	t.Logf("the ExtendedStatefulSet CRD has no %v: measuring the default quiet period only", extendedBenchQuietField)
	return false
}

// extendedBenchConfigMap timestamps the watch events of the ConfigMap "conf" whose data changed.
type extendedBenchConfigMap struct {
	mu      sync.Mutex
	changes []time.Time
}

func watchExtendedBenchConfigMap(t *testing.T, ns string) *extendedBenchConfigMap {
	t.Helper()
	w, err := framework.Clientset.CoreV1().ConfigMaps(ns).Watch(t.Context(), metav1.ListOptions{FieldSelector: "metadata.name=conf"})
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	m := &extendedBenchConfigMap{}
	go func() {
		last := ""
		for ev := range w.ResultChan() {
			cm, ok := ev.Object.(*corev1.ConfigMap)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			now, data := time.Now(), fmt.Sprint(cm.Data)
			m.mu.Lock()
			if last != "" && data != last {
				m.changes = append(m.changes, now)
			}
			last = data
			m.mu.Unlock()
		}
	}()
	return m
}

// changedAt is when the n-th (1-based) data change was seen; zero before.
func (m *extendedBenchConfigMap) changedAt(n int) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.changes) < n {
		return time.Time{}
	}
	return m.changes[n-1]
}

// extendedBenchTemplate records the watch events of a namespace's StatefulSet template changes
// (generation bumps) and pod deletions, in order.
type extendedBenchTemplate struct {
	mu        sync.Mutex
	templates []time.Time
	deletions []time.Time
}

func watchExtendedBenchTemplate(t *testing.T, ns string) *extendedBenchTemplate {
	t.Helper()
	sw, err := framework.Clientset.AppsV1().StatefulSets(ns).Watch(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	pw, err := framework.Clientset.CoreV1().Pods(ns).Watch(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { sw.Stop(); pw.Stop() })
	m := &extendedBenchTemplate{}
	go func() {
		last := ""
		for ev := range sw.ResultChan() {
			sts, ok := ev.Object.(*appsv1.StatefulSet)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			now, rev := time.Now(), sts.Spec.Template.Annotations["e2e/rev"]
			m.mu.Lock()
			if rev != last && rev != "" {
				m.templates = append(m.templates, now)
			}
			last = rev
			m.mu.Unlock()
		}
	}()
	go func() {
		deleting := map[string]bool{}
		for ev := range pw.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok || deleting[string(pod.UID)] || (ev.Type != watch.Deleted && pod.DeletionTimestamp == nil) {
				continue
			}
			deleting[string(pod.UID)] = true
			m.mu.Lock()
			m.deletions = append(m.deletions, time.Now())
			m.mu.Unlock()
		}
	}()
	return m
}

// templateToDeletion returns when the n-th (1-based) template change was seen and the first pod
// deletion seen after it (zero until then).
func (m *extendedBenchTemplate) templateToDeletion(n int) (changed, deleted time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.templates) < n {
		return changed, deleted
	}
	changed = m.templates[n-1]
	if i := slices.IndexFunc(m.deletions, func(d time.Time) bool { return d.After(changed) }); i >= 0 {
		deleted = m.deletions[i]
	}
	return changed, deleted
}

func toUnstructured(t *testing.T, obj runtime.Object) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	require.NoError(t, err)
	u := &unstructured.Unstructured{Object: m}
	unstructured.RemoveNestedField(u.Object, "status")
	return u
}
