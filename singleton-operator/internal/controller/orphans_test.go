package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

// orphanPod is a pod for the orphan rule's unit tests: controlled by kind/owner (none when owner is ""),
// with the webhook's singleton label when singleton is set.
func orphanPod(name, kind, owner, singleton string, created time.Time, annotations map[string]string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}, Annotations: annotations,
		CreationTimestamp: metav1.NewTime(created)}}
	if owner != "" {
		p.OwnerReferences = []metav1.OwnerReference{{Kind: kind, Name: owner, Controller: ptr.To(true)}}
	}
	if singleton != "" {
		p.Labels[singletonv1.LabelSingleton] = singleton
	}
	return p
}

// The workload of an orphaned held pod: a ReplicaSet's Deployment (so every revision's pods are siblings),
// a StatefulSet, or the webhook's singleton label; a pod with neither waits for every managed or released
// pod of the namespace. Of held siblings, the newest revision goes first, then the newest pod.
func TestOrphanSiblings(t *testing.T) {
	now := time.Now()
	rs := map[string]replicaSet{"db-1": {owner: "Deployment/db", revision: 1}, "db-2": {owner: "Deployment/db", revision: 2},
		"web-1": {owner: "Deployment/web", revision: 1}}
	held := orphanPod("held", "ReplicaSet", "db-2", "", now, nil)
	mine := workloadOf(held, rs)
	assert.Equal(t, "Deployment/db", mine)
	assert.True(t, siblings(held, mine, orphanPod("old", "ReplicaSet", "db-1", "", now, nil), rs), "another revision of the Deployment")
	assert.False(t, siblings(held, mine, orphanPod("web", "ReplicaSet", "web-1", "", now, nil), rs), "another Deployment")
	assert.Equal(t, "ReplicaSet/lone", workloadOf(orphanPod("x", "ReplicaSet", "lone", "", now, nil), rs), "a ReplicaSet without a Deployment")

	sts := orphanPod("sts-0", "StatefulSet", "db", "", now, nil)
	assert.True(t, siblings(sts, workloadOf(sts, rs), orphanPod("sts-1", "StatefulSet", "db", "", now, nil), rs))
	assert.False(t, siblings(sts, workloadOf(sts, rs), held, rs), "a StatefulSet and a Deployment of the same name differ")

	labelled := orphanPod("bare", "", "", "db", now, nil)
	assert.True(t, siblings(labelled, "", orphanPod("other-bare", "", "", "db", now, nil), rs), "same singleton label")
	assert.False(t, siblings(labelled, "", orphanPod("else", "", "", "web", now, nil), rs))

	bare := orphanPod("bare", "", "", "", now, nil)
	assert.True(t, siblings(bare, "", orphanPod("released", "", "", "", now, map[string]string{singletonv1.AnnotationEpoch: "3"}), rs),
		"no workload, no label: any released pod may be the other instance")
	assert.False(t, siblings(bare, "", orphanPod("unmanaged", "", "", "", now, nil), rs))

	older := orphanPod("a-older", "ReplicaSet", "db-2", "", now.Add(-time.Minute), nil)
	oldRevision := orphanPod("z-rev1", "ReplicaSet", "db-1", "", now.Add(time.Minute), nil)
	assert.True(t, newerHeld(held, older, rs), "newer pod of the same revision")
	assert.True(t, newerHeld(held, oldRevision, rs), "newer revision beats a newer pod")
	assert.False(t, newerHeld(oldRevision, held, rs))
}
