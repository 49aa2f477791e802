package verbs

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/statefulops/statefulops/kubectl-statefulops/internal/kube"
	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

const ns = "shop"

// newFake is a fake API server holding objs, with the status subresource of the statefulops kinds
// (the operators write status through it, as on a real cluster).
func newFake(funcs *interceptor.Funcs, objs ...client.Object) client.WithWatch {
	b := fake.NewClientBuilder().WithScheme(kube.Scheme).WithObjects(objs...).
		WithStatusSubresource(&rolloutv1alpha1.PhasedRollout{}, &leasev1.StatefulSetLock{}, &singletonv1.StatefulSingleton{}, &clusterv1alpha1.StatefulCluster{})
	if funcs != nil {
		b = b.WithInterceptorFuncs(*funcs)
	}
	return b.Build()
}

// run runs `kubectl statefulops ARGS` on c with stdin, returning stdout, stderr and the error.
func run(t *testing.T, c client.WithWatch, stdin string, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	streams := genericiooptions.IOStreams{In: strings.NewReader(stdin), Out: &out, ErrOut: &errOut}
	root := &cobra.Command{Use: "kubectl-statefulops", SilenceUsage: true, SilenceErrors: true}
	// Fast polls, so the tests' fake operators are seen at once.
	e := &env{connect: func() (*kube.Clients, error) { return &kube.Clients{Client: c, Namespace: ns}, nil },
		streams: streams, now: time.Now, poll: 5 * time.Millisecond}
	root.AddCommand(e.commands()...)
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&errOut)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err := root.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

// operator runs step every few milliseconds until it returns true or the test ends: a stand-in for
// the operator, which acts on what the command wrote.
func operator(t *testing.T, step func(ctx context.Context) bool) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil && !step(ctx) {
			time.Sleep(2 * time.Millisecond)
		}
	}()
}

func key(name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }

func mustGet(t *testing.T, c client.Client, name string, obj client.Object) {
	t.Helper()
	if err := c.Get(t.Context(), key(name), obj); err != nil {
		t.Fatal(err)
	}
}

func wantErr(t *testing.T, err error, contains string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), contains) {
		t.Fatalf("error %v, want one containing %q", err, contains)
	}
}

func wantLines(t *testing.T, out string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(out, l) {
			t.Errorf("output lacks %q:\n%s", l, out)
		}
	}
}

// --- rollout

func phasedRollout(phase rolloutv1alpha1.PhasedRolloutPhase, paused bool, annotations map[string]string) *rolloutv1alpha1.PhasedRollout {
	return &rolloutv1alpha1.PhasedRollout{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", Generation: 1, Annotations: annotations},
		Spec:       rolloutv1alpha1.PhasedRolloutSpec{TargetRef: "web", Paused: paused},
		Status: rolloutv1alpha1.PhasedRolloutStatus{Phase: phase, ObservedGeneration: 1,
			RollingPodStatus: &rolloutv1alpha1.RollingPodStatus{Status: rolloutv1alpha1.StepWaitForChecks, Pod: "web-2", Partition: ptr.To[int32](2)}},
	}
}

func statefulSet(partition int32) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](3), UpdateStrategy: appsv1.StatefulSetUpdateStrategy{
			Type: appsv1.RollingUpdateStatefulSetStrategyType, RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To(partition)}}},
	}
}

// TestRolloutRefusals: each control refuses a state it cannot act on, with a message naming the
// state, and writes nothing.
func TestRolloutRefusals(t *testing.T) {
	abort := map[string]string{rolloutv1alpha1.AbortAnnotation: "true"}
	for _, tc := range []struct {
		name string
		pr   *rolloutv1alpha1.PhasedRollout
		args []string
		want string
	}{
		{"pause paused", phasedRollout(rolloutv1alpha1.PhasePaused, true, nil), []string{"pause", "web"}, "already paused"},
		{"resume running", phasedRollout(rolloutv1alpha1.PhaseRolling, false, nil), []string{"resume", "web"}, "neither paused nor aborted (phase Rolling)"},
		{"promote idle", phasedRollout(rolloutv1alpha1.PhaseUpdated, false, nil), []string{"promote", "web"}, "no rollout under way (phase Updated)"},
		{"promote pending", phasedRollout(rolloutv1alpha1.PhaseRolling, false, map[string]string{rolloutv1alpha1.PromoteAnnotation: "x"}), []string{"promote", "web"}, "already has a promote"},
		{"promote paused", phasedRollout(rolloutv1alpha1.PhasePaused, true, nil), []string{"promote", "web"}, "is paused: a promote would wait"},
		{"promote aborted", phasedRollout(rolloutv1alpha1.PhaseAborted, false, abort), []string{"promote", "web"}, "is aborted: a promote would wait"},
		{"abort idle", phasedRollout(rolloutv1alpha1.PhaseUpdated, false, nil), []string{"abort", "web"}, "nothing to abort"},
		{"abort aborted", phasedRollout(rolloutv1alpha1.PhaseAborted, false, abort), []string{"abort", "web"}, "already aborted"},
		{"missing", nil, []string{"pause", "db"}, `phasedrollout "db" not found in namespace "shop"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs []client.Object
			if tc.pr != nil {
				objs = append(objs, tc.pr)
			}
			c := newFake(nil, objs...)
			var before rolloutv1alpha1.PhasedRollout
			if tc.pr != nil {
				mustGet(t, c, "web", &before)
			}
			_, _, err := run(t, c, "", append([]string{"rollout"}, tc.args...)...)
			wantErr(t, err, tc.want)
			if tc.pr != nil {
				var after rolloutv1alpha1.PhasedRollout
				mustGet(t, c, "web", &after)
				if after.ResourceVersion != before.ResourceVersion {
					t.Errorf("the PhasedRollout was written: resourceVersion %s → %s", before.ResourceVersion, after.ResourceVersion)
				}
			}
		})
	}
}

// TestRolloutPause: spec.paused is set, and the command returns only once the operator has seen the
// new generation and reports Paused.
func TestRolloutPause(t *testing.T) {
	c := newFake(nil, phasedRollout(rolloutv1alpha1.PhaseRolling, false, nil), statefulSet(2))
	operator(t, func(ctx context.Context) bool {
		pr := &rolloutv1alpha1.PhasedRollout{}
		if c.Get(ctx, key("web"), pr) != nil || !pr.Spec.Paused {
			return false
		}
		pr.Status.Phase, pr.Status.ObservedGeneration = rolloutv1alpha1.PhasePaused, pr.Generation
		return c.Status().Update(ctx, pr) == nil
	})
	out, _, err := run(t, c, "", "rollout", "pause", "web")
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, out, "phasedrollout/web paused after", "phase Paused, partition of statefulset/web held at 2")
}

// TestRolloutPauseNotConfirmed: a pause the operator never shows ends in a timeout that says what
// was seen (here: still Rolling at the old generation).
func TestRolloutPauseNotConfirmed(t *testing.T) {
	c := newFake(nil, phasedRollout(rolloutv1alpha1.PhaseRolling, false, nil))
	_, _, err := run(t, c, "", "rollout", "pause", "web", "--timeout", "100ms")
	wantErr(t, err, "timed out after 100ms waiting for the operator: phase Rolling, step WaitForChecks at pod web-2")
	pr := &rolloutv1alpha1.PhasedRollout{}
	mustGet(t, c, "web", pr)
	if !pr.Spec.Paused {
		t.Error("spec.paused not written")
	}
}

// TestRolloutResumeAborted: resume of an aborted, paused rollout unpauses it and removes the abort
// annotation in one write, and waits for the phase to leave Aborted.
func TestRolloutResumeAborted(t *testing.T) {
	pr := phasedRollout(rolloutv1alpha1.PhaseAborted, true, map[string]string{rolloutv1alpha1.AbortAnnotation: "true", "keep": "me"})
	c := newFake(nil, pr, statefulSet(1))
	operator(t, func(ctx context.Context) bool {
		pr := &rolloutv1alpha1.PhasedRollout{}
		if c.Get(ctx, key("web"), pr) != nil || pr.Spec.Paused || pr.Annotations[rolloutv1alpha1.AbortAnnotation] != "" {
			return false
		}
		pr.Status.Phase, pr.Status.ObservedGeneration = rolloutv1alpha1.PhaseRolling, pr.Generation
		return c.Status().Update(ctx, pr) == nil
	})
	out, _, err := run(t, c, "", "rollout", "resume", "web")
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, out, "phasedrollout/web resumed after", "phase Rolling, step WaitForChecks at pod web-2, partition of statefulset/web at 1")
	mustGet(t, c, "web", pr)
	if pr.Annotations["keep"] != "me" {
		t.Errorf("other annotations lost: %v", pr.Annotations)
	}
}

// TestRolloutPromote: the annotation's value identifies this promotion; the command waits until the
// operator recorded it in status.promotion and removed the annotation, and prints the partition.
func TestRolloutPromote(t *testing.T) {
	c := newFake(nil, phasedRollout(rolloutv1alpha1.PhaseRolling, false, nil), statefulSet(2))
	operator(t, func(ctx context.Context) bool {
		pr := &rolloutv1alpha1.PhasedRollout{}
		if c.Get(ctx, key("web"), pr) != nil || pr.Annotations[rolloutv1alpha1.PromoteAnnotation] == "" {
			return false
		}
		pr.Status.Promotion = &rolloutv1alpha1.PromotionRecord{Value: pr.Annotations[rolloutv1alpha1.PromoteAnnotation], Partition: 2}
		if c.Status().Update(ctx, pr) != nil {
			return false
		}
		if c.Patch(ctx, statefulSet(1), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"updateStrategy":{"rollingUpdate":{"partition":1}}}}`))) != nil {
			return false
		}
		delete(pr.Annotations, rolloutv1alpha1.PromoteAnnotation)
		return c.Update(ctx, pr) == nil
	})
	out, _, err := run(t, c, "", "rollout", "promote", "web")
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, out, "phasedrollout/web promoted after", "the step at partition 2 passed, partition of statefulset/web now 1")
}

// TestRolloutPromoteSeenOnlyAfterward: the operator records the promotion, moves the partition,
// removes the annotation and drops the record, all between two polls of the command (it polls; a
// loaded machine makes that likely): the step's partition having moved still confirms the promote.
func TestRolloutPromoteSeenOnlyAfterward(t *testing.T) {
	c := newFake(nil, phasedRollout(rolloutv1alpha1.PhaseRolling, false, nil), statefulSet(2))
	operator(t, func(ctx context.Context) bool {
		pr := &rolloutv1alpha1.PhasedRollout{}
		if c.Get(ctx, key("web"), pr) != nil || pr.Annotations[rolloutv1alpha1.PromoteAnnotation] == "" {
			return false
		}
		if c.Patch(ctx, statefulSet(1), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"updateStrategy":{"rollingUpdate":{"partition":1}}}}`))) != nil {
			return false
		}
		// The status the command reads next: the next step, no promotion record (already dropped).
		pr.Status.Promotion = nil
		pr.Status.RollingPodStatus = &rolloutv1alpha1.RollingPodStatus{Status: rolloutv1alpha1.StepWaitForInitialDelay, Pod: "web-1", Partition: ptr.To[int32](1)}
		if c.Status().Update(ctx, pr) != nil {
			return false
		}
		delete(pr.Annotations, rolloutv1alpha1.PromoteAnnotation)
		return c.Update(ctx, pr) == nil
	})
	out, _, err := run(t, c, "", "rollout", "promote", "web")
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, out, "phasedrollout/web promoted after", "the step at partition 2 passed, partition of statefulset/web now 1")
}

// TestRolloutPromoteOfSomeoneElse: a promotion recorded with another value (a promote set by
// someone else earlier) is not taken for this one.
func TestRolloutPromoteOfSomeoneElse(t *testing.T) {
	pr := phasedRollout(rolloutv1alpha1.PhaseRolling, false, nil)
	pr.Status.Promotion = &rolloutv1alpha1.PromotionRecord{Value: "earlier", Partition: 3}
	c := newFake(nil, pr)
	operator(t, func(ctx context.Context) bool {
		pr := &rolloutv1alpha1.PhasedRollout{}
		if c.Get(ctx, key("web"), pr) != nil || pr.Annotations[rolloutv1alpha1.PromoteAnnotation] == "" {
			return false
		}
		delete(pr.Annotations, rolloutv1alpha1.PromoteAnnotation) // removed, but not recorded
		return c.Update(ctx, pr) == nil
	})
	_, _, err := run(t, c, "", "rollout", "promote", "web", "--timeout", "200ms")
	wantErr(t, err, "timed out")
}

// TestRolloutAbort waits for phase Aborted and says how to go back.
func TestRolloutAbort(t *testing.T) {
	c := newFake(nil, phasedRollout(rolloutv1alpha1.PhasePaused, true, nil), statefulSet(2))
	operator(t, func(ctx context.Context) bool {
		pr := &rolloutv1alpha1.PhasedRollout{}
		if c.Get(ctx, key("web"), pr) != nil || pr.Annotations[rolloutv1alpha1.AbortAnnotation] != "true" {
			return false
		}
		pr.Status.Phase = rolloutv1alpha1.PhaseAborted
		return c.Status().Update(ctx, pr) == nil
	})
	out, _, err := run(t, c, "", "rollout", "abort", "web")
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, out, "phasedrollout/web aborted after", "partition of statefulset/web kept at 2",
		"to go back: kubectl rollout undo statefulset/web, then kubectl statefulops rollout resume web")
}

// TestWriteCarriesTheResourceVersion: an object changed between the command's read and its write
// is not written on the old decision: the command reads again and decides on the new state.
func TestWriteCarriesTheResourceVersion(t *testing.T) {
	var c client.WithWatch
	raced := false
	c = newFake(&interceptor.Funcs{Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
		if !raced { // someone pauses the rollout just before our write
			raced = true
			other := &rolloutv1alpha1.PhasedRollout{}
			if err := cl.Get(ctx, client.ObjectKeyFromObject(obj), other); err != nil {
				return err
			}
			other.Annotations = map[string]string{rolloutv1alpha1.AbortAnnotation: "true"}
			if err := cl.Update(ctx, other); err != nil {
				return err
			}
		}
		return cl.Patch(ctx, obj, patch, opts...)
	}}, phasedRollout(rolloutv1alpha1.PhaseRolling, false, nil))
	_, _, err := run(t, c, "", "rollout", "promote", "web", "--wait=false")
	// The conflict makes the command read again and decide on the newer state: aborted meanwhile.
	wantErr(t, err, "phasedrollout/web is aborted: a promote would wait until it is resumed")
	pr := &rolloutv1alpha1.PhasedRollout{}
	mustGet(t, c, "web", pr)
	if _, ok := pr.Annotations[rolloutv1alpha1.PromoteAnnotation]; ok {
		t.Error("the promote was written over a newer object")
	}
}

// TestWriteRetriedAfterAStatusWrite: the operator's status writes move the resourceVersion; such a
// conflict is not an error for the user, the command reads again and writes.
func TestWriteRetriedAfterAStatusWrite(t *testing.T) {
	patches := 0
	c := newFake(&interceptor.Funcs{Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
		if patches++; patches == 1 {
			other := &rolloutv1alpha1.PhasedRollout{}
			if err := cl.Get(ctx, client.ObjectKeyFromObject(obj), other); err != nil {
				return err
			}
			other.Status.Message = "a status write"
			if err := cl.Status().Update(ctx, other); err != nil {
				return err
			}
		}
		return cl.Patch(ctx, obj, patch, opts...)
	}}, phasedRollout(rolloutv1alpha1.PhaseRolling, false, nil))
	out, _, err := run(t, c, "", "rollout", "abort", "web", "--wait=false")
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, out, "abort requested")
	if patches != 2 {
		t.Errorf("%d patches, want 2 (the first one conflicts)", patches)
	}
	pr := &rolloutv1alpha1.PhasedRollout{}
	mustGet(t, c, "web", pr)
	if pr.Annotations[rolloutv1alpha1.AbortAnnotation] != "true" || pr.Status.Message != "a status write" {
		t.Errorf("annotations %v, status message %q", pr.Annotations, pr.Status.Message)
	}
}

// TestNoWait returns right after the write.
func TestNoWait(t *testing.T) {
	c := newFake(nil, phasedRollout(rolloutv1alpha1.PhaseRolling, false, nil))
	out, _, err := run(t, c, "", "rollout", "abort", "web", "--wait=false")
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, out, "phasedrollout/web: abort requested (not waiting for the operator)")
	pr := &rolloutv1alpha1.PhasedRollout{}
	mustGet(t, c, "web", pr)
	if pr.Annotations[rolloutv1alpha1.AbortAnnotation] != "true" {
		t.Errorf("annotations %v", pr.Annotations)
	}
}

// --- lease

func readyNode(name string, ready bool) *corev1.Node {
	status := corev1.ConditionTrue
	if !ready {
		status = corev1.ConditionUnknown
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}}}
}

func stsPod(name, sts, node string, ready bool) *corev1.Pod {
	status := corev1.ConditionTrue
	if !ready {
		status = corev1.ConditionFalse
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(name + "-uid"), OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "StatefulSet", Name: sts, UID: "sts-uid", Controller: ptr.To(true)}}},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}},
	}
}

func lock() *leasev1.StatefulSetLock {
	return &leasev1.StatefulSetLock{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-lock"},
		Spec:       leasev1.StatefulSetLockSpec{StatefulSetName: "db"},
		Status:     leasev1.StatefulSetLockStatus{WriterPod: "db-0", WriterPodUID: "db-0-uid", LeaseTransitions: 1},
	}
}

// TestSwitchoverRefusals: the target must be a Ready, not terminating pod of the lock's StatefulSet
// on a Ready node, and not the writer already.
func TestSwitchoverRefusals(t *testing.T) {
	terminating := stsPod("db-3", "db", "n1", true)
	terminating.DeletionTimestamp, terminating.Finalizers = &metav1.Time{Time: time.Now()}, []string{"keep"}
	objs := []client.Object{lock(), readyNode("n1", true), readyNode("down", false),
		stsPod("db-0", "db", "n1", true), stsPod("db-1", "db", "n1", false), stsPod("db-2", "db", "down", true),
		terminating, stsPod("other-0", "other", "n1", true)}
	for _, tc := range []struct{ to, want string }{
		{"db-0", "pod db-0 is already the writer (epoch 1)"},
		{"db-1", "cannot switch over to pod db-1: it is not Ready"},
		{"db-2", "cannot switch over to pod db-2: its node down is not Ready"},
		{"db-3", "cannot switch over to pod db-3: it is terminating"},
		{"other-0", "it is not a pod of statefulset/db, the lock's StatefulSet"},
		{"db-9", `pod "db-9" not found in namespace "shop"`},
	} {
		t.Run(tc.to, func(t *testing.T) {
			c := newFake(nil, objs...)
			_, _, err := run(t, c, "", "lease", "switchover", "db-lock", "--to", tc.to)
			wantErr(t, err, tc.want)
			got := &leasev1.StatefulSetLock{}
			mustGet(t, c, "db-lock", got)
			if _, ok := got.Annotations[leasev1.SwitchoverAnnotation]; ok {
				t.Error("annotation written")
			}
		})
	}
	c := newFake(nil, objs...)
	_, _, err := run(t, c, "", "lease", "switchover", "db-lock")
	wantErr(t, err, `required flag(s) "to" not set`)
}

// TestSwitchover: the annotation names the pod; the command waits for status.writerPod and its UID
// and prints old → new writer and the epoch.
func TestSwitchover(t *testing.T) {
	c := newFake(nil, lock(), readyNode("n1", true), stsPod("db-0", "db", "n1", true), stsPod("db-2", "db", "n1", true))
	operator(t, func(ctx context.Context) bool {
		l := &leasev1.StatefulSetLock{}
		if c.Get(ctx, key("db-lock"), l) != nil || l.Annotations[leasev1.SwitchoverAnnotation] != "db-2" {
			return false
		}
		l.Status.WriterPod, l.Status.WriterPodUID, l.Status.LeaseTransitions, l.Status.LastFailoverReason = "db-2", "db-2-uid", 2, leasev1.FailoverReasonSwitchover
		return c.Status().Update(ctx, l) == nil
	})
	out, _, err := run(t, c, "", "lease", "switchover", "db-lock", "--to", "db-2")
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, out, "statefulsetlock/db-lock: writer db-0 → db-2 after", "epoch 1 → 2 (pod annotation app.anukkrit.me/writer-epoch), reason Switchover")
}

// --- singleton

func fencedSingleton() *singletonv1.StatefulSingleton {
	return &singletonv1.StatefulSingleton{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Status: singletonv1.StatefulSingletonStatus{Phase: "Transitioning", ActivePod: "app-a", ActivePodUID: "a-uid", ActivePodNode: "down", Epoch: 1,
			Conditions: []metav1.Condition{{Type: singletonv1.ConditionFencingRequired, Status: metav1.ConditionTrue, Reason: singletonv1.ReasonNodeNotReady,
				Message: "pod app-a vanished from node down, which is not Ready"}}},
	}
}

// TestFenceReleaseRefusals: a singleton not waiting on a node, a Ready node, a node already tainted
// or a wrong confirmation: nothing is tainted.
func TestFenceReleaseRefusals(t *testing.T) {
	running := &singletonv1.StatefulSingleton{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Status: singletonv1.StatefulSingletonStatus{Phase: "Running", ActivePod: "app-a", Message: "pod app-a is running"}}
	tainted := readyNode("down", false)
	tainted.Spec.Taints = []corev1.Taint{outOfService}
	for _, tc := range []struct {
		name  string
		objs  []client.Object
		stdin string
		want  string
	}{
		{"not waiting", []client.Object{running, readyNode("down", false)}, "down\n", "is not waiting on a node (phase Running: pod app-a is running): nothing to fence"},
		{"node Ready", []client.Object{fencedSingleton(), readyNode("down", true)}, "down\n", "node down is Ready"},
		{"tainted", []client.Object{fencedSingleton(), tainted}, "down\n", "already carries the taint"},
		{"wrong name", []client.Object{fencedSingleton(), readyNode("down", false)}, "n1\n", `confirmation "n1" is not the node's name "down": nothing was changed`},
		{"no answer", []client.Object{fencedSingleton(), readyNode("down", false)}, "", "no confirmation read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newFake(nil, tc.objs...)
			before := &corev1.Node{}
			if err := c.Get(t.Context(), client.ObjectKey{Name: "down"}, before); err != nil {
				t.Fatal(err)
			}
			_, _, err := run(t, c, tc.stdin, "singleton", "fence-release", "app")
			wantErr(t, err, tc.want)
			after := &corev1.Node{}
			if err := c.Get(t.Context(), client.ObjectKey{Name: "down"}, after); err != nil {
				t.Fatal(err)
			}
			if after.ResourceVersion != before.ResourceVersion {
				t.Error("the node was written")
			}
		})
	}
}

// TestFenceRelease: after the typed confirmation the node carries the out-of-service taint beside
// its other taints, and the command waits for the new active pod.
func TestFenceRelease(t *testing.T) {
	node := readyNode("down", false)
	node.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute}}
	c := newFake(nil, fencedSingleton(), node)
	operator(t, func(ctx context.Context) bool {
		n := &corev1.Node{}
		if c.Get(ctx, client.ObjectKey{Name: "down"}, n) != nil || len(n.Spec.Taints) < 2 {
			return false
		}
		ss := &singletonv1.StatefulSingleton{}
		if c.Get(ctx, key("app"), ss) != nil {
			return false
		}
		ss.Status = singletonv1.StatefulSingletonStatus{Phase: "Running", ActivePod: "app-b", ActivePodUID: "b-uid", ActivePodNode: "n1", Epoch: 2}
		return c.Status().Update(ctx, ss) == nil
	})
	out, errOut, err := run(t, c, "down\n", "singleton", "fence-release", "app")
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, errOut, "statefulsingleton/app waits on node down, which is not Ready: pod app-a vanished", "WARNING: tainting node down", "Type the node's name to taint it: ")
	wantLines(t, out, "node/down tainted node.kubernetes.io/out-of-service=nodeshutdown:NoExecute",
		"statefulsingleton/app: pod app-b released after", "(epoch 2, phase Running); it waited on pod app-a on node down",
		"once node down is back and clean: kubectl taint node down node.kubernetes.io/out-of-service-")
	got := &corev1.Node{}
	if err := c.Get(t.Context(), client.ObjectKey{Name: "down"}, got); err != nil {
		t.Fatal(err)
	}
	if len(got.Spec.Taints) != 2 || got.Spec.Taints[0].Key != corev1.TaintNodeUnreachable || got.Spec.Taints[1].ToString() != outOfService.ToString() {
		t.Errorf("taints %v", got.Spec.Taints)
	}
}

// TestFenceReleaseStartOnExit: a Wrapper pod released on its predecessor's exit is the recorded
// active pod (on a Ready node) while the predecessor vanished from a NotReady one: the node to fence
// is the one its start-on-exit annotation names, and the release shows as phase Running with the
// same active pod.
func TestFenceReleaseStartOnExit(t *testing.T) {
	held := stsPod("app-b", "app", "n1", false)
	held.Annotations = map[string]string{singletonv1.AnnotationStartOnExit: "2/a-uid/down"}
	ss := fencedSingleton()
	ss.Status.ActivePod, ss.Status.ActivePodUID, ss.Status.ActivePodNode = "app-b", "app-b-uid", "n1"
	c := newFake(nil, ss, held, readyNode("n1", true), readyNode("down", false))
	operator(t, func(ctx context.Context) bool {
		n := &corev1.Node{}
		if c.Get(ctx, client.ObjectKey{Name: "down"}, n) != nil || len(n.Spec.Taints) == 0 {
			return false
		}
		ss := &singletonv1.StatefulSingleton{}
		if c.Get(ctx, key("app"), ss) != nil {
			return false
		}
		ss.Status.Phase, ss.Status.Epoch, ss.Status.Conditions = singletonv1.PhaseRunning, 2, nil
		return c.Status().Update(ctx, ss) == nil
	})
	out, _, err := run(t, c, "", "singleton", "fence-release", "app", "--yes")
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, out, "node/down tainted", "pod app-b released after", "it waited on pod of UID a-uid on node down")
}

// TestFenceReleaseTerminatingPod: the node of the pod a handover waits for.
func TestFenceReleaseTerminatingPod(t *testing.T) {
	old := stsPod("app-a", "app", "down", true)
	old.DeletionTimestamp, old.Finalizers = &metav1.Time{Time: time.Now()}, []string{"kubelet"}
	ss := &singletonv1.StatefulSingleton{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Status: singletonv1.StatefulSingletonStatus{Phase: "Transitioning", ActivePod: "app-a", ActivePodUID: "app-a-uid",
			Handover: &singletonv1.HandoverStatus{WaitingFor: "app-a", WaitingForUID: "app-a-uid", GracePeriodSeconds: 30, TerminatingSince: metav1.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)}}}
	c := newFake(nil, ss, old, readyNode("down", false))
	_, errOut, err := run(t, c, "", "singleton", "fence-release", "app", "--yes", "--wait=false")
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, errOut, "waits on node down, which is not Ready: pod app-a is terminating since 2026-11-29T10:00:00Z on node down")
	if strings.Contains(errOut, "Type the node's name") {
		t.Error("--yes asked anyway")
	}
}

// --- cluster

func statefulCluster() *clusterv1alpha1.StatefulCluster {
	return &clusterv1alpha1.StatefulCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coder", UID: "stc-uid"},
		Spec:       clusterv1alpha1.StatefulClusterSpec{Replicas: ptr.To[int32](2), IdentityHistoryLimit: ptr.To[int32](20)},
		Status:     clusterv1alpha1.StatefulClusterStatus{NextIdentity: 2},
	}
}

func member(name string, ownerUID types.UID) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(name + "-uid"),
		Labels:          map[string]string{clusterv1alpha1.ClusterNameLabel: "coder"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1alpha1.GroupVersion.String(), Kind: "StatefulCluster", Name: "coder", UID: ownerUID, Controller: ptr.To(true)}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
}

// TestRetireRefusals: a pod controlled by something else (even of the same name pattern and labels)
// is not deleted.
func TestRetireRefusals(t *testing.T) {
	stranger := member("coder-9", "other-uid")
	c := newFake(nil, statefulCluster(), member("coder-0", "stc-uid"), stranger)
	_, _, err := run(t, c, "", "cluster", "retire", "coder", "coder-9")
	wantErr(t, err, "pod coder-9 is not a member of statefulcluster/coder (controlled by statefulcluster/coder): refusing to delete it")
	mustGet(t, c, "coder-9", &corev1.Pod{})
	_, _, err = run(t, c, "", "cluster", "retire", "coder")
	wantErr(t, err, "accepts 2 arg(s)")
}

// TestRetire: the pod is deleted with its UID as precondition; the command waits for the ledger
// record of that UID and a new member, and names both.
func TestRetire(t *testing.T) {
	var preconditionUID types.UID
	c := newFake(&interceptor.Funcs{Delete: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
		o := &client.DeleteOptions{}
		o.ApplyOptions(opts)
		if o.Preconditions != nil && o.Preconditions.UID != nil {
			preconditionUID = *o.Preconditions.UID
		}
		return cl.Delete(ctx, obj, opts...)
	}}, statefulCluster(), member("coder-0", "stc-uid"), member("coder-1", "stc-uid"))
	operator(t, func(ctx context.Context) bool {
		if err := c.Get(ctx, key("coder-1"), &corev1.Pod{}); err == nil {
			return false
		}
		sc := &clusterv1alpha1.StatefulCluster{}
		if c.Get(ctx, key("coder"), sc) != nil {
			return false
		}
		sc.Status.NextIdentity = 3
		sc.Status.Identities = []clusterv1alpha1.IdentityRecord{{Name: "coder-1", UID: "coder-1-uid", Reason: clusterv1alpha1.RetiredDeleted,
			Message: "pod deleted by someone else", Claims: []string{"data-coder-1"}}}
		if c.Status().Update(ctx, sc) != nil {
			return false
		}
		return c.Create(ctx, member("coder-2", "stc-uid")) == nil
	})
	out, _, err := run(t, c, "", "cluster", "retire", "coder", "coder-1")
	if err != nil {
		t.Fatal(err)
	}
	if preconditionUID != "coder-1-uid" {
		t.Errorf("delete precondition UID %q", preconditionUID)
	}
	wantLines(t, out, "statefulcluster/coder: identity coder-1 retired after", "(reason Deleted: pod deleted by someone else; claims data-coder-1)",
		"replacement: pod coder-2, a new identity (status.nextIdentity 3); coder-1 is never used again")
}
