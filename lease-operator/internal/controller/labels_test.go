package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

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
