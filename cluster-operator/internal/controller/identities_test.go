package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
)

func TestOrdinalOf(t *testing.T) {
	for name, want := range map[string]int64{"db-0": 0, "db-7": 7, "db-123": 123} {
		n, ok := ordinalOf("db", name)
		assert.True(t, ok, name)
		assert.Equal(t, want, n, name)
	}
	for _, name := range []string{"db", "db-", "db-01", "db-x", "db-1a", "dbx-1", "other-1", "db-3f2a9c1b", "db-1234567890123456789"} {
		_, ok := ordinalOf("db", name)
		assert.False(t, ok, name)
	}
}

func TestHighWaterUsesEveryTrace(t *testing.T) {
	sc := &clusterv1alpha1.StatefulCluster{ObjectMeta: metav1.ObjectMeta{Name: "db"}}
	assert.EqualValues(t, 0, highWater(sc, nil))
	sc.Status.NextIdentity = 4
	assert.EqualValues(t, 4, highWater(sc, []string{"db-1", "db-3"}), "the recorded mark wins")
	assert.EqualValues(t, 8, highWater(sc, []string{"db-7", "db-x"}), "a pod or claim above the mark (lost status write)")
	sc.Status.Identities = []clusterv1alpha1.IdentityRecord{{Name: "db-11"}}
	assert.EqualValues(t, 12, highWater(sc, nil), "the ledger")
	sc.Status.RetiredClaims = []clusterv1alpha1.RetiredClaim{{Name: "db-data-20", Identity: "db-20"}}
	assert.EqualValues(t, 21, highWater(sc, nil), "retained claims")

	names, next := allocate(sc, 3, map[string]bool{}, nil)
	assert.Equal(t, []string{"db-21", "db-22", "db-23"}, names)
	assert.EqualValues(t, 24, next)
}

func TestRandomIdentities(t *testing.T) {
	sc := &clusterv1alpha1.StatefulCluster{ObjectMeta: metav1.ObjectMeta{Name: "db"}}
	sc.Spec.IdentityFormat = clusterv1alpha1.RandomIdentityFormat
	known := map[string]bool{}
	names, _ := allocate(sc, 50, known, nil)
	seen := map[string]bool{}
	for _, n := range names {
		assert.Regexp(t, `^db-[0-9a-f]{8}$`, n)
		assert.False(t, seen[n])
		seen[n] = true
	}
	assert.Len(t, known, 50)
}

func TestClaimNames(t *testing.T) {
	sc := &clusterv1alpha1.StatefulCluster{ObjectMeta: metav1.ObjectMeta{Name: "coder"}}
	sc.Spec.VolumeClaimTemplates = []clusterv1alpha1.PersistentVolumeClaimTemplate{
		{Metadata: clusterv1alpha1.ClaimTemplateMetadata{Name: "data"}}, {Metadata: clusterv1alpha1.ClaimTemplateMetadata{Name: "logs"}}}
	assert.Equal(t, []string{"coder-data-3", "coder-logs-3"}, claimNames(sc, "coder-3"))
	assert.Equal(t, "coder-data-3f2a9c1b", claimName(sc, "data", "coder-3f2a9c1b"))
}
