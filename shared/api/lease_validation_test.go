//go:build integration

package api_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
)

// seed002Lock is the StatefulSetLock of seed 002, verbatim.
const seed002Lock = `
apiVersion: app.anukkrit.me/v1
kind: StatefulSetLock
metadata:
  name: postgres-cluster-lock
spec:
  statefulSetName: "postgres-cluster"
  leaseName: "postgres-cluster-leader-lease"
  leaseDurationSeconds: 30
`

// publicLockSample is config/samples/app_v1_statefulsetlock.yaml of the public seed code.
const publicLockSample = `
apiVersion: app.anukkrit.me/v1
kind: StatefulSetLock
metadata:
  labels:
    app.kubernetes.io/name: sts-leader-elect-operator
    app.kubernetes.io/managed-by: kustomize
  name: postgres-cluster-lock
spec:
  # Name of the StatefulSet to manage leader election for
  statefulSetName: "postgres-cluster"
  # Name of the lease object that will be created for coordination
  leaseName: "postgres-cluster-leader-lease"
  # Duration in seconds for how long the lease is valid (30 seconds)
  leaseDurationSeconds: 30
`

func TestStatefulSetLockDefaults(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want map[string]any
	}{
		{
			name: "seed 002 example",
			doc:  seed002Lock,
			want: map[string]any{
				"spec.statefulSetName":      "postgres-cluster",
				"spec.leaseName":            "postgres-cluster-leader-lease",
				"spec.leaseDurationSeconds": 30,
				"spec.failoverDelaySeconds": 0,
			},
		},
		{
			name: "public code sample",
			doc:  publicLockSample,
			want: map[string]any{"spec.leaseDurationSeconds": 30, "spec.failoverDelaySeconds": 0},
		},
		{
			name: "explicit failoverDelaySeconds and bounds",
			doc: `
apiVersion: app.anukkrit.me/v1
kind: StatefulSetLock
metadata: {name: ssl-explicit}
spec: {statefulSetName: db, leaseName: db.writer, leaseDurationSeconds: 3600, failoverDelaySeconds: 3600}
`,
			want: map[string]any{"spec.leaseDurationSeconds": 3600, "spec.failoverDelaySeconds": 3600},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := readBack(t, mustApply(t, tt.doc))
			for path, want := range tt.want {
				require.EqualValues(t, want, field(t, got, path), path)
			}
		})
	}
}

// lockBadInputs are StatefulSetLocks the operator could never act on.
func lockBadInputs() []badInput {
	tests := []struct {
		name string
		spec string // flow-style spec
		want []string
	}{
		{"leaseDurationSeconds 0", "{statefulSetName: db, leaseName: db-lease, leaseDurationSeconds: 0}", []string{"spec.leaseDurationSeconds"}},
		{"leaseDurationSeconds above 3600", "{statefulSetName: db, leaseName: db-lease, leaseDurationSeconds: 3601}", []string{"spec.leaseDurationSeconds"}},
		{"leaseDurationSeconds missing", "{statefulSetName: db, leaseName: db-lease}", []string{"spec.leaseDurationSeconds", "Required value"}},
		{"statefulSetName missing", "{leaseName: db-lease, leaseDurationSeconds: 30}", []string{"spec.statefulSetName", "Required value"}},
		{"statefulSetName empty", "{statefulSetName: '', leaseName: db-lease, leaseDurationSeconds: 30}", []string{"spec.statefulSetName"}},
		{"statefulSetName not a DNS name", "{statefulSetName: Postgres_Cluster, leaseName: db-lease, leaseDurationSeconds: 30}", []string{"spec.statefulSetName"}},
		{"leaseName missing", "{statefulSetName: db, leaseDurationSeconds: 30}", []string{"spec.leaseName", "Required value"}},
		{"leaseName empty", "{statefulSetName: db, leaseName: '', leaseDurationSeconds: 30}", []string{"spec.leaseName"}},
		{"leaseName not a DNS name", "{statefulSetName: db, leaseName: 'db lease', leaseDurationSeconds: 30}", []string{"spec.leaseName"}},
		{"failoverDelaySeconds negative", "{statefulSetName: db, leaseName: db-lease, leaseDurationSeconds: 30, failoverDelaySeconds: -1}", []string{"spec.failoverDelaySeconds"}},
		{"statefulSetName of 64 characters", "{statefulSetName: " + strings.Repeat("s", 64) + ", leaseName: db-lease, leaseDurationSeconds: 30}", []string{"spec.statefulSetName", "may not be more than 63"}},
		{"metadata.name of 64 characters", "{statefulSetName: db, leaseName: db-lease, leaseDurationSeconds: 30}", []string{"metadata.name must be at most 63 characters"}},
		{"failoverDelaySeconds above 3600", "{statefulSetName: db, leaseName: db-lease, leaseDurationSeconds: 30, failoverDelaySeconds: 3601}", []string{"spec.failoverDelaySeconds"}},
		{"services without ports", "{statefulSetName: db, leaseName: db-lease, leaseDurationSeconds: 30, services: {ports: []}}", []string{"spec.services.ports"}},
		{"services port 0", "{statefulSetName: db, leaseName: db-lease, leaseDurationSeconds: 30, services: {ports: [{port: 0}]}}", []string{"spec.services.ports[0].port"}},
		{"services targetPort above 65535", "{statefulSetName: db, leaseName: db-lease, leaseDurationSeconds: 30, services: {ports: [{port: 5432, targetPort: 65536}]}}", []string{"spec.services.ports[0].targetPort"}},
		{"services ports without names", "{statefulSetName: db, leaseName: db-lease, leaseDurationSeconds: 30, services: {ports: [{port: 5432}, {port: 80}]}}", []string{"with more than one port, every port needs a name"}},
		{"services port names not unique", "{statefulSetName: db, leaseName: db-lease, leaseDurationSeconds: 30, services: {ports: [{name: pg, port: 5432}, {name: pg, port: 80}]}}", []string{"port names must be unique"}},
		{"services ports duplicate", "{statefulSetName: db, leaseName: db-lease, leaseDurationSeconds: 30, services: {ports: [{name: a, port: 5432}, {name: b, port: 5432}]}}", []string{"spec.services.ports[1]", "Duplicate value"}},
		{"metadata.name with a dot and services", "{statefulSetName: db, leaseName: db-lease, leaseDurationSeconds: 30, services: {ports: [{port: 5432}]}}", []string{"with spec.services, metadata.name must be a DNS label"}},
		{"services endpoints neither Selector nor Operator", "{statefulSetName: db, leaseName: db-lease, leaseDurationSeconds: 30, services: {ports: [{port: 5432}], endpoints: Endpoints}}", []string{"spec.services.endpoints", "Unsupported value"}},
	}
	out := make([]badInput, 0, len(tests))
	for _, tt := range tests {
		name := "ssl-invalid"
		if strings.HasPrefix(tt.name, "metadata.name with a dot") {
			name = "ssl.invalid"
		} else if strings.HasPrefix(tt.name, "metadata.name") {
			name = strings.Repeat("l", 64)
		}
		out = append(out, badInput{Case: tt.name, Input: tt.spec, Doc: "apiVersion: app.anukkrit.me/v1\nkind: StatefulSetLock\nmetadata: {name: " + name + "}\nspec: " + tt.spec + "\n", Want: tt.want})
	}
	return out
}

func TestStatefulSetLockRejectsInvalid(t *testing.T) {
	runBadInputs(t, lockBadInputs())
}

// spec.services (SL-11) is accepted with one unnamed port, or named ports, and reads back as applied;
// a lock with Services may have a name of 60 characters (its Services' names are 63).
func TestStatefulSetLockServices(t *testing.T) {
	got := readBack(t, mustApply(t, `
apiVersion: app.anukkrit.me/v1
kind: StatefulSetLock
metadata: {name: ssl-services}
spec: {statefulSetName: db, leaseName: db-lease, leaseDurationSeconds: 30, services: {ports: [{name: pg, port: 5432}, {name: metrics, port: 80, targetPort: 9187}]}}
`))
	ports, ok := field(t, got, "spec.services.ports").([]any)
	require.True(t, ok)
	require.Len(t, ports, 2)
	require.EqualValues(t, 9187, ports[1].(map[string]any)["targetPort"])
	mustApply(t, "apiVersion: app.anukkrit.me/v1\nkind: StatefulSetLock\nmetadata: {name: s"+strings.Repeat("l", 59)+"}\nspec: {statefulSetName: db, leaseName: db-lease, leaseDurationSeconds: 30, services: {ports: [{port: 5432}]}}\n")
}

// A lock name of 63 characters, the longest label value, is accepted.
func TestStatefulSetLockLongestName(t *testing.T) {
	mustApply(t, "apiVersion: app.anukkrit.me/v1\nkind: StatefulSetLock\nmetadata: {name: "+strings.Repeat("l", 63)+"}\nspec: {statefulSetName: db, leaseName: db-lease, leaseDurationSeconds: 30}\n")
}

func TestStatefulSetLockUpdates(t *testing.T) {
	const doc = `
apiVersion: app.anukkrit.me/v1
kind: StatefulSetLock
metadata: {name: ssl-update}
spec: {statefulSetName: db, leaseName: db-lease, leaseDurationSeconds: 30}
`
	t.Run("statefulSetName is immutable", func(t *testing.T) {
		obj := mustApply(t, doc)
		rejectUpdateOf(t, obj, func(u *unstructured.Unstructured) {
			require.NoError(t, unstructured.SetNestedField(u.Object, "other", "spec", "statefulSetName"))
		}, "spec.statefulSetName", "immutable")
	})
	t.Run("leaseName is immutable", func(t *testing.T) {
		obj := mustApply(t, doc)
		rejectUpdateOf(t, obj, func(u *unstructured.Unstructured) {
			require.NoError(t, unstructured.SetNestedField(u.Object, "other-lease", "spec", "leaseName"))
		}, "spec.leaseName", "immutable")
	})
	t.Run("durations can change", func(t *testing.T) {
		obj := readBack(t, mustApply(t, doc))
		require.NoError(t, unstructured.SetNestedField(obj.Object, int64(10), "spec", "leaseDurationSeconds"))
		require.NoError(t, unstructured.SetNestedField(obj.Object, int64(5), "spec", "failoverDelaySeconds"))
		require.NoError(t, k8sClient.Update(t.Context(), obj))
	})
}

// SL-01: `kubectl get ssl` shows the StatefulSet, the writer pod and the lease duration, the public
// code's columns, beside ours. kubectl prints the Table the API server builds from the CRD's printer
// columns, so the test reads that Table.
func TestStatefulSetLockColumns(t *testing.T) {
	obj := mustApply(t, strings.Replace(seed002Lock, "name: postgres-cluster-lock", "name: ssl-columns", 1))
	httpClient, err := rest.HTTPClientFor(restConfig)
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet,
		strings.TrimSuffix(restConfig.Host, "/")+"/apis/app.anukkrit.me/v1/namespaces/"+obj.GetNamespace()+"/statefulsetlocks/"+obj.GetName(), nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := httpClient.Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s %s", req.URL, body)
	var table metav1.Table
	require.NoError(t, json.Unmarshal(body, &table))

	var shown []string // the columns of `kubectl get ssl`; priority > 0 only with -o wide
	for _, c := range table.ColumnDefinitions {
		if c.Priority == 0 {
			shown = append(shown, c.Name)
		}
	}
	require.Equal(t, []string{"Name", "StatefulSet", "Writer Pod", "Lease", "Lease Duration", "Ready", "Age"}, shown)
	require.Len(t, table.Rows, 1)
	cells := map[string]any{}
	for i, c := range table.ColumnDefinitions {
		cells[c.Name] = table.Rows[0].Cells[i]
	}
	require.Equal(t, "postgres-cluster", cells["StatefulSet"])
	require.Equal(t, "postgres-cluster-leader-lease", cells["Lease"])
	require.EqualValues(t, 30, cells["Lease Duration"])
}
