//go:build e2e

package extended

import (
	"context"
	"fmt"
	"maps"
	"math/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/statefulops/statefulops/e2e/framework"
)

// TestChaosExtended is the extended-operator campaign: config churn on the ConfigMap and Secret that
// 3-replica ExtendedStatefulSets reference, each in a namespace of its own (framework.ParallelRounds)
// — data changes (alone or in bursts), rewrites of the same data and metadata-only updates — while
// the operator is SIGKILLed and restarted or upgraded, its API requests fail at random
// (apiFaultProxy), pods are force-deleted, kwok nodes go NotReady and the API server restarts between
// two rounds. The checker is TestExtended's watchRestarts: config rolls beyond the data changes made,
// and pods that ran beyond those rolls (force-deleted pods left out, as their replacements take their
// place), are spurious restarts. Operations: config changes.
func TestChaosExtended(t *testing.T) {
	c := framework.NewCampaign(t, "extended", "ConfigMap/Secret churn (data changes, bursts, same-data and metadata-only updates) under operator kills and upgrades, API errors, force deletes, NotReady nodes and API-server restarts",
		"spurious restarts (rolls or pod runs without a data change)")
	proxy := framework.StartAPIFaultProxy(t, c.Rand("proxy"))
	op := framework.StartChaosOperator(t, "extended-operator", proxy)
	var lanes framework.LaneNamespaces
	forced := &forcedPods{uids: map[string]bool{}}

	c.Schedule("operator-kill", 10*time.Second, 30*time.Second, c.KillAndRestart(op))
	c.Schedule("operator-upgrade", 20*time.Second, 60*time.Second, c.UpgradeAndRestart(op))
	c.Schedule("api-errors", 2*time.Second, 6*time.Second, c.APIErrorBursts(proxy, 4*time.Second))
	c.Schedule("pod-force-delete", 3*time.Second, 10*time.Second, lanes.AtRandom(func(ns string) func(context.Context, *rand.Rand) error {
		return c.ForceDeletePod(ns, "app=web", forced.add)
	}))
	c.Schedule("node-notready", 15*time.Second, 35*time.Second, c.FlipNode(8*time.Second))

	violations := c.ParallelRounds(t, c.N(8), "config", func(t *testing.T, c *framework.Campaign, rng *rand.Rand, n int) int {
		return chaosConfigChanges(t, c, &lanes, forced, rng, n)
	})
	c.RecordProxyFaults(proxy)
	c.Finish(violations)
}

// forcedPods is the UIDs of the pods the campaign force-deleted while they ran: their replacements
// are restarts the campaign caused, not spurious ones.
type forcedPods struct {
	mu   sync.Mutex
	uids map[string]bool
}

func (f *forcedPods) add(pod *corev1.Pod) {
	if pod.DeletionTimestamp != nil {
		return // already on its way out: its replacement was coming anyway
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.uids[string(pod.UID)] = true
}

func (f *forcedPods) snapshot() map[string]bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.uids)
}

// chaosConfigChanges is one lane of TestChaosExtended: an ExtendedStatefulSet with its ConfigMap and
// Secret in a namespace of its own, n config changes, each followed by its roll (or by the quiet
// period when it must not roll); it returns the spurious restarts its checker counted.
func chaosConfigChanges(t *testing.T, c *framework.Campaign, lanes *framework.LaneNamespaces, forced *forcedPods, rng *rand.Rand, n int) int {
	ns := framework.NewNamespace(t)
	createConfAndCreds(t, ns, "0", "0")
	rc := watchRestarts(t, ns)
	dd := watchDoubleDeletes(t, ns)
	e := framework.NewESTS("web", 3)
	referenceConfAndCreds(&e.Spec.Template.Spec.Template.Spec)
	createESTS(t, ns, e)
	waitESTSReadyWithin(t, ns, "web", 1, framework.ChaosLiveness)
	framework.WaitRolledWithin(t, ns, "web-v1", framework.ChaosLiveness)
	lanes.Join(ns)

	changes := 0
	version, level := 0, "0" // level: the ConfigMap's current value
	for i := range n {
		if c.TimeUp() {
			break
		}
		before := rc.rollCount("web-v1")
		data := 0
		switch r := rng.Intn(10); {
		case r < 4: // one ConfigMap data change
			version++
			level = fmt.Sprint(version)
			updateConfigData(t, ns, level, nil)
			data = 1
		case r < 6: // a burst of data changes, within the operator's quiet period: at most that many rolls
			for range 2 + rng.Intn(3) {
				version++
				level = fmt.Sprint(version)
				updateConfigData(t, ns, level, nil)
				data++
			}
		case r < 7: // a Secret data change
			version++
			updateSecretData(t, ns, fmt.Sprint(version))
			data = 1
		case r < 9: // the same data written again, with new labels: must not roll
			updateConfigData(t, ns, level, map[string]string{"touched": fmt.Sprint(i)})
		default: // metadata-only change of the Secret: must not roll
			framework.RetryOnConflict(t, func() error {
				s, err := framework.Clientset.CoreV1().Secrets(ns).Get(t.Context(), "creds", metav1.GetOptions{})
				if err != nil {
					return err
				}
				s.Annotations = map[string]string{"touched": fmt.Sprint(i)}
				_, err = framework.Clientset.CoreV1().Secrets(ns).Update(t.Context(), s, metav1.UpdateOptions{})
				return err
			})
		}
		changes += data
		if data > 0 {
			require.Eventually(t, func() bool { return rc.rollCount("web-v1") > before }, framework.ChaosLiveness, 20*time.Millisecond, "a roll after change %d", i)
		} else {
			// No roll is expected; give the operator its quiet period to (wrongly) make one.
			framework.SleepRandom(rng, 2500*time.Millisecond, 3500*time.Millisecond)
		}
		framework.WaitRolledWithin(t, ns, "web-v1", framework.ChaosLiveness)
		c.Op(1)
	}
	lanes.Leave(ns) // no more force deletes here: what the checker counts below is final
	framework.WaitRolledWithin(t, ns, "web-v1", framework.ChaosLiveness)
	planned := plannedRestarts(rc, "web-v1", forced.snapshot(), dd)
	s, left := rc.spurious("web-v1", 3, changes, planned)
	t.Logf("chaos extended %s: %d rolls for %d data changes, %d spurious restarts (%d restarts caused by force deletes of running pods; %d force-deleted pods left out)",
		ns, rc.rollCount("web-v1"), changes, s, planned, left)
	if s > 0 {
		t.Logf("pods of web-v1: %s", strings.Join(rc.pods("web-v1"), "; "))
	}
	return s
}

// updateConfigData writes level=value into the ConfigMap "conf" (and the labels, when given).
func updateConfigData(t *testing.T, ns, value string, labels map[string]string) {
	t.Helper()
	framework.RetryOnConflict(t, func() error {
		cm, err := framework.Clientset.CoreV1().ConfigMaps(ns).Get(t.Context(), "conf", metav1.GetOptions{})
		if err != nil {
			return err
		}
		cm.Data["level"] = value
		if labels != nil {
			cm.Labels = labels
		}
		_, err = framework.Clientset.CoreV1().ConfigMaps(ns).Update(t.Context(), cm, metav1.UpdateOptions{})
		return err
	})
}

// updateSecretData writes password=value into the Secret "creds".
func updateSecretData(t *testing.T, ns, value string) {
	t.Helper()
	framework.RetryOnConflict(t, func() error {
		s, err := framework.Clientset.CoreV1().Secrets(ns).Get(t.Context(), "creds", metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Data["password"] = []byte(value)
		_, err = framework.Clientset.CoreV1().Secrets(ns).Update(t.Context(), s, metav1.UpdateOptions{})
		return err
	})
}

// plannedRestarts counts the pods of sts the checker saw run whose replacement runs because of the
// campaign or the simulator, not the operator: pods the campaign force-deleted while they ran, and
// pods kwok's pod-delete stage removed by mistake (see doubleDeletes); pods the checker already left
// out as force-deleted are not counted twice.
func plannedRestarts(rc *restartChecker, sts string, forced map[string]bool, dd []*doubleDeletes) int {
	uids := map[string]bool{}
	for uid := range forced {
		uids[uid] = true
	}
	for _, d := range dd {
		for _, uid := range d.confirmed() {
			uids[uid] = true
		}
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	n := 0
	for uid := range uids {
		if rc.ran[sts][uid] && !rc.forced[sts][uid] {
			n++
		}
	}
	return n
}

// doubleDeletes recognises the known leftover of kwok's pod-delete stage: it deletes by name with grace
// period 0 and no UID precondition, and a late second run removes the brand-new pod of the same name
// that the StatefulSet controller made. Two signatures, either one makes a victim:
//   - the pod vanished without a graceful phase (no watch event ever showed its deletionTimestamp).
//     Nothing else here deletes pods with grace 0 except the campaign's own force deletes (counted
//     apart): the StatefulSet controller and the operator delete gracefully, and kwok finishes those.
//     On a loaded machine kwok's second runs come seconds late, so the window below misses them;
//   - its deletion started within doubleDeleteWindow of its creation, and it was created within
//     doubleDeleteWindow after a pod of the same name was removed.
//
// The StatefulSet controller then creates the pod once more.
type doubleDeletes struct {
	mu       sync.Mutex
	gone     map[string]time.Time // pod name -> when its last UID was removed
	created  map[string]time.Time // UID -> first seen
	after    map[string]bool      // UID created right after a same-name pod was removed
	graceful map[string]bool      // UIDs seen with a deletionTimestamp
	victims  map[string]bool      // UIDs deleted by the simulator's second run
	byName   map[string][]string  // pod name -> UIDs in the order seen
	rev      map[string]string    // UID -> controller-revision-hash
}

// confirmed returns the victims whose successor (the next pod of the same name) has the same
// revision: the StatefulSet merely created the same pod again. A young pod deleted for a roll is
// replaced by one of a newer revision, and is not a victim.
func (d *doubleDeletes) confirmed() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for _, uids := range d.byName {
		for i := 0; i+1 < len(uids); i++ {
			if d.victims[uids[i]] && d.rev[uids[i]] == d.rev[uids[i+1]] {
				out = append(out, uids[i])
			}
		}
	}
	return out
}

const doubleDeleteWindow = 2 * time.Second

// watchDoubleDeletes starts the recogniser for the pods of ns (in a slice, to append to).
func watchDoubleDeletes(t *testing.T, ns string) []*doubleDeletes {
	t.Helper()
	d := &doubleDeletes{gone: map[string]time.Time{}, created: map[string]time.Time{}, after: map[string]bool{}, graceful: map[string]bool{},
		victims: map[string]bool{}, byName: map[string][]string{}, rev: map[string]string{}}
	w, err := framework.Clientset.CoreV1().Pods(ns).Watch(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	go func() {
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			now, uid := time.Now(), string(pod.UID)
			d.mu.Lock()
			if _, seen := d.created[uid]; !seen {
				d.created[uid] = now
				d.byName[pod.Name] = append(d.byName[pod.Name], uid)
				d.rev[uid] = pod.Labels[appsv1.ControllerRevisionHashLabelKey]
				gone, ok := d.gone[pod.Name]
				d.after[uid] = ok && now.Sub(gone) < doubleDeleteWindow
			}
			if (pod.DeletionTimestamp != nil || ev.Type == watch.Deleted) && d.after[uid] && now.Sub(d.created[uid]) < doubleDeleteWindow {
				d.victims[uid] = true
			}
			if pod.DeletionTimestamp != nil && ev.Type != watch.Deleted {
				d.graceful[uid] = true
			}
			if ev.Type == watch.Deleted {
				if !d.graceful[uid] {
					d.victims[uid] = true // grace 0: kwok's stray delete, or a campaign force delete (counted anyway)
				}
				d.gone[pod.Name] = now
			}
			d.mu.Unlock()
		}
	}()
	return []*doubleDeletes{d}
}
