//go:build integration

package api_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// extendedStatefulSetSeed is the "Example Resource" of seed 004 with its one mechanical fix: the invalid
// metadata.name MyExtendedStatefulSet lowercased. Everything else, comments and the null az included, is
// unchanged.
const extendedStatefulSetSeed = `
---
apiVersion: fissile.cloudfoundry.org/v1alpha1
kind: ExtendedStatefulSet
metadata:
  name: myextendedstatefulset
spec:
  az:  
  scaling:
    # Minimum replica count for the StatefulSet
    min: 3
    # Maximum replica count for the StatefulSet
    max: 13
    # If true, only odd replica counts are valid when scaling the StatefulSet
    oddOnly: true
  # If true, the StatefulSet will be updated When an env value or mount changes
  updateOnEnvChange: true
  updateStrategy:
    canaries: 1
    retryCount: 2
    updateNotReady: true

  # Below you can see a template for a regular StatefulSet
  # Nothing else is custom below this point
  template:
    metadata:
      labels:
        a-label-for-my-stateful-set: "foo"
    spec:
      selector:
        matchLabels:
          app: my-app
      serviceName: "app"
      template:
        metadata:
          labels:
            app: my-app
        spec:
          terminationGracePeriodSeconds: 10
          containers:
          - name: my-web-app
            image: k8s.gcr.io/nginx-slim:0.8
            ports:
            - containerPort: 80
              name: web
`

// extendedStatefulSet returns a valid ExtendedStatefulSet named name with the given extra spec lines
// (children of spec) and extra template.spec lines (children of spec.template.spec).
func extendedStatefulSet(name, extraSpec, extraTemplateSpec string) string {
	return `
apiVersion: fissile.cloudfoundry.org/v1alpha1
kind: ExtendedStatefulSet
metadata:
  name: ` + name + `
spec:
` + extraSpec + `
  template:
    spec:
      selector:
        matchLabels:
          app: ` + name + `
      template:
        metadata:
          labels:
            app: ` + name + `
        spec:
          containers:
          - name: app
            image: registry.k8s.io/pause:3.10
` + extraTemplateSpec
}

// scaling5to9odd is a scaling block used by several cases.
const scaling5to9odd = `
  scaling:
    min: 5
    max: 9
    oddOnly: true
`

func TestExtendedStatefulSetDefaults(t *testing.T) {
	tests := map[string]struct {
		doc    string
		want   map[string]any
		absent []string
		null   []string // absent or null
	}{
		"seed 004 example": {
			doc: extendedStatefulSetSeed,
			want: map[string]any{
				"spec.scaling.min":             int64(3),
				"spec.scaling.max":             int64(13),
				"spec.scaling.oddOnly":         true,
				"spec.updateOnEnvChange":       true,
				"spec.updateStrategy.canaries": int64(1),
				// Nothing changes for objects written before spec.updateStrategy.type: versioned upgrades.
				"spec.updateStrategy.type":                "Versioned",
				"spec.updateStrategy.retryCount":          int64(2),
				"spec.updateStrategy.updateNotReady":      true,
				"spec.updateStrategy.canaryWatchTime":     "5m",
				"spec.updateStrategy.updateWatchTime":     "5m",
				"spec.template.metadata.labels":           map[string]any{"a-label-for-my-stateful-set": "foo"},
				"spec.template.spec.serviceName":          "app",
				"spec.template.spec.selector.matchLabels": map[string]any{"app": "my-app"},
				// The pod template's labels must survive: the StatefulSet's selector must match them.
				"spec.template.spec.template.metadata.labels": map[string]any{"app": "my-app"},
			},
			// replicas stay unset: the operator uses scaling.min.
			absent: []string{"spec.template.spec.replicas", "spec.upgradeJobs"},
			// az: null is accepted (and kept as null, meaning no zones).
			null: []string{"spec.az"},
		},
		"minimal": {
			doc: extendedStatefulSet("ests-minimal", "", ""),
			want: map[string]any{
				"spec.updateStrategy.canaries":        int64(1),
				"spec.updateStrategy.canaryWatchTime": "5m",
				"spec.updateStrategy.updateWatchTime": "5m",
			},
			absent: []string{"spec.scaling", "spec.updateOnEnvChange", "spec.updateOnConfigChange", "spec.az"},
		},
		"empty scaling, zones and upgrade jobs": {
			doc: extendedStatefulSet("ests-zones", `
  scaling: {}
  updateOnConfigChange: true
  az:
    zones: [zone-a, zone-b, zone-c]
  upgradeJobs:
    pre:
      spec:
        template:
          spec:
            restartPolicy: Never
            containers:
            - name: migrate
              image: registry.k8s.io/pause:3.10
`, "      replicas: 3\n"),
			want: map[string]any{
				"spec.scaling.min":                       int64(1),
				"spec.scaling.oddOnly":                   false,
				"spec.updateOnConfigChange":              true,
				"spec.az.zones":                          []any{"zone-a", "zone-b", "zone-c"},
				"spec.az.nodeLabel":                      "topology.kubernetes.io/zone",
				"spec.az.zoneRemovalPolicy":              "Retain",
				"spec.upgradeJobs.rollbackOnPostFailure": false,
				"spec.upgradeJobs.historyLimit":          int64(3),
				"spec.template.spec.replicas":            int64(3),
			},
			absent: []string{"spec.scaling.max", "spec.updateOnEnvChange"},
		},
		"both alias spellings, legacy zone label, scale to zero": {
			doc: extendedStatefulSet("ests-aliases", `
  scaling:
    min: 0
  updateOnEnvChange: false
  updateOnConfigChange: false
  az:
    nodeLabel: failure-domain.beta.kubernetes.io/zone
    zones: [z1]
`, "      replicas: 0\n"),
			want: map[string]any{
				"spec.scaling.min":            int64(0),
				"spec.updateOnEnvChange":      false,
				"spec.updateOnConfigChange":   false,
				"spec.az.nodeLabel":           "failure-domain.beta.kubernetes.io/zone",
				"spec.template.spec.replicas": int64(0),
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := readBack(t, mustApply(t, tc.doc))
			for path, want := range tc.want {
				assert.Equal(t, want, field(t, got, path), path)
			}
			for _, path := range tc.absent {
				_, found, err := unstructured.NestedFieldNoCopy(got.Object, strings.Split(path, ".")...)
				require.NoError(t, err)
				assert.False(t, found, "%s should stay unset", path)
			}
			for _, path := range tc.null {
				v, _, err := unstructured.NestedFieldNoCopy(got.Object, strings.Split(path, ".")...)
				require.NoError(t, err)
				assert.Nil(t, v, "%s should be null or unset", path)
			}
		})
	}
}

// TestExtendedStatefulSetSeedServerSideApply applies the seed example as `kubectl apply --server-side`
// does (the way to install CRs next to CRDs too big for client-side apply); az: null must pass there too.
func TestExtendedStatefulSetSeedServerSideApply(t *testing.T) {
	obj := decode(t, extendedStatefulSetSeed)
	obj.SetName("myextendedstatefulset-ssa")
	require.NoError(t, k8sClient.Patch(t.Context(), obj, client.Apply, client.FieldOwner("validation-test")))
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), obj) })
	got := readBack(t, obj)
	assert.Equal(t, int64(3), field(t, got, "spec.scaling.min"))
	assert.Equal(t, "5m", field(t, got, "spec.updateStrategy.canaryWatchTime"))
}

// extendedBadInputs are ExtendedStatefulSets the operator could never act on.
func extendedBadInputs() []badInput {
	tests := map[string]struct {
		doc  string
		want []string
	}{
		"scaling.min above scaling.max": {
			doc:  extendedStatefulSet("ests-min-max", "  scaling: {min: 5, max: 3}\n", ""),
			want: []string{"spec.scaling.min", "spec.scaling.min (5) must be <= spec.scaling.max (3)"},
		},
		"replicas above scaling.max": {
			doc:  extendedStatefulSet("ests-above-max", "  scaling: {min: 3, max: 13, oddOnly: true}\n", "      replicas: 15\n"),
			want: []string{"spec.template.spec.replicas", "must be between spec.scaling.min (3) and spec.scaling.max (13)"},
		},
		"replicas below scaling.min": {
			doc:  extendedStatefulSet("ests-below-min", scaling5to9odd, "      replicas: 3\n"),
			want: []string{"spec.template.spec.replicas", "spec.template.spec.replicas (3) must be between spec.scaling.min (5) and spec.scaling.max (9)"},
		},
		"replicas below scaling.min without max": {
			doc:  extendedStatefulSet("ests-below-min-nomax", "  scaling: {min: 2}\n", "      replicas: 1\n"),
			want: []string{"spec.template.spec.replicas", "must be at least spec.scaling.min (2)"},
		},
		"replicas 0 with the default scaling.min": {
			doc:  extendedStatefulSet("ests-zero-default-min", "  scaling: {}\n", "      replicas: 0\n"),
			want: []string{"spec.template.spec.replicas", "must be at least spec.scaling.min (1)"},
		},
		"even replicas with oddOnly": {
			doc:  extendedStatefulSet("ests-even", scaling5to9odd, "      replicas: 6\n"),
			want: []string{"spec.template.spec.replicas", "spec.template.spec.replicas (6) must be odd because spec.scaling.oddOnly is true"},
		},
		"even scaling.min with oddOnly": {
			doc:  extendedStatefulSet("ests-even-min", "  scaling: {min: 2, max: 9, oddOnly: true}\n", ""),
			want: []string{"spec.scaling.min", "spec.scaling.min (2) must be odd because spec.scaling.oddOnly is true"},
		},
		"negative scaling.min": {
			doc:  extendedStatefulSet("ests-neg-min", "  scaling: {min: -1}\n", ""),
			want: []string{"spec.scaling.min"},
		},
		"scaling.max 0": {
			doc:  extendedStatefulSet("ests-max-zero", "  scaling: {min: 0, max: 0}\n", ""),
			want: []string{"spec.scaling.max"},
		},
		"update flag aliases disagree": {
			doc:  extendedStatefulSet("ests-alias-conflict", "  updateOnEnvChange: true\n  updateOnConfigChange: false\n", ""),
			want: []string{"spec.updateOnConfigChange", "aliases"},
		},
		"negative canaries": {
			doc:  extendedStatefulSet("ests-neg-canaries", "  updateStrategy: {canaries: -1}\n", ""),
			want: []string{"spec.updateStrategy.canaries"},
		},
		"retryCount too large": {
			doc:  extendedStatefulSet("ests-retries", "  updateStrategy: {retryCount: 1000}\n", ""),
			want: []string{"spec.updateStrategy.retryCount"},
		},
		"canaryWatchTime not a duration": {
			doc:  extendedStatefulSet("ests-watch-bad", "  updateStrategy: {canaryWatchTime: soon}\n", ""),
			want: []string{"spec.updateStrategy.canaryWatchTime"},
		},
		"updateWatchTime too short": {
			doc:  extendedStatefulSet("ests-watch-short", "  updateStrategy: {updateWatchTime: 10ms}\n", ""),
			want: []string{"spec.updateStrategy.updateWatchTime", "at least 1s"},
		},
		"invalid zone name": {
			doc:  extendedStatefulSet("ests-bad-zone", "  az: {zones: [\"zone a\"]}\n", ""),
			want: []string{"spec.az.zones[0]"},
		},
		"duplicate zones": {
			doc:  extendedStatefulSet("ests-dup-zone", "  az: {zones: [a, a]}\n", ""),
			want: []string{"spec.az.zones[1]", "Duplicate value"},
		},
		"unknown zoneRemovalPolicy": {
			doc:  extendedStatefulSet("ests-bad-removal", "  az: {zones: [a], zoneRemovalPolicy: Orphan}\n", ""),
			want: []string{"spec.az.zoneRemovalPolicy", "Unsupported value"},
		},
		"invalid nodeLabel": {
			doc:  extendedStatefulSet("ests-bad-label", "  az: {zones: [a], nodeLabel: \"zone label\"}\n", ""),
			want: []string{"spec.az.nodeLabel"},
		},
		"upgrade Job without a pod template": {
			doc:  extendedStatefulSet("ests-bad-job", "  upgradeJobs: {pre: {spec: {}}}\n", ""),
			want: []string{"spec.upgradeJobs.pre.spec.template", "Required value"},
		},
		"negative replicas": {
			doc:  extendedStatefulSet("ests-neg-replicas", "", "      replicas: -1\n"),
			want: []string{"spec.template.spec.replicas", "must not be negative"},
		},
		"podManagementPolicy unknown": {
			doc:  extendedStatefulSet("ests-bad-pmp", "", "      podManagementPolicy: Sequential\n"),
			want: []string{"spec.template.spec.podManagementPolicy", "must be OrderedReady or Parallel"},
		},
		"negative minReadySeconds": {
			doc:  extendedStatefulSet("ests-neg-minready", "", "      minReadySeconds: -5\n"),
			want: []string{"spec.template.spec.minReadySeconds", "must not be negative"},
		},
		"pod restartPolicy Never": {
			doc:  extendedStatefulSet("ests-restart-never", "", "          restartPolicy: Never\n"),
			want: []string{"spec.template.spec.template.spec.restartPolicy", "must be Always"},
		},
		"claim retention policy unknown": {
			doc:  extendedStatefulSet("ests-bad-retention", "", "      persistentVolumeClaimRetentionPolicy: {whenScaled: Keep}\n"),
			want: []string{"spec.template.spec.persistentVolumeClaimRetentionPolicy", "must be Retain or Delete"},
		},
		"upgrade Job with restartPolicy Always": {
			doc:  extendedStatefulSet("ests-job-always", "  upgradeJobs: {post: {spec: {template: {spec: {restartPolicy: Always, containers: [{name: post, image: busybox}]}}}}}\n", ""),
			want: []string{"spec.upgradeJobs.post.spec.template.spec.restartPolicy", "must be Never or OnFailure"},
		},
		"template without selector": {
			doc: `
apiVersion: fissile.cloudfoundry.org/v1alpha1
kind: ExtendedStatefulSet
metadata:
  name: ests-no-selector
spec:
  template:
    spec:
      template:
        spec:
          containers:
          - name: app
            image: registry.k8s.io/pause:3.10
`,
			want: []string{"spec.template.spec.selector", "Required value"},
		},
		"missing template": {
			doc: `
apiVersion: fissile.cloudfoundry.org/v1alpha1
kind: ExtendedStatefulSet
metadata:
  name: ests-no-template
spec:
  scaling: {min: 1}
`,
			want: []string{"spec.template", "Required value"},
		},
		"name too long": {
			doc:  extendedStatefulSet(strings.Repeat("e", 41), "", ""),
			want: []string{"metadata.name must be at most 40 characters"},
		},
		"selector operator unknown": {
			doc:  withSelector(extendedStatefulSet("ests-bad-op", "", ""), "ests-bad-op", "        matchExpressions: [{key: app, operator: Bogus, values: [ests-bad-op]}]\n"),
			want: []string{"spec.template.spec.selector.matchExpressions", "must be In, NotIn, Exists or DoesNotExist"},
		},
		"selector In without values": {
			doc:  withSelector(extendedStatefulSet("ests-in-novalues", "", ""), "ests-in-novalues", "        matchExpressions: [{key: app, operator: In}]\n"),
			want: []string{"spec.template.spec.selector.matchExpressions", "must not be empty when the operator is In or NotIn"},
		},
		"selector DoesNotExist with values": {
			doc:  withSelector(extendedStatefulSet("ests-dne-values", "", ""), "ests-dne-values", "        matchExpressions: [{key: legacy, operator: DoesNotExist, values: ['true']}]\n"),
			want: []string{"spec.template.spec.selector.matchExpressions", "must be empty when the operator is Exists or DoesNotExist"},
		},
		"selector empty": {
			doc:  withSelector(extendedStatefulSet("ests-empty-sel", "", ""), "ests-empty-sel", "        matchLabels: {}\n"),
			want: []string{"spec.template.spec.selector", "must not be empty"},
		},
		"selector matchLabels value differs from the template": {
			doc:  withSelector(extendedStatefulSet("ests-other", "", ""), "ests-other", "        matchLabels: {app: other}\n"),
			want: []string{"spec.template.spec.selector.matchLabels", "must all be in spec.template.spec.template.metadata.labels"},
		},
		"selector matchLabels key not in the template": {
			doc:  withSelector(extendedStatefulSet("ests-missing", "", ""), "ests-missing", "        matchLabels: {app: ests-missing, tier: db}\n"),
			want: []string{"spec.template.spec.selector.matchLabels", "must all be in spec.template.spec.template.metadata.labels"},
		},
		"selector In without the template's value": {
			doc:  withSelector(extendedStatefulSet("ests-in-bad", "", ""), "ests-in-bad", "        matchExpressions: [{key: app, operator: In, values: [other]}]\n"),
			want: []string{"spec.template.spec.selector.matchExpressions", "must be satisfied by the pod template's labels"},
		},
		"selector DoesNotExist on a template label": {
			doc:  withSelector(extendedStatefulSet("ests-dne-bad", "", ""), "ests-dne-bad", "        matchLabels: {app: ests-dne-bad}\n        matchExpressions: [{key: app, operator: DoesNotExist}]\n"),
			want: []string{"spec.template.spec.selector.matchExpressions", "must be satisfied by the pod template's labels"},
		},
		"selector label key invalid": {
			doc:  withSelector(extendedStatefulSet("ests-bad-key", "", ""), "ests-bad-key", "        matchLabels: {'app name': x}\n"),
			want: []string{"spec.template.spec.selector.matchLabels", "keys must be label keys"},
		},
		"window (updateStrategy.restartWindows) schedule that is not a 5-field cron expression (hour 25)": {
			doc:  extendedStatefulSet("ests-window-cron", "  updateStrategy:\n    restartWindows: [{schedule: '0 25 * * *', duration: 1h}]\n", ""),
			want: []string{"spec.updateStrategy.restartWindows[0].schedule", "schedule must be a 5-field cron expression"},
		},
		"window (updateStrategy.restartWindows) duration below 1m": {
			doc:  extendedStatefulSet("ests-window-short", "  updateStrategy:\n    restartWindows: [{schedule: '0 3 * * *', duration: 30s}]\n", ""),
			want: []string{"spec.updateStrategy.restartWindows[0].duration", "duration must be a duration between 1m and 168h"},
		},
		"window (updateStrategy.restartWindows) timeZone that is not a zone name": {
			doc:  extendedStatefulSet("ests-window-tz", "  updateStrategy:\n    restartWindows: [{schedule: '0 3 * * *', duration: 1h, timeZone: ../etc/passwd}]\n", ""),
			want: []string{"spec.updateStrategy.restartWindows[0].timeZone"},
		},
	}
	cases := sortedCases(tests, func(name string, tc struct {
		doc  string
		want []string
	}) badInput {
		return badInput{Case: name, Doc: tc.doc, Want: tc.want}
	})
	// Added later, at the end, so the rows above keep their numbers.
	var manyClaims strings.Builder
	for i := range 17 {
		fmt.Fprintf(&manyClaims, "      - {metadata: {name: v%d}, spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}}\n", i)
	}
	return append(cases,
		badInput{
			Case: "volumeClaimTemplates storage request shrunk (2Gi to 1Gi)", Input: "storage: 2Gi → storage: 1Gi",
			Before: extendedStatefulSet("ests-claim-shrink", "", claimTemplate("data", "2Gi")),
			Doc:    extendedStatefulSet("ests-claim-shrink", "", claimTemplate("data", "1Gi")),
			Want:   []string{"spec.template.spec.volumeClaimTemplates", "requests.storage must not shrink"},
		},
		badInput{
			Case: "more than 16 volumeClaimTemplates (a bound the shrink rule needs)",
			Doc:  extendedStatefulSet("ests-many-claims", "", "      volumeClaimTemplates:\n"+manyClaims.String()),
			Want: []string{"spec.template.spec.volumeClaimTemplates", "must have at most 16 items"},
		},
		badInput{
			Case: "updateStrategy.type InPlace with upgradeJobs",
			Doc: extendedStatefulSet("ests-inplace-jobs", "  updateStrategy: {type: InPlace}\n  upgradeJobs:\n    pre:\n      spec:\n        template:\n"+
				"          spec: {restartPolicy: Never, containers: [{name: pre, image: busybox}]}\n", ""),
			Want: []string{"spec.upgradeJobs", "spec.upgradeJobs needs spec.updateStrategy.type Versioned"},
		},
		badInput{
			Case: "updateStrategy.type InPlace with a template updateStrategy OnDelete",
			Doc:  extendedStatefulSet("ests-inplace-ondelete", "  updateStrategy: {type: InPlace}\n", "      updateStrategy: {type: OnDelete}\n"),
			Want: []string{"spec.template.spec.updateStrategy", "the operator owns the StatefulSet's partition"},
		},
		badInput{
			Case: "updateStrategy.type InPlace with a template partition",
			Doc: extendedStatefulSet("ests-inplace-partition", "  updateStrategy: {type: InPlace}\n",
				"      updateStrategy: {type: RollingUpdate, rollingUpdate: {partition: 1}}\n"),
			Want: []string{"spec.template.spec.updateStrategy", "the operator owns the StatefulSet's partition"},
		},
		badInput{
			Case: "updateStrategy.type changed (Versioned to InPlace)", Input: "type: Versioned → type: InPlace",
			Before: extendedStatefulSet("ests-type-change", "  updateStrategy: {type: Versioned}\n", ""),
			Doc:    extendedStatefulSet("ests-type-change", "  updateStrategy: {type: InPlace}\n", ""),
			Want:   []string{"spec.updateStrategy.type", "spec.updateStrategy.type cannot be changed"},
		},
		badInput{
			Case: "pod template label key beginning with a dash",
			Doc: strings.Replace(extendedStatefulSet("ests-pod-label-key", "", ""), "          labels:\n            app: ests-pod-label-key\n",
				"          labels:\n            app: ests-pod-label-key\n            -tier: web\n", 1),
			Want: []string{"spec.template.spec.template.metadata.labels", "keys must be label keys"},
		},
		badInput{
			Case: "pod template label value with a space",
			Doc: strings.Replace(extendedStatefulSet("ests-pod-label-value", "", ""), "          labels:\n            app: ests-pod-label-value\n",
				"          labels:\n            app: ests-pod-label-value\n            tier: 'web tier'\n", 1),
			Want: []string{"spec.template.spec.template.metadata.labels", "values must be label values"},
		},
		badInput{
			Case: "updateStrategy.restartVia PhasedRollout without type InPlace",
			Doc:  extendedStatefulSet("ests-restartvia-versioned", "  updateStrategy: {restartVia: PhasedRollout}\n", ""),
			Want: []string{"spec.updateStrategy.restartVia", "restartVia PhasedRollout needs spec.updateStrategy.type InPlace"},
		},
		badInput{
			Case: "updateStrategy.restartVia unknown",
			Doc:  extendedStatefulSet("ests-restartvia-unknown", "  updateStrategy: {type: InPlace, restartVia: Argo}\n", ""),
			Want: []string{"spec.updateStrategy.restartVia", "Unsupported value"},
		},
		badInput{
			Case: "updateStrategy.type unknown",
			Doc:  extendedStatefulSet("ests-type-unknown", "  updateStrategy: {type: BlueGreen}\n", ""),
			Want: []string{"spec.updateStrategy.type", "Unsupported value"},
		},
		badInput{
			Case: "updateStrategy.type InPlace: template selector changed", Input: "matchLabels: {app: x} → matchLabels: {app: x, tier: db}",
			Before: extendedStatefulSet("ests-inplace-selector", "  updateStrategy: {type: InPlace}\n", ""),
			Doc: strings.Replace(withSelector(extendedStatefulSet("ests-inplace-selector", "  updateStrategy: {type: InPlace}\n", ""), "ests-inplace-selector",
				"        matchLabels: {app: ests-inplace-selector, tier: db}\n"), "            app: ests-inplace-selector\n", "            app: ests-inplace-selector\n            tier: db\n", 1),
			Want: []string{"spec.template.spec.selector", "spec.template.spec.selector cannot be changed"},
		},
		badInput{
			Case: "updateStrategy.type InPlace: template serviceName changed", Input: "serviceName: a → serviceName: b",
			Before: extendedStatefulSet("ests-inplace-service", "  updateStrategy: {type: InPlace}\n", "      serviceName: a\n"),
			Doc:    extendedStatefulSet("ests-inplace-service", "  updateStrategy: {type: InPlace}\n", "      serviceName: b\n"),
			Want:   []string{"spec.template.spec.serviceName", "spec.template.spec.serviceName cannot be changed"},
		},
		badInput{
			Case: "updateStrategy.type InPlace: template podManagementPolicy changed", Input: "podManagementPolicy unset → Parallel",
			Before: extendedStatefulSet("ests-inplace-pmp", "  updateStrategy: {type: InPlace}\n", ""),
			Doc:    extendedStatefulSet("ests-inplace-pmp", "  updateStrategy: {type: InPlace}\n", "      podManagementPolicy: Parallel\n"),
			Want:   []string{"spec.template.spec.podManagementPolicy", "spec.template.spec.podManagementPolicy cannot be changed"},
		},
	)
}

func TestExtendedStatefulSetRejectsInvalid(t *testing.T) {
	runBadInputs(t, extendedBadInputs())
}

// TestExtendedStatefulSetScalingLimitsOnUpdate checks that the limits hold on every path that changes
// the replica count: an update of the object and the scale subresource (kubectl scale, autoscalers).
func TestExtendedStatefulSetScalingLimitsOnUpdate(t *testing.T) {
	obj := readBack(t, mustApply(t, extendedStatefulSet("ests-scale", scaling5to9odd, "      replicas: 5\n")))
	require.NoError(t, unstructured.SetNestedField(obj.Object, "app=ests-scale", "status", "selector"))
	require.NoError(t, unstructured.SetNestedField(obj.Object, int64(5), "status", "replicas"))
	require.NoError(t, k8sClient.Status().Update(t.Context(), obj))

	t.Run("update of the object", func(t *testing.T) {
		obj := readBack(t, obj)
		require.NoError(t, unstructured.SetNestedField(obj.Object, int64(11), "spec", "template", "spec", "replicas"))
		err := k8sClient.Update(t.Context(), obj)
		require.Error(t, err)
		require.True(t, apierrors.IsInvalid(err), "want an Invalid error, got: %v", err)
		assert.Contains(t, err.Error(), "spec.template.spec.replicas (11) must be between spec.scaling.min (5) and spec.scaling.max (9)")
	})

	t.Run("lowering scaling.max below replicas", func(t *testing.T) {
		obj := readBack(t, obj)
		require.NoError(t, unstructured.SetNestedField(obj.Object, int64(3), "spec", "scaling", "max"))
		err := k8sClient.Update(t.Context(), obj)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "spec.scaling.min (5) must be <= spec.scaling.max (3)")
	})

	scaleTo := func(t *testing.T, replicas int64) error {
		t.Helper()
		scale := &unstructured.Unstructured{}
		scale.SetGroupVersionKind(schema.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"})
		require.NoError(t, k8sClient.SubResource("scale").Get(t.Context(), obj, scale))
		assert.Equal(t, "app=ests-scale", field(t, scale, "status.selector"))
		require.NoError(t, unstructured.SetNestedField(scale.Object, replicas, "spec", "replicas"))
		return k8sClient.SubResource("scale").Update(t.Context(), obj, client.WithSubResourceBody(scale))
	}
	scaleTests := map[string]struct {
		replicas int64
		want     string // empty: accepted
	}{
		"scale above max": {replicas: 15, want: "spec.template.spec.replicas (15) must be between spec.scaling.min (5) and spec.scaling.max (9)"},
		"scale below min": {replicas: 3, want: "spec.template.spec.replicas (3) must be between spec.scaling.min (5) and spec.scaling.max (9)"},
		"scale to even":   {replicas: 6, want: "spec.template.spec.replicas (6) must be odd because spec.scaling.oddOnly is true"},
		"scale to 7":      {replicas: 7},
	}
	for name, tc := range scaleTests {
		t.Run(name, func(t *testing.T) {
			err := scaleTo(t, tc.replicas)
			if tc.want == "" {
				require.NoError(t, err)
				assert.Equal(t, tc.replicas, field(t, readBack(t, obj), "spec.template.spec.replicas"))
				return
			}
			require.Error(t, err, "the scale subresource accepted %d replicas", tc.replicas)
			require.True(t, apierrors.IsInvalid(err), "want an Invalid error, got: %v", err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// claimTemplate is a volumeClaimTemplates entry (children of spec.template.spec) named name requesting
// storage, in the form written (a quantity string, or a plain number of bytes).
func claimTemplate(name, storage string) string {
	return "      volumeClaimTemplates:\n      - metadata: {name: " + name + "}\n" +
		"        spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: " + storage + "}}}\n"
}

// TestExtendedStatefulSetClaimStorageOnUpdate checks the transition rule on volumeClaimTemplates: a
// template's storage request may grow (the operator resizes the claims) but not shrink, however the
// quantity is written; other changes to the templates are not its business.
func TestExtendedStatefulSetClaimStorageOnUpdate(t *testing.T) {
	tests := map[string]struct {
		before, after string
		want          string // empty: accepted
	}{
		"grow":                          {before: claimTemplate("data", "1Gi"), after: claimTemplate("data", "2Gi")},
		"same size written otherwise":   {before: claimTemplate("data", "1Gi"), after: claimTemplate("data", "1024Mi")},
		"grow from a number of bytes":   {before: claimTemplate("data", "1073741824"), after: claimTemplate("data", "1.5Gi")},
		"shrink":                        {before: claimTemplate("data", "2Gi"), after: claimTemplate("data", "1Gi"), want: "must not shrink"},
		"shrink written in other units": {before: claimTemplate("data", "1Gi"), after: claimTemplate("data", "1000M"), want: "must not shrink"},
		"shrink to a number of bytes":   {before: claimTemplate("data", "1Gi"), after: claimTemplate("data", "1000"), want: "must not shrink"},
		// Another name is another template (new claims): its size is free.
		"a renamed template is smaller": {before: claimTemplate("data", "2Gi"), after: claimTemplate("logs", "1Gi")},
		"templates added":               {before: "", after: claimTemplate("data", "1Gi")},
	}
	i := 0
	for name, tc := range tests {
		i++
		t.Run(name, func(t *testing.T) {
			obj := mustApply(t, extendedStatefulSet(fmt.Sprintf("ests-storage-%d", i), "", tc.before))
			after := decode(t, extendedStatefulSet(obj.GetName(), "", tc.after))
			cur := readBack(t, obj)
			cur.Object["spec"] = after.Object["spec"]
			err := k8sClient.Update(t.Context(), cur)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err, "the API server accepted a smaller storage request")
			require.True(t, apierrors.IsInvalid(err), "want an Invalid error, got: %v", err)
			assert.Contains(t, err.Error(), "spec.template.spec.volumeClaimTemplates")
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestExtendedStatefulSetUpdateStrategyTypeOnUpdate checks that spec.updateStrategy.type is fixed once
// the object exists, also for an object written before the field (defaulted to Versioned on read), and
// that an InPlace object otherwise updates as any other.
func TestExtendedStatefulSetUpdateStrategyTypeOnUpdate(t *testing.T) {
	tests := map[string]struct {
		before, after string
		want          string // empty: accepted
	}{
		"unset to InPlace":         {before: "", after: "  updateStrategy: {type: InPlace}\n", want: "spec.updateStrategy.type cannot be changed"},
		"InPlace to Versioned":     {before: "  updateStrategy: {type: InPlace}\n", after: "  updateStrategy: {type: Versioned}\n", want: "spec.updateStrategy.type cannot be changed"},
		"unset to Versioned":       {before: "", after: "  updateStrategy: {type: Versioned}\n"},
		"InPlace kept, canaries 2": {before: "  updateStrategy: {type: InPlace}\n", after: "  updateStrategy: {type: InPlace, canaries: 2}\n"},
	}
	i := 0
	for name, tc := range tests {
		i++
		t.Run(name, func(t *testing.T) {
			obj := mustApply(t, extendedStatefulSet(fmt.Sprintf("ests-type-%d", i), tc.before, ""))
			after := decode(t, extendedStatefulSet(obj.GetName(), tc.after, ""))
			cur := readBack(t, obj)
			cur.Object["spec"] = after.Object["spec"]
			err := k8sClient.Update(t.Context(), cur)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err, "the API server accepted a change of spec.updateStrategy.type")
			require.True(t, apierrors.IsInvalid(err), "want an Invalid error, got: %v", err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestExtendedStatefulSetInPlaceFixedFieldsOnUpdate checks that with type InPlace a change of the
// StatefulSet fields fixed at creation (serviceName, podManagementPolicy; selector in the bad-input
// rows) is refused, the API's default written out is no change, and other fields still change.
func TestExtendedStatefulSetInPlaceFixedFieldsOnUpdate(t *testing.T) {
	i := 0
	ip := "  updateStrategy: {type: InPlace}\n"
	// In place, the fields the StatefulSet fixes at creation: unset and the API's default are the same.
	inPlaceFixed := map[string]struct {
		before, after string
		want          string
	}{
		"InPlace serviceName changed":                 {before: "      serviceName: a\n", after: "      serviceName: b\n", want: "spec.template.spec.serviceName cannot be changed"},
		"InPlace serviceName set":                     {before: "", after: "      serviceName: b\n", want: "spec.template.spec.serviceName cannot be changed"},
		"InPlace podManagementPolicy to Parallel":     {before: "", after: "      podManagementPolicy: Parallel\n", want: "spec.template.spec.podManagementPolicy cannot be changed"},
		"InPlace podManagementPolicy OrderedReady":    {before: "", after: "      podManagementPolicy: OrderedReady\n"},
		"InPlace serviceName kept, minReadySeconds 5": {before: "      serviceName: a\n", after: "      serviceName: a\n      minReadySeconds: 5\n"},
		"Versioned serviceName changed":               {before: "      serviceName: a\n", after: "      serviceName: b\n"},
	}
	for name, tc := range inPlaceFixed {
		i++
		t.Run(name, func(t *testing.T) {
			strategy := ip
			if strings.HasPrefix(name, "Versioned") {
				strategy = ""
			}
			obj := mustApply(t, extendedStatefulSet(fmt.Sprintf("ests-fixed-%d", i), strategy, tc.before))
			after := decode(t, extendedStatefulSet(obj.GetName(), strategy, tc.after))
			cur := readBack(t, obj)
			cur.Object["spec"] = after.Object["spec"]
			err := k8sClient.Update(t.Context(), cur)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err, "the API server accepted a change the in-place StatefulSet cannot take")
			require.True(t, apierrors.IsInvalid(err), "want an Invalid error, got: %v", err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
