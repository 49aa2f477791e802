//go:build integration

package api_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// statefulClusterSeed is the "Usage" example of seed 001, unchanged.
const statefulClusterSeed = `
apiVersion: enge.me/v1alpha1
kind: StatefulCluster
metadata:
  name: coder
spec:
  replicas: 3
  selector:
    matchLabels:
      app: coder
      enge.me/statefulcluster: coder
  template:
    spec:
      containers:
      - args:
        - --allow-http
        - --no-auth
        - --host
        - 0.0.0.0
        image: codercom/code-server
        name: coder-stateful
        ports:
        - containerPort: 8443
          name: https
        volumeMounts:
        - mountPath: /home/coder/project
          name: data
  volumeClaimTemplates:
  - metadata:
      name: data
    spec:
      accessModes:
      - ReadWriteOnce
      resources:
        requests:
          storage: 1Gi
`

// publicClusterSample is deploy/crds/enge_v1alpha1_statefulcluster_cr.yaml of the public seed code
// (adamgoose/stateful-cluster-operator at 2435d67), verbatim: the seed's example with its own
// indentation, kept apart so that a change to either is seen.
const publicClusterSample = `apiVersion: enge.me/v1alpha1
kind: StatefulCluster
metadata:
  name: coder
spec:
  replicas: 3
  selector:
    matchLabels:
      app: coder
      enge.me/statefulcluster: coder
  template:
    spec:
      containers:
      - args:
        - --allow-http
        - --no-auth
        - --host
        - 0.0.0.0
        image: codercom/code-server
        name: coder-stateful
        ports:
        - containerPort: 8443
          name: https
        volumeMounts:
        - mountPath: /home/coder/project
          name: data
  volumeClaimTemplates:
  - metadata:
      name: data
    spec:
      accessModes:
      - ReadWriteOnce
      resources:
        requests:
          storage: 1Gi`

// statefulCluster returns a valid StatefulCluster named name whose spec is the minimal selector and
// template plus the given extra spec lines (indented by two spaces, as children of spec).
func statefulCluster(name, extraSpec string) string {
	return `
apiVersion: enge.me/v1alpha1
kind: StatefulCluster
metadata:
  name: ` + name + `
spec:
  selector:
    matchLabels:
      app: ` + name + `
  template:
    metadata:
      labels:
        tier: db
    spec:
      containers:
      - name: app
        image: registry.k8s.io/pause:3.10
` + extraSpec
}

func TestStatefulClusterDefaults(t *testing.T) {
	// Defaults every StatefulCluster reads back with, whatever else it sets.
	common := map[string]any{
		"spec.podManagementPolicy":                               "Parallel",
		"spec.updateStrategy.type":                               "RollingUpdate",
		"spec.revisionHistoryLimit":                              int64(10),
		"spec.minReadySeconds":                                   int64(0),
		"spec.persistentVolumeClaimRetentionPolicy.whenDeleted":  "Retain",
		"spec.persistentVolumeClaimRetentionPolicy.whenScaled":   "Retain",
		"spec.persistentVolumeClaimRetentionPolicy.whenReplaced": "Retain",
		"spec.unhealthyThresholdSeconds":                         int64(300),
		"spec.pendingThresholdSeconds":                           int64(600),
		"spec.nodeLossToleranceSeconds":                          int64(300),
		"spec.replaceOnNodeOutOfService":                         true,
		"spec.replaceTerminating":                                "WhenNodeLost",
		"spec.identityFormat":                                    "Ordinal",
		"spec.identityHistoryLimit":                              int64(20),
	}
	tests := map[string]struct {
		doc    string
		want   map[string]any
		absent []string
	}{
		"seed 001 example": {
			doc: statefulClusterSeed,
			want: map[string]any{
				"spec.replicas": int64(3),
				// The claim template's name must survive (it is what volumeMounts refer to).
				"spec.volumeClaimTemplates": []any{map[string]any{
					"metadata": map[string]any{"name": "data"},
					"spec": map[string]any{
						"accessModes": []any{"ReadWriteOnce"},
						"resources":   map[string]any{"requests": map[string]any{"storage": "1Gi"}},
					},
				}},
			},
			absent: []string{"spec.startupThresholdSeconds", "spec.updateStrategy.rollingUpdate", "spec.serviceName"},
		},
		"public code's deploy/crds sample": {
			doc:    publicClusterSample,
			want:   map[string]any{"spec.replicas": int64(3), "spec.selector.matchLabels.app": "coder"},
			absent: []string{"spec.serviceName"},
		},
		"minimal": {
			doc: statefulCluster("sc-minimal", ""),
			want: map[string]any{
				"spec.replicas": int64(1),
				// Template metadata must not be pruned.
				"spec.template.metadata.labels.tier": "db",
			},
		},
		"rolling update, hooks and zone spread": {
			doc: statefulCluster("sc-tuned", `
  replicas: 0
  unhealthyThresholdSeconds: 0
  updateStrategy:
    rollingUpdate: {}
  membershipHooks:
    retire:
      path: /members
      port: 2379
  zoneSpread: {}
  persistentVolumeClaimRetentionPolicy:
    whenReplaced: Delete
`),
			want: map[string]any{
				"spec.replicas":                                          int64(0),
				"spec.unhealthyThresholdSeconds":                         int64(0),
				"spec.updateStrategy.rollingUpdate.maxUnavailable":       int64(1),
				"spec.updateStrategy.rollingUpdate.maxSurge":             int64(0),
				"spec.updateStrategy.rollingUpdate.partition":            int64(0),
				"spec.membershipHooks.retire.scheme":                     "HTTP",
				"spec.membershipHooks.retire.timeoutSeconds":             int64(10),
				"spec.membershipHooks.retire.failurePolicy":              "Fail",
				"spec.zoneSpread.topologyKey":                            "topology.kubernetes.io/zone",
				"spec.zoneSpread.maxUnavailablePerZone":                  int64(1),
				"spec.persistentVolumeClaimRetentionPolicy.whenReplaced": "Delete",
				"spec.persistentVolumeClaimRetentionPolicy.whenScaled":   "Retain",
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := readBack(t, mustApply(t, tc.doc))
			for path, want := range common {
				if _, overridden := tc.want[path]; !overridden {
					assert.Equal(t, want, field(t, got, path), path)
				}
			}
			for path, want := range tc.want {
				assert.Equal(t, want, field(t, got, path), path)
			}
			for _, path := range tc.absent {
				_, found, err := unstructured.NestedFieldNoCopy(got.Object, strings.Split(path, ".")...)
				require.NoError(t, err)
				assert.False(t, found, "%s should stay unset", path)
			}
		})
	}
}

// TestStatefulClusterSeedServerSideApply applies the seed example as `kubectl apply --server-side` does.
func TestStatefulClusterSeedServerSideApply(t *testing.T) {
	obj := decode(t, statefulClusterSeed)
	obj.SetNamespace("seed-ssa") // the seed as is: its selector names the StatefulCluster "coder"
	ensureNamespace(t, "seed-ssa")
	require.NoError(t, k8sClient.Patch(t.Context(), obj, client.Apply, client.FieldOwner("validation-test")))
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), obj) })
	got := readBack(t, obj)
	assert.Equal(t, int64(3), field(t, got, "spec.replicas"))
	assert.Equal(t, "Parallel", field(t, got, "spec.podManagementPolicy"))
}

// clusterBadInputs are StatefulClusters the operator could never act on.
func clusterBadInputs() []badInput {
	tests := map[string]struct {
		doc  string
		want []string
	}{
		"negative replicas": {
			doc:  statefulCluster("sc-bad-replicas", "  replicas: -1\n"),
			want: []string{"spec.replicas"},
		},
		"missing selector": {
			doc: `
apiVersion: enge.me/v1alpha1
kind: StatefulCluster
metadata:
  name: sc-no-selector
spec:
  template:
    spec:
      containers:
      - name: app
        image: registry.k8s.io/pause:3.10
`,
			want: []string{"spec.selector", "Required value"},
		},
		"empty selector": {
			doc: `
apiVersion: enge.me/v1alpha1
kind: StatefulCluster
metadata:
  name: sc-empty-selector
spec:
  selector: {}
  template:
    spec:
      containers:
      - name: app
        image: registry.k8s.io/pause:3.10
`,
			want: []string{"spec.selector", "must not be empty"},
		},
		"template without containers": {
			doc: `
apiVersion: enge.me/v1alpha1
kind: StatefulCluster
metadata:
  name: sc-no-containers
spec:
  selector:
    matchLabels:
      app: x
  template:
    spec: {}
`,
			want: []string{"spec.template.spec.containers"},
		},
		"restartPolicy Never": {
			doc: `
apiVersion: enge.me/v1alpha1
kind: StatefulCluster
metadata:
  name: sc-restart-never
spec:
  selector:
    matchLabels:
      app: x
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: app
        image: registry.k8s.io/pause:3.10
`,
			want: []string{"spec.template.spec.restartPolicy", "must be Always"},
		},
		"unknown podManagementPolicy": {
			doc:  statefulCluster("sc-bad-pmp", "  podManagementPolicy: Sequential\n"),
			want: []string{"spec.podManagementPolicy", "Unsupported value"},
		},
		"rollingUpdate with OnDelete": {
			doc: statefulCluster("sc-ondelete-ru", `
  updateStrategy:
    type: OnDelete
    rollingUpdate:
      partition: 1
`),
			want: []string{"spec.updateStrategy.rollingUpdate", "type is RollingUpdate"},
		},
		"maxUnavailable and maxSurge both 0": {
			doc: statefulCluster("sc-zero-zero", `
  updateStrategy:
    rollingUpdate:
      maxUnavailable: 0
      maxSurge: 0%
`),
			want: []string{"spec.updateStrategy.rollingUpdate", "must not both be 0"},
		},
		"maxSurge not a percentage": {
			doc: statefulCluster("sc-bad-surge", `
  updateStrategy:
    rollingUpdate:
      maxSurge: lots
`),
			want: []string{"spec.updateStrategy.rollingUpdate.maxSurge"},
		},
		"negative partition": {
			doc: statefulCluster("sc-bad-partition", `
  updateStrategy:
    rollingUpdate:
      partition: -2
`),
			want: []string{"spec.updateStrategy.rollingUpdate.partition"},
		},
		"unknown whenReplaced": {
			doc: statefulCluster("sc-bad-retention", `
  persistentVolumeClaimRetentionPolicy:
    whenReplaced: Keep
`),
			want: []string{"spec.persistentVolumeClaimRetentionPolicy.whenReplaced", "Unsupported value"},
		},
		"duplicate claim template names": {
			doc: statefulCluster("sc-dup-claims", `
  volumeClaimTemplates:
  - metadata: {name: data}
    spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
  - metadata: {name: data}
    spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 2Gi}}}
`),
			want: []string{"spec.volumeClaimTemplates", "must be unique"},
		},
		"claim template without a name": {
			doc: statefulCluster("sc-unnamed-claim", `
  volumeClaimTemplates:
  - metadata: {}
    spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
`),
			want: []string{"spec.volumeClaimTemplates[0].metadata.name", "Required value"},
		},
		"claim template name not a DNS label": {
			doc: statefulCluster("sc-bad-claim-name", `
  volumeClaimTemplates:
  - metadata: {name: Data_1}
    spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
`),
			want: []string{"spec.volumeClaimTemplates[0].metadata.name"},
		},
		"invalid serviceName": {
			doc:  statefulCluster("sc-bad-service", "  serviceName: My_Service\n"),
			want: []string{"spec.serviceName"},
		},
		"negative unhealthyThresholdSeconds": {
			doc:  statefulCluster("sc-bad-threshold", "  unhealthyThresholdSeconds: -5\n"),
			want: []string{"spec.unhealthyThresholdSeconds"},
		},
		"zero startupThresholdSeconds": {
			doc:  statefulCluster("sc-bad-startup", "  startupThresholdSeconds: 0\n"),
			want: []string{"spec.startupThresholdSeconds"},
		},
		"identityHistoryLimit too large": {
			doc:  statefulCluster("sc-bad-history", "  identityHistoryLimit: 100000\n"),
			want: []string{"spec.identityHistoryLimit"},
		},
		"membership hook path not absolute": {
			doc: statefulCluster("sc-bad-hook", `
  membershipHooks:
    join:
      path: members
      port: 8080
`),
			want: []string{"spec.membershipHooks.join.path"},
		},
		"membership hook port 0": {
			doc:  statefulCluster("sc-hook-port0", "  membershipHooks: {retire: {path: /members, port: 0}}\n"),
			want: []string{"spec.membershipHooks.retire.port", "port must be a port number (1-65535) or a container port name"},
		},
		"membership hook port name not a port name": {
			doc:  statefulCluster("sc-hook-portname", "  membershipHooks: {join: {path: /members, port: Client_Port}}\n"),
			want: []string{"spec.membershipHooks.join.port", "port must be a port number (1-65535) or a container port name"},
		},
		"zoneSpread.topologyKey not a label key": {
			doc:  statefulCluster("sc-bad-topology", "  zoneSpread: {topologyKey: 'zone label'}\n"),
			want: []string{"spec.zoneSpread.topologyKey"},
		},
		"name too long for pod hostnames": {
			doc:  statefulCluster(strings.Repeat("a", 53), ""),
			want: []string{"metadata.name must be at most 52 characters"},
		},
		"selector operator unknown": {
			doc:  withSelector(statefulCluster("sc-bad-op", ""), "sc-bad-op", "    matchExpressions: [{key: tier, operator: Bogus, values: [db]}]\n"),
			want: []string{"spec.selector.matchExpressions", "must be In, NotIn, Exists or DoesNotExist"},
		},
		"selector In without values": {
			doc:  withSelector(statefulCluster("sc-in-novalues", ""), "sc-in-novalues", "    matchExpressions: [{key: tier, operator: In}]\n"),
			want: []string{"spec.selector.matchExpressions", "must not be empty when the operator is In or NotIn"},
		},
		"selector Exists with values": {
			doc:  withSelector(statefulCluster("sc-exists-values", ""), "sc-exists-values", "    matchExpressions: [{key: tier, operator: Exists, values: [db]}]\n"),
			want: []string{"spec.selector.matchExpressions", "must be empty when the operator is Exists or DoesNotExist"},
		},
		"selector on enge.me/statefulcluster of another name": {
			doc:  withSelector(statefulCluster("sc-other-name", ""), "sc-other-name", "    matchLabels: {enge.me/statefulcluster: coder}\n"),
			want: []string{"spec.selector.matchLabels", "enge.me/statefulcluster must equal metadata.name"},
		},
		"selector on enge.me/identity": {
			doc:  withSelector(statefulCluster("sc-identity", ""), "sc-identity", "    matchLabels: {enge.me/identity: sc-identity-0}\n"),
			want: []string{"spec.selector.matchLabels", "must not select on enge.me/identity or controller-revision-hash"},
		},
		"selector In without the template's value": {
			doc:  clusterWithExpr("sc-in-bad", "{key: tier, operator: In, values: [web]}"),
			want: []string{"spec.selector.matchExpressions", "must be satisfied by the pod template's labels"},
		},
		"selector NotIn with the template's value": {
			doc:  clusterWithExpr("sc-notin-bad", "{key: tier, operator: NotIn, values: [db]}"),
			want: []string{"spec.selector.matchExpressions", "must be satisfied by the pod template's labels"},
		},
		"selector Exists on a label the template lacks": {
			doc:  clusterWithExpr("sc-exists-bad", "{key: zone, operator: Exists}"),
			want: []string{"spec.selector.matchExpressions", "must be satisfied by the pod template's labels"},
		},
		"selector DoesNotExist on a template label": {
			doc:  clusterWithExpr("sc-dne-bad", "{key: tier, operator: DoesNotExist}"),
			want: []string{"spec.selector.matchExpressions", "must be satisfied by the pod template's labels"},
		},
		"selector In on a label the template lacks": {
			doc:  clusterWithExpr("sc-in-absent", "{key: zone, operator: In, values: [a]}"),
			want: []string{"spec.selector.matchExpressions", "must be satisfied by the pod template's labels"},
		},
		"selector label value invalid": {
			doc:  withSelector(statefulCluster("sc-bad-value", ""), "sc-bad-value", "    matchLabels: {app: 'a b'}\n"),
			want: []string{"spec.selector.matchLabels", "values must be label values"},
		},
	}
	return sortedCases(tests, func(name string, tc struct {
		doc  string
		want []string
	}) badInput {
		return badInput{Case: name, Doc: tc.doc, Want: tc.want}
	})
}

// clusterWithExpr is statefulCluster (template label tier: db) selecting app: name (which the operator
// adds to its pods) and the matchExpression expr.
func clusterWithExpr(name, expr string) string {
	return withSelector(statefulCluster(name, ""), name, "    matchLabels: {app: "+name+"}\n    matchExpressions: ["+expr+"]\n")
}

func TestStatefulClusterRejectsInvalid(t *testing.T) {
	runBadInputs(t, clusterBadInputs())
}

func TestStatefulClusterImmutableFields(t *testing.T) {
	withClaims := func(name string) string {
		return statefulCluster(name, `
  volumeClaimTemplates:
  - metadata: {name: data}
    spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
`)
	}
	tests := map[string]struct {
		doc    string
		mutate func(spec map[string]any)
		want   []string // empty: the update must succeed
	}{
		"replicas may change": {
			doc:    withClaims("sc-imm-replicas"),
			mutate: func(spec map[string]any) { spec["replicas"] = int64(5) },
		},
		"template may change": {
			doc: withClaims("sc-imm-template"),
			mutate: func(spec map[string]any) {
				spec["template"].(map[string]any)["metadata"] = map[string]any{"labels": map[string]any{"tier": "web"}}
			},
		},
		"selector": {
			doc: withClaims("sc-imm-selector"),
			mutate: func(spec map[string]any) {
				spec["selector"] = map[string]any{"matchLabels": map[string]any{"app": "other"}}
			},
			want: []string{"spec.selector", "immutable"},
		},
		"claim template storage": {
			doc: withClaims("sc-imm-storage"),
			mutate: func(spec map[string]any) {
				spec["volumeClaimTemplates"].([]any)[0].(map[string]any)["spec"].(map[string]any)["resources"] =
					map[string]any{"requests": map[string]any{"storage": "2Gi"}}
			},
			want: []string{"spec.volumeClaimTemplates", "immutable"},
		},
		"claim templates removed": {
			doc:    withClaims("sc-imm-removed"),
			mutate: func(spec map[string]any) { delete(spec, "volumeClaimTemplates") },
			want:   []string{"spec.volumeClaimTemplates", "immutable"},
		},
		"claim templates added": {
			doc: statefulCluster("sc-imm-added", ""),
			mutate: func(spec map[string]any) {
				spec["volumeClaimTemplates"] = []any{map[string]any{
					"metadata": map[string]any{"name": "data"},
					"spec":     map[string]any{"accessModes": []any{"ReadWriteOnce"}},
				}}
			},
			want: []string{"spec.volumeClaimTemplates", "immutable"},
		},
		"identityFormat": {
			doc:    withClaims("sc-imm-format"),
			mutate: func(spec map[string]any) { spec["identityFormat"] = "Random" },
			want:   []string{"spec.identityFormat", "immutable"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			obj := readBack(t, mustApply(t, tc.doc))
			tc.mutate(obj.Object["spec"].(map[string]any))
			err := k8sClient.Update(t.Context(), obj)
			if len(tc.want) == 0 {
				require.NoError(t, err)
				return
			}
			require.Error(t, err, "the API server accepted a change of an immutable field")
			require.True(t, apierrors.IsInvalid(err), "want an Invalid error, got: %v", err)
			for _, want := range tc.want {
				require.Contains(t, err.Error(), want)
			}
		})
	}
}

func TestStatefulClusterScaleSubresource(t *testing.T) {
	obj := mustApply(t, statefulClusterSeed)
	// The operator publishes the selector in status; the scale subresource reads it from there.
	obj = readBack(t, obj)
	require.NoError(t, unstructured.SetNestedField(obj.Object, "app=coder,enge.me/statefulcluster=coder", "status", "selector"))
	require.NoError(t, unstructured.SetNestedField(obj.Object, int64(3), "status", "replicas"))
	require.NoError(t, k8sClient.Status().Update(t.Context(), obj))

	scale := &unstructured.Unstructured{}
	scale.SetGroupVersionKind(schema.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"})
	require.NoError(t, k8sClient.SubResource("scale").Get(t.Context(), obj, scale))
	assert.Equal(t, int64(3), field(t, scale, "spec.replicas"))
	assert.Equal(t, int64(3), field(t, scale, "status.replicas"))
	assert.Equal(t, "app=coder,enge.me/statefulcluster=coder", field(t, scale, "status.selector"))

	require.NoError(t, unstructured.SetNestedField(scale.Object, int64(5), "spec", "replicas"))
	require.NoError(t, k8sClient.SubResource("scale").Update(t.Context(), obj, client.WithSubResourceBody(scale)))
	assert.Equal(t, int64(5), field(t, readBack(t, obj), "spec.replicas"))

	require.NoError(t, unstructured.SetNestedField(scale.Object, int64(-1), "spec", "replicas"))
	err := k8sClient.SubResource("scale").Update(t.Context(), obj, client.WithSubResourceBody(scale))
	require.Error(t, err, "scaling to -1 must be refused")
}

// withSelector replaces the selector "matchLabels: {app: <name>}" of a manifest made by statefulCluster
// or extendedStatefulSet with the given selector lines (children of the selector, indented as it is).
func withSelector(doc, name, selector string) string {
	for _, indent := range []string{"        ", "    "} {
		old := indent + "matchLabels:\n" + indent + "  app: " + name + "\n"
		if strings.Contains(doc, old) {
			return strings.Replace(doc, old, selector, 1)
		}
	}
	panic("withSelector: no selector matchLabels app: " + name + " in the manifest")
}
