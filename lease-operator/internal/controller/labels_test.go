package controller

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
)

// A new lock adopts the one pod a deleted lock of its name (or an older version) left labelled writer,
// with its epoch; anything less clear, or another lock's writer, is a fresh election.
func TestLabelledWriter(t *testing.T) {
	pod := func(name, role, epoch string, lock ...string) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: k8stypes.UID("uid-" + name), Labels: map[string]string{}, Annotations: map[string]string{}}}
		for _, l := range lock {
			p.Labels[leasev1.LockLabel] = l
		}
		if role != "" {
			p.Labels[leasev1.RoleLabel] = role
		}
		if epoch != "" {
			p.Annotations[leasev1.WriterEpochAnnotation] = epoch
		}
		return p
	}
	for _, tc := range []struct {
		name        string
		pods        []corev1.Pod
		transitions int32
		want        Holder
		wantEpoch   int32
	}{
		{"no labels", []corev1.Pod{pod("db-0", "", ""), pod("db-1", "", "")}, 0, Holder{}, 0},
		{"readers only", []corev1.Pod{pod("db-0", leasev1.RoleReader, ""), pod("db-1", leasev1.RoleReader, "")}, 3, Holder{}, 3},
		{"one writer", []corev1.Pod{pod("db-0", leasev1.RoleReader, ""), pod("db-1", leasev1.RoleWriter, "7")}, 0, Holder{Name: "db-1", UID: "uid-db-1"}, 7},
		{"one writer of this lock", []corev1.Pod{pod("db-0", leasev1.RoleReader, "", "lock"), pod("db-1", leasev1.RoleWriter, "7", "lock")}, 0, Holder{Name: "db-1", UID: "uid-db-1"}, 7},
		{"one writer of another lock", []corev1.Pod{pod("db-0", leasev1.RoleReader, "", "old"), pod("db-1", leasev1.RoleWriter, "7", "old")}, 2, Holder{}, 2},
		{"two writers", []corev1.Pod{pod("db-0", leasev1.RoleWriter, "6"), pod("db-1", leasev1.RoleWriter, "7")}, 0, Holder{}, 0},
		{"epoch missing", []corev1.Pod{pod("db-0", leasev1.RoleWriter, "")}, 0, Holder{}, 0},
		{"epoch not a number", []corev1.Pod{pod("db-0", leasev1.RoleWriter, "x")}, 0, Holder{}, 0},
		{"epoch behind the lock's", []corev1.Pod{pod("db-0", leasev1.RoleWriter, "2")}, 5, Holder{}, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, epoch := labelledWriter(tc.pods, "lock", tc.transitions)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.wantEpoch, epoch)
		})
	}
}

// The writer-lease-key label is the Lease's name where a label value can hold it, and a digest of the
// name where it cannot (a Lease name may have 253 characters); the writer role carries it and the
// reader role removes it.
func TestLeaseKeyLabel(t *testing.T) {
	assert.Equal(t, "db-lease", leaseKey("db-lease"))
	assert.Equal(t, "", leaseKey(""))
	long := strings.Repeat("a.", 100) + "lease"
	key := leaseKey(long)
	assert.Empty(t, validation.IsValidLabelValue(key), "%q is a label value", key)
	assert.True(t, strings.HasPrefix(key, "sha256-"))
	assert.NotEqual(t, key, leaseKey(long+"2"))

	lock := &leasev1.StatefulSetLock{ObjectMeta: metav1.ObjectMeta{Name: "db"}, Spec: leasev1.StatefulSetLockSpec{LeaseName: "db-lease"}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Labels:      map[string]string{leasev1.RoleLabel: leasev1.RoleWriter, leasev1.LockLabel: "db"},
		Annotations: map[string]string{leasev1.WriterEpochAnnotation: "3", leasev1.WriterLeaseAnnotation: "db-lease"},
	}}
	assert.False(t, hasRole(pod, writerRole(lock, "3")), "a writer labelled by an earlier version, without the key, is labelled again")
	pod.Labels[leasev1.WriterLeaseKeyLabel] = "db-lease"
	assert.True(t, hasRole(pod, writerRole(lock, "3")))
	labels := writerRole(lock, "3").patch()["metadata"].(map[string]any)["labels"].(map[string]any)
	assert.Equal(t, "db-lease", labels[leasev1.WriterLeaseKeyLabel])
	labels = readerRole(lock).patch()["metadata"].(map[string]any)["labels"].(map[string]any)
	assert.Nil(t, labels[leasev1.WriterLeaseKeyLabel], "the reader role removes the key")
	assert.Contains(t, labels, leasev1.WriterLeaseKeyLabel)

	ac := writerRole(lock, "3").applyConfig(pod)
	assert.Equal(t, map[string]string{leasev1.RoleLabel: leasev1.RoleWriter, leasev1.LockLabel: "db", leasev1.WriterLeaseKeyLabel: "db-lease"}, ac.Labels)
	assert.Equal(t, map[string]string{leasev1.WriterEpochAnnotation: "3", leasev1.WriterLeaseAnnotation: "db-lease"}, ac.Annotations)
	ac = readerRole(lock).applyConfig(pod)
	assert.Equal(t, map[string]string{leasev1.RoleLabel: leasev1.RoleReader, leasev1.LockLabel: "db"}, ac.Labels, "the reader applies no lease key: dropping it removes it")
	assert.Empty(t, ac.Annotations, "the reader applies no epoch: dropping it removes it")
	assert.Empty(t, role{}.applyConfig(pod).Labels, "the zero role applies no key")
}
