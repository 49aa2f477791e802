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
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	// The only pods left out: those the campaign force-deleted while they ran (their replacements run
	// in their place). No simulator exclusion: see restartChecker.
	rc.excuse(forced.snapshot())
	s, left := rc.spurious("web-v1", 3, changes, 0)
	t.Logf("chaos extended %s: %d rolls for %d data changes, %d spurious restarts (%d pods force-deleted by the campaign while running left out)",
		ns, rc.rollCount("web-v1"), changes, s, left)
	c.Tally("pods not counted: force-deleted by the campaign while running (their replacements run in their place)", left)
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
