//go:build integration

package controller

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

// startOperatorWithCaches is startOperator, also returning the operator's namespaceCaches (to look into
// the caches of the pods the manager's cache leaves out).
func startOperatorWithCaches(t *testing.T) *namespaceCaches {
	t.Helper()
	var caches *namespaceCaches
	onNewCaches = func(n *namespaceCaches) { caches = n }
	defer func() { onNewCaches = nil }()
	startOperator(t, nil)
	require.NotNil(t, caches)
	return caches
}

// cachedPodNames lists, per running selector cache of namespace, the names of the pods it holds.
func (n *namespaceCaches) cachedPodNames(ctx context.Context, namespace string) (map[string][]string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	got := map[string][]string{}
	for key, sc := range n.caches {
		if sc.namespace != namespace || key == namespace { // the ranking cache holds no pods
			continue
		}
		var pods corev1.PodList
		if err := sc.cache.List(ctx, &pods); err != nil {
			return nil, err
		}
		names := []string{}
		for i := range pods.Items {
			names = append(names, pods.Items[i].Name)
		}
		got[key] = names
	}
	return got, nil
}

// The pods the manager's cache leaves out come from one cache per StatefulSingleton selector, which
// holds only the pods of that selector without the managed label: a pod admitted around the webhook is
// seen by its singleton (reported, deleted while another pod is active — TestUngatedPodReportedAndDeleted
// covers that behaviour; here it shows the pod reached the controller), an unrelated pod of the same
// namespace is in no cache, and a selector's cache stops with the last StatefulSingleton using it.
func TestUnmanagedPodsCachedPerSelector(t *testing.T) {
	f := newFixture(t)
	watchOverlaps(t, f.ns)
	caches := startOperatorWithCaches(t)
	web := func(ss *singletonv1.StatefulSingleton) {
		ss.Spec.Selector = metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	}
	f.createSingleton("db") // app=db
	f.createSingleton("web", web)
	f.createPod("active", held(singletonv1.HoldModeWrapper))
	f.waitReleased("active")

	// Beside the singletons: an unrelated pod (no singleton selects it), and one pod admitted around the
	// webhook per singleton. web's is its only pod and not yet scheduled: it waits to be adopted.
	f.createPod("unrelated", func(p *corev1.Pod) { p.Labels = map[string]string{"app": "other"} })
	f.createPod("web-rogue", func(p *corev1.Pod) { p.Labels["app"] = "web" }, onNode(""))
	f.createPod("rogue")
	f.waitCondition("db", singletonv1.ConditionUngatedPod, metav1.ConditionTrue)
	f.waitCondition("web", singletonv1.ConditionUngatedPod, metav1.ConditionTrue)
	require.Eventually(t, func() bool { return !f.pod("rogue").DeletionTimestamp.IsZero() }, wait, tick,
		"the ungated pod of db deleted while db's pod is active")
	assert.False(t, f.released("rogue"))
	assert.False(t, f.released("web-rogue"))

	dbKey, webKey := f.ns+"/app=db", f.ns+"/app=web"
	assert.Equal(t, []string{f.ns, dbKey, webKey}, caches.keys(f.ns), "one cache per selector and the namespace's ranking cache")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		cached, err := caches.cachedPodNames(t.Context(), f.ns)
		require.NoError(c, err)
		assert.Equal(c, map[string][]string{dbKey: {"rogue"}, webKey: {"web-rogue"}}, cached,
			"each selector cache holds its selector's unmanaged pods only: not the managed pod, not the unrelated one")
	}, wait, tick)

	// db goes, web stays: db's selector cache stops, web's and the ranking cache stay, and so does the
	// namespace label.
	require.NoError(t, suite.Client.Delete(t.Context(), f.singleton("db")))
	require.Eventually(t, func() bool { return f.singletonGone("db") }, wait, tick, "db deleted")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, []string{f.ns, webKey}, caches.keys(f.ns))
	}, wait, tick, "db's selector cache stopped")
	assert.Equal(t, "true", f.namespaceLabel(), "web still needs the webhook")

	// The last one goes: so do the caches of the namespace and its label.
	require.NoError(t, suite.Client.Delete(t.Context(), f.singleton("web")))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Empty(c, caches.keys(f.ns))
		assert.Empty(c, f.namespaceLabel())
	}, wait, tick, "every cache of the namespace stopped, label removed")
}
