//go:build integration

package controller

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
	"github.com/statefulops/statefulops/shared/testsupport"
)

// gitOpsManager is the second field manager of the GitOps tests: a tool such as Argo CD or Flux
// server-side applying its manifest of the pod, without force (a conflict would fail its sync).
const gitOpsManager = "argocd"

// gitOpsApply server-side applies labels and annotations on the pod as the GitOps tool, returning
// the pod as the API server left it.
func (f *fixture) gitOpsApply(name string, labels, annotations map[string]string) *corev1ac.PodApplyConfiguration {
	f.t.Helper()
	ac := corev1ac.Pod(name, f.ns).WithLabels(labels).WithAnnotations(annotations)
	require.NoError(f.t, suite.Client.Apply(f.t.Context(), ac, client.FieldOwner(gitOpsManager)), "the GitOps tool's apply")
	return ac
}

// ownedFields returns the managed-fields entries of the manager on the pod, flattened to their text
// (enough to look for "f:<key>"), and the operation it last wrote with.
func ownedFields(pod *corev1.Pod, manager string) (string, string) {
	var fields, op []string
	for _, mf := range pod.ManagedFields {
		if mf.Manager == manager && mf.FieldsV1 != nil {
			fields = append(fields, string(mf.FieldsV1.Raw))
			op = append(op, string(mf.Operation))
		}
	}
	return strings.Join(fields, " "), strings.Join(op, ",")
}

// The role keys are server-side applied under the field manager statefulsetlock (ES-B4, issue 22
// row 1-f). A GitOps tool owns the rest of the pod's metadata, with sts-role=reader in its first
// manifest (copied from the live pod): the operator's apply of the same value shares the key, so when
// the tool drops it from its manifest the label stays (a merge patch of an unchanged value would
// have left the tool the only owner and its apply would remove the label, which the operator would
// write again on every sync). The tool's applies never conflict, its own labels survive the
// operator's writes, and the operator does not write again after them.
func TestRoleKeysSurviveAGitOpsApply(t *testing.T) {
	f := newFixture(t)
	f.createPods(2)
	// db-1, the future reader, in the tool's first manifest with the operator's label in it.
	f.gitOpsApply("db-1", map[string]string{"team": "a", leasev1.RoleLabel: leasev1.RoleReader}, map[string]string{"note": "from git"})
	f.gitOpsApply("db-0", map[string]string{"team": "a"}, map[string]string{"note": "from git"})

	var podWrites atomic.Int64
	count := func(namespace string) {
		if namespace == f.ns {
			podWrites.Add(1)
		}
	}
	startOperator(t, &interceptor.Funcs{
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			if ac, ok := obj.(*corev1ac.PodApplyConfiguration); ok {
				count(ptr.Deref(ac.Namespace, ""))
			}
			return c.Apply(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if _, ok := obj.(*corev1.Pod); ok {
				count(obj.GetNamespace())
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	})
	f.createLock("lock", 30)
	f.waitWriter("db-0", "1")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, "lock", f.pod("db-1").Labels[leasev1.LockLabel])
	}, wait, tick)
	time.Sleep(time.Second) // let the election's own writes settle before counting
	before := podWrites.Load()

	// The tool's next sync: its manifest changed (team b) and no longer carries sts-role.
	reader := f.gitOpsApply("db-1", map[string]string{"team": "b"}, map[string]string{"note": "from git"})
	writer := f.gitOpsApply("db-0", map[string]string{"team": "b"}, map[string]string{"note": "from git"})
	assert.Equal(t, map[string]string{"app": "db", "statefulset.kubernetes.io/pod-name": "db-1", "team": "b",
		leasev1.RoleLabel: leasev1.RoleReader, leasev1.LockLabel: "lock"}, reader.Labels, "the tool's apply keeps the reader's role and takes its own change")
	assert.Equal(t, "b", writer.Labels["team"])
	assert.Equal(t, leasev1.RoleWriter, writer.Labels[leasev1.RoleLabel], "the tool's apply keeps the writer's role")
	assert.Equal(t, "1", writer.Annotations[leasev1.WriterEpochAnnotation], "the tool's apply keeps the writer's epoch")
	assert.Equal(t, "from git", writer.Annotations["note"])

	testsupport.NeverWithin(t, 2*time.Second, 50*time.Millisecond, func() bool { return podWrites.Load() > before },
		"the operator wrote a pod again after the GitOps tool's apply")
	f.waitWriter("db-0", "1")

	for _, name := range []string{"db-0", "db-1"} {
		pod := f.pod(name)
		ours, op := ownedFields(pod, leasev1.FieldManager)
		assert.Equal(t, "Apply", op, "pod %s: the operator writes the role by server-side apply", name)
		for _, key := range []string{leasev1.RoleLabel, leasev1.LockLabel} {
			assert.Contains(t, ours, `"f:`+key+`"`, "pod %s: field manager %s owns %s", name, leasev1.FieldManager, key)
		}
		assert.NotContains(t, ours, `"f:team"`, "pod %s: the operator does not take the tool's label", name)
		assert.NotContains(t, ours, `"f:note"`, "pod %s: the operator does not take the tool's annotation", name)
		theirs, _ := ownedFields(pod, gitOpsManager)
		assert.Contains(t, theirs, `"f:team"`, "pod %s", name)
		assert.NotContains(t, theirs, `"f:`+leasev1.RoleLabel+`"`, "pod %s: the tool no longer owns the role", name)
	}

	// A failover after the tool's sync moves the role under the operator's manager alone; the
	// tool's fields stay.
	f.setReady("db-0", false)
	f.waitWriter("db-1", "2")
	assert.Equal(t, "b", f.pod("db-1").Labels["team"])
	assert.Equal(t, "from git", f.pod("db-1").Annotations["note"])
	f.gitOpsApply("db-1", map[string]string{"team": "b"}, map[string]string{"note": "from git"})
	assert.Equal(t, "2", f.pod("db-1").Annotations[leasev1.WriterEpochAnnotation])
}

// A role write to a pod that is gone creates no pod (an apply would): it is NotFound, and the
// demotion of a pod that no longer exists counts as done.
func TestRoleWriteToAGonePodCreatesNone(t *testing.T) {
	f := newFixture(t)
	pod := f.createPod(0, true)
	require.NoError(t, suite.Client.Delete(t.Context(), pod, client.GracePeriodSeconds(0)))
	r := &Reconciler{Access: opsutil.Access{Client: suite.Client, APIReader: suite.Client}, writes: opsutil.NewWriteTracker()}
	lock := &leasev1.StatefulSetLock{ObjectMeta: metav1.ObjectMeta{Name: "lock"}}
	err := r.setRole(t.Context(), pod.DeepCopy(), writerRole(lock, "1"), true)
	assert.True(t, apierrors.IsNotFound(err), "promoting a pod that is gone: %v", err)
	assert.NoError(t, r.setRole(t.Context(), pod.DeepCopy(), readerRole(lock), false), "demoting a pod that is gone")
	assert.NoError(t, r.forceRole(t.Context(), f.ns, pod.Name, readerRole(lock)))
	assert.True(t, apierrors.IsNotFound(suite.Client.Get(t.Context(), client.ObjectKeyFromObject(pod), &corev1.Pod{})), "no pod was created")
}
