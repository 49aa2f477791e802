//go:build e2e

package platform

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/statefulops/statefulops/e2e/framework"
	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
)

// TestPluginVerbs runs the verbs of `kubectl statefulops` (rollout, lease switchover, cluster
// retire) as a user does, through kubectl's plugin lookup, against the installed operators (as
// local processes when the cluster has no real node to run them), one namespace per verb group, in
// parallel. Each checks the verb's confirmation against
// a golden text (times and generated names normalised) or its key lines, and a refusal. The
// singleton's fence-release needs the webhook, so it is in e2e/singleton (plugin_test.go).
func TestPluginVerbs(t *testing.T) {
	// The lease-operator first: the rollout-operator waits for the StatefulSetLock kind (it hands a
	// lock's writer over before rolling its pod).
	operators := []string{"lease-operator", "rollout-operator", "cluster-operator"}
	if onRealNode, err := framework.RealNodeReady(t.Context()); err == nil && onRealNode {
		// The installed operators run for real there: use them as a user would, and spare the
		// parking and restoring of their Deployments.
		framework.Install(t)
		for _, op := range operators {
			_, err := framework.Kubectl().Run(t.Context(), "rollout", "status", "-n", op+"-system", "deployment/"+op+"-controller-manager", "--timeout=240s")
			require.NoError(t, err)
		}
	} else {
		// Without the real node the installed operators are kwok's pretend pods: run them locally.
		for _, op := range operators {
			framework.StartLocalOperator(t, op)
		}
	}
	t.Run("rollout", func(t *testing.T) {
		t.Parallel()
		pluginRollout(t)
	})
	t.Run("lease switchover", func(t *testing.T) {
		t.Parallel()
		pluginSwitchover(t)
	})
	t.Run("cluster retire", func(t *testing.T) {
		t.Parallel()
		pluginRetire(t)
	})
}

// plugin runs the plugin in ns, logs its output (the docs quote these runs) and fails on an error.
func plugin(t *testing.T, ns string, args ...string) string {
	t.Helper()
	out, err := framework.Plugin(t.Context(), append(args, "-n", ns)...)
	t.Logf("$ kubectl statefulops %s\n%s", strings.Join(args, " "), out)
	require.NoError(t, err)
	return out
}

// pluginRefused runs the plugin expecting a refusal whose message contains want.
func pluginRefused(t *testing.T, ns, want string, args ...string) {
	t.Helper()
	out, err := framework.Plugin(t.Context(), append(args, "-n", ns)...)
	require.Error(t, err, "kubectl statefulops %v: %s", args, out)
	t.Logf("$ kubectl statefulops %s\n%v", strings.Join(args, " "), err)
	assert.Contains(t, err.Error(), want)
}

// elapsed matches the durations the verbs print.
var elapsed = regexp.MustCompile(`after [0-9.]+(ms|s|m[0-9.]*s)`)

func normalise(out string) string { return elapsed.ReplaceAllString(out, "after <elapsed>") }

// pluginRollout: a rollout of three pods whose first step waits out a long initial delay (no
// check ever runs), so each control's effect is the operator's alone: pause holds it, resume lets it
// go on, promote passes the step (partition 2 → 1), abort stops it, resume after the abort (template
// not reverted) continues.
func pluginRollout(t *testing.T) {
	ns := framework.NewNamespace(t)
	framework.RolloutStatefulSet(t, ns, "web", 3, 0)
	pr := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "sts.plus/v1alpha1", "kind": "PhasedRollout",
		"metadata": map[string]any{"name": "web", "namespace": ns},
		"spec": map[string]any{"targetRef": "web", "check": map[string]any{
			"initialDelaySeconds": int64(600), "periodSeconds": int64(30), "successThreshold": int64(1),
			"query": map[string]any{"expr": `up{pod="{{pod}}"} == 0`, "url": "127.0.0.1:9"},
		}},
	}}
	require.NoError(t, framework.Client.Create(t.Context(), pr))
	waitRollout(t, ns, func(pr *rolloutv1alpha1.PhasedRollout) bool { return pr.Status.Phase == rolloutv1alpha1.PhaseUpdated })
	pluginRefused(t, ns, "phasedrollout/web has no rollout under way (phase Updated): nothing to promote", "rollout", "promote", "web")

	framework.BumpTemplate(t, ns, "web", "2")
	waitRollout(t, ns, func(pr *rolloutv1alpha1.PhasedRollout) bool {
		s := pr.Status.RollingPodStatus
		return pr.Status.Phase == rolloutv1alpha1.PhaseRolling && s != nil && s.Status == rolloutv1alpha1.StepWaitForInitialDelay
	})

	var got []string
	got = append(got, plugin(t, ns, "rollout", "pause", "web"))
	pluginRefused(t, ns, "phasedrollout/web is already paused", "rollout", "pause", "web")
	got = append(got, plugin(t, ns, "rollout", "resume", "web"))
	got = append(got, plugin(t, ns, "rollout", "promote", "web"))
	got = append(got, plugin(t, ns, "rollout", "abort", "web"))
	got = append(got, plugin(t, ns, "rollout", "resume", "web"))
	// The first step holds the partition at 3 before web-2 is rolled (its initial delay counts from
	// then); promote passes it and web-2 rolls. Where the next step is by the time a command reads the
	// status depends on kwok's pace: its state is normalised after the first resume, which is always
	// still in the initial delay.
	assert.Contains(t, got[1], "step WaitForInitialDelay at pod web-2")
	assert.Equal(t, `phasedrollout/web paused after <elapsed>: phase Paused, partition of statefulset/web held at 3
phasedrollout/web resumed after <elapsed>: phase Rolling, step <state> at pod web-2, partition of statefulset/web at 3
phasedrollout/web promoted after <elapsed>: the step at partition 3 passed, partition of statefulset/web now 2, phase Rolling, step <state> at pod web-2
phasedrollout/web aborted after <elapsed>: partition of statefulset/web kept at 2, pods already rolled stay on the new revision
to go back: kubectl rollout undo statefulset/web, then kubectl statefulops rollout resume web
phasedrollout/web resumed after <elapsed>: phase Rolling, step <state> at pod web-2, partition of statefulset/web at 2
`, stepState.ReplaceAllString(normalise(strings.Join(got, "")), "step <state> at"))
}

// stepState matches the step state in a rollout verb's confirmation.
var stepState = regexp.MustCompile(`step [A-Za-z]+ at`)

func waitRollout(t *testing.T, ns string, ok func(*rolloutv1alpha1.PhasedRollout) bool) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		pr := &rolloutv1alpha1.PhasedRollout{}
		require.NoError(c, framework.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "web"}, pr))
		assert.True(c, ok(pr), "phase %s, step %+v", pr.Status.Phase, pr.Status.RollingPodStatus)
	}, framework.Timeout, framework.Tick)
}

// pluginSwitchover: a lock elects a writer among three Ready pods; the switchover moves it to
// another one, by the operator's demote-then-promote, with the epoch one up.
func pluginSwitchover(t *testing.T) {
	ns := framework.NewNamespace(t)
	framework.RolloutStatefulSet(t, ns, "db", 3, 0)
	lock := &leasev1.StatefulSetLock{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-lock"},
		Spec:       leasev1.StatefulSetLockSpec{StatefulSetName: "db", LeaseName: "db-lock", LeaseDurationSeconds: 15},
	}
	require.NoError(t, framework.Client.Create(t.Context(), lock))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, framework.Client.Get(t.Context(), client.ObjectKeyFromObject(lock), lock))
		assert.NotEmpty(c, lock.Status.WriterPod)
	}, framework.Timeout, framework.Tick, "a writer elected")
	writer, epoch := lock.Status.WriterPod, lock.Status.LeaseTransitions
	target := "db-2"
	if writer == target {
		target = "db-1"
	}
	stray := framework.TestPod("stray")
	framework.CreatePod(t, ns, stray)

	pluginRefused(t, ns, "cannot switch over to pod stray: it is not a pod of statefulset/db, the lock's StatefulSet", "lease", "switchover", "db-lock", "--to", "stray")
	pluginRefused(t, ns, "pod "+writer+" is already the writer", "lease", "switchover", "db-lock", "--to", writer)
	out := plugin(t, ns, "lease", "switchover", "db-lock", "--to", target)
	assert.Regexp(t, `^statefulsetlock/db-lock: writer `+writer+` → `+target+` after [0-9.]+m?s\n`+
		`epoch `+itoa(epoch)+` → `+itoa(epoch+1)+` \(pod annotation app.anukkrit.me/writer-epoch\), reason Switchover\n$`, out)
	require.NoError(t, framework.Client.Get(t.Context(), client.ObjectKeyFromObject(lock), lock))
	assert.Equal(t, target, lock.Status.WriterPod)
	pod := framework.GetPod(t, ns, target)
	assert.Equal(t, leasev1.RoleWriter, pod.Labels[leasev1.RoleLabel], "the new writer is labelled")
}

func itoa(i int32) string { return strconv.Itoa(int(i)) }

// pluginRetire: a two-pod StatefulCluster; retiring coder-1 deletes it, the ledger records it
// (reason Deleted) and coder-2, a new identity, replaces it.
func pluginRetire(t *testing.T) {
	ns := framework.NewNamespace(t)
	sc := framework.NewStatefulCluster("coder", 2)
	sc.Namespace = ns
	require.NoError(t, framework.Client.Create(t.Context(), sc))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, framework.Client.Get(t.Context(), client.ObjectKeyFromObject(sc), sc))
		assert.Equal(c, int32(2), sc.Status.ReadyReplicas)
	}, framework.Timeout, framework.Tick, "coder-0 and coder-1 Ready")
	stray := framework.TestPod("coder-9")
	stray.Labels[clusterv1alpha1.ClusterNameLabel] = "coder"
	framework.CreatePod(t, ns, stray)

	pluginRefused(t, ns, "pod coder-9 is not a member of statefulcluster/coder (no controller): refusing to delete it", "cluster", "retire", "coder", "coder-9")
	out := plugin(t, ns, "cluster", "retire", "coder", "coder-1")
	assert.Equal(t, `statefulcluster/coder: identity coder-1 retired after <elapsed> (reason Deleted: pod deleted by someone else; no claims)
replacement: pod coder-2, a new identity (status.nextIdentity 3); coder-1 is never used again
`, normalise(out))
	assert.False(t, framework.PodGone(t, ns, "coder-9"), "the stray pod is left alone")
	if pod, err := framework.FetchPod(t, ns, "coder-1"); err == nil {
		assert.NotNil(t, pod.DeletionTimestamp, "coder-1 is gone or terminating")
	}
}
