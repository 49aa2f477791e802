package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
)

// TestLatestPrefersOwnWriteOverTheVersionItReplaced: while the cache serves a version one of the
// operator's status writes replaced, the written object is reconciled (no conflict to wait out);
// any other cached version wins and ends that.
func TestLatestPrefersOwnWriteOverTheVersionItReplaced(t *testing.T) {
	at := func(rv string, next int64) *clusterv1alpha1.StatefulCluster {
		return &clusterv1alpha1.StatefulCluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db", UID: "u1", ResourceVersion: rv},
			Status:     clusterv1alpha1.StatefulClusterStatus{NextIdentity: next},
		}
	}
	m := newMemory()
	k := key(at("", 0))
	assert.Equal(t, "10", m.latest(at("10", 1)).ResourceVersion, "nothing written: the cache")

	m.wrote(k, "10", at("11", 2))
	got := m.latest(at("10", 1))
	assert.Equal(t, "11", got.ResourceVersion, "the cache still shows the replaced version")
	assert.EqualValues(t, 2, got.Status.NextIdentity)
	got.Status.NextIdentity = 99
	assert.EqualValues(t, 2, m.latest(at("10", 1)).Status.NextIdentity, "a copy each time")

	m.wrote(k, "11", at("12", 3))
	assert.Equal(t, "12", m.latest(at("10", 1)).ResourceVersion, "two writes ahead of the cache")
	assert.Equal(t, "12", m.latest(at("11", 2)).ResourceVersion)

	assert.Equal(t, "15", m.latest(at("15", 1)).ResourceVersion, "someone else's newer version wins")
	assert.Equal(t, "10", m.latest(at("10", 1)).ResourceVersion, "and ends the override")

	m.wrote(k, "20", at("21", 4))
	other := at("20", 1)
	other.UID = "u2"
	assert.Equal(t, "20", m.latest(other).ResourceVersion, "a recreated StatefulCluster of the same name is not overridden")

	m.wrote(k, "30", at("31", 5))
	m.forget(k)
	assert.Equal(t, "30", m.latest(at("30", 1)).ResourceVersion, "forgotten with the StatefulCluster")
}
