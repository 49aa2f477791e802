package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/labels"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// The cache holds what carries the operator's label, whatever its value; the orphan list asks for what
// lacks it. Together they see every pod a StatefulCluster's selector matches, each once.
func TestOperatorLabelSplitsThePods(t *testing.T) {
	selector := labels.SelectorFromSet(labels.Set{"app": "db"})
	orphans := withoutOperatorLabel(selector)
	cached := opsutil.HasLabel(clusterv1alpha1.ClusterNameLabel)
	for _, tc := range []struct {
		labels         labels.Set
		cached, orphan bool
	}{
		{labels.Set{"app": "db", clusterv1alpha1.ClusterNameLabel: "db"}, true, false},
		{labels.Set{"app": "db", clusterv1alpha1.ClusterNameLabel: ""}, true, false},
		{labels.Set{"app": "db"}, false, true},
		{labels.Set{"app": "web"}, false, false},
		{labels.Set{clusterv1alpha1.ClusterNameLabel: "other"}, true, false},
	} {
		assert.Equal(t, tc.cached, cached.Matches(tc.labels), "cached: %v", tc.labels)
		assert.Equal(t, tc.orphan, orphans.Matches(tc.labels), "listed as an orphan: %v", tc.labels)
	}
	assert.Equal(t, clusterv1alpha1.ClusterNameLabel, cached.String(), "the cache's selector as the API server gets it")
}
