package controller

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// cacheOf is a cache holding one StatefulCluster, as of some version.
type cacheOf struct {
	client.Reader
	sc *clusterv1alpha1.StatefulCluster
}

func (c *cacheOf) Get(_ context.Context, _ client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	c.sc.DeepCopyInto(obj.(*clusterv1alpha1.StatefulCluster))
	return nil
}

// TestReconcileWaitsForItsOwnStatusWrite: while the cache serves a version one of the operator's status
// writes replaced, the reconcile stops (no decision from the replaced state, no conflict to wait out)
// and the event of the write starts the next one, although status-only updates are otherwise dropped;
// any other cached version is reconciled and ends the wait.
func TestReconcileWaitsForItsOwnStatusWrite(t *testing.T) {
	at := func(uid types.UID, rv string) *clusterv1alpha1.StatefulCluster {
		return &clusterv1alpha1.StatefulCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db", UID: uid, ResourceVersion: rv, Generation: 1}}
	}
	cached := &cacheOf{}
	r := &Reconciler{Access: opsutil.Access{Cache: cached}, writes: newOwnWrites()}
	behind := func(sc *clusterv1alpha1.StatefulCluster) bool {
		t.Helper()
		cached.sc = sc
		got, err := r.behind(t.Context(), sc.DeepCopy())
		require.NoError(t, err)
		return got
	}
	woken := func(old, new *clusterv1alpha1.StatefulCluster) bool {
		return r.clusterPredicate().Update(event.UpdateEvent{ObjectOld: old, ObjectNew: new})
	}

	assert.False(t, behind(at("u1", "10")), "nothing written: the cache")
	assert.False(t, woken(at("u1", "10"), at("u1", "11")), "a status-only update does not wake the operator")

	r.writes.tracker.Wrote(at("u1", "11"))
	assert.False(t, woken(at("u1", "10"), at("u1", "11")), "its own write does not wake it when no reconcile waits")
	assert.True(t, behind(at("u1", "10")), "the version the write replaced is not reconciled")
	assert.True(t, woken(at("u1", "10"), at("u1", "11")), "the event of the write starts the next reconcile")
	assert.False(t, woken(at("u1", "10"), at("u1", "11")), "once")
	assert.False(t, behind(at("u1", "11")), "the written version is reconciled")

	r.writes.tracker.Wrote(at("u1", "12"))
	r.writes.tracker.Wrote(at("u1", "13"))
	assert.True(t, behind(at("u1", "11")), "two writes ahead of the cache")
	assert.True(t, behind(at("u1", "12")))
	assert.False(t, woken(at("u1", "11"), at("u1", "12")), "the first write's event leaves the cache behind the second")
	assert.True(t, woken(at("u1", "12"), at("u1", "13")))

	r.writes.tracker.Wrote(at("u1", "14"))
	assert.False(t, behind(at("u1", "15")), "someone else's newer version is reconciled")
	assert.False(t, behind(at("u1", "10")), "and ends the wait")

	r.writes.tracker.Wrote(at("u1", "21"))
	assert.False(t, behind(at("u2", "20")), "a recreated StatefulCluster of the same name does not wait")

	r.writes.tracker.Wrote(at("u1", "31"))
	r.writes.forget(at("u1", "31"))
	assert.False(t, behind(at("u1", "30")), "forgotten with the StatefulCluster")
}

// TestReconcileReadsAgainWhenTheCacheCatchesUpMeanwhile: the event of the write may be handled between
// the reconcile's read and its mark as waiting; the reconcile then goes on with the caught-up object.
func TestReconcileReadsAgainWhenTheCacheCatchesUpMeanwhile(t *testing.T) {
	at := func(rv string) *clusterv1alpha1.StatefulCluster {
		return &clusterv1alpha1.StatefulCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db", UID: "u1", ResourceVersion: rv}}
	}
	r := &Reconciler{Access: opsutil.Access{Cache: &cacheOf{sc: at("11")}}, writes: newOwnWrites()}
	r.writes.tracker.Wrote(at("11"))
	sc := at("10")
	got, err := r.behind(t.Context(), sc)
	require.NoError(t, err)
	assert.False(t, got)
	assert.Equal(t, "11", sc.ResourceVersion, "the caught-up object is reconciled")
	assert.False(t, r.writes.caughtUp(at("11")), "and no longer waits for the event")
}
