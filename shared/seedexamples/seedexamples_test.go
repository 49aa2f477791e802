package seedexamples

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLoadFindsEveryExampleOfTheSeeds(t *testing.T) {
	dir, err := Dir()
	require.NoError(t, err)
	examples, err := Load(dir)
	require.NoError(t, err)

	type id struct{ seed, kind, name string }
	var got []id
	for _, ex := range examples {
		got = append(got, id{ex.Seed[:3], ex.Kind, ex.Name})
	}
	assert.Equal(t, []id{
		{"000", "StatefulSingleton", "my-database"},
		{"000", "Deployment", "postgres-database"},
		{"001", "StatefulCluster", "coder"},
		{"002", "StatefulSet", "postgres-cluster"},
		{"002", "StatefulSetLock", "postgres-cluster-lock"},
		{"002", "Service", "postgres-writer"},
		{"002", "Service", "postgres-reader"},
		{"003", "PhasedRollout", "phasedrollout-sample"},
		{"003", "Secret", "prom-secret"},
		{"004", "ExtendedStatefulSet", "myextendedstatefulset"},
	}, got)
}

func TestLoadAppliesOnlyTheTwoDocumentedFixes(t *testing.T) {
	dir, err := Dir()
	require.NoError(t, err)
	examples, err := Load(dir)
	require.NoError(t, err)
	fixed := map[string][]string{}
	for _, ex := range examples {
		if len(ex.Fixes) > 0 {
			fixed[ex.Kind+"/"+ex.Name] = ex.Fixes
		}
	}
	assert.Equal(t, map[string][]string{
		"PhasedRollout/phasedrollout-sample": {`"--" read as the YAML document separator "---"`},
		"Secret/prom-secret":                 {`"--" read as the YAML document separator "---"`},
		"ExtendedStatefulSet/myextendedstatefulset": {
			`metadata.name "MyExtendedStatefulSet" lower-cased to "myextendedstatefulset" (object names are lower-case)`,
		},
	}, fixed)
}

func TestFromBlockLeavesIllustrationsOut(t *testing.T) {
	for name, block := range map[string]string{
		"status snippet":   "status:\n  versions:\n    \"1\": true\n",
		"affinity snippet": "spec:\n  affinity: {}\n",
		"metadata only":    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n",
		"does not parse":   "apiVersion: v1\n  data:\n    key1: value1\n  kind: ConfigMap\n",
		"no name":          "apiVersion: v1\nkind: ConfigMap\ndata: {}\n",
	} {
		t.Run(name, func(t *testing.T) {
			assert.Empty(t, fromBlock("x.txt", block))
		})
	}
}
