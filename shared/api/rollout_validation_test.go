//go:build integration

package api_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// seed003Rollout and seed003Secret are seed 003's example, verbatim except that the seed separates
// them with "--", which is not a YAML document separator.
const seed003Rollout = `
apiVersion: sts.plus/v1alpha1
kind: PhasedRollout
metadata:
  name: phasedrollout-sample
spec:
  targetRef: web   #the name of the statefulset to manage
  skipCheck: false #if true, the normal rolling update will be resumed
  check:
    initialDelaySeconds: 30 #initial delay to wait after a pod is rolled, to permit prometheus to get fresh data
    periodSeconds: 30       #
    maxTries: 10
    successThreshold: 3
    query:
      expr: "up{}"           # prometheus query 
      url: prom:9000/xx      # url of the prometheus endpoint (i.e. without the ` + "`/api/v1/query`" + ` path)
      secretRef: prom-secret # optional secret to authenticate to prometheus
`

const seed003Secret = `
apiVersion: v1
stringData:
  token: token #optional token for bearer authentication
  password: password #optional username to use for basic authentication
  username: username #optional password to use for basic authentication
kind: Secret
metadata:
  name: prom-secret
type: Opaque
`

// publicRolloutSample is the README example of the later public code, which spells skipCheck
// standardRollingUpdate and has no maxTries.
const publicRolloutSample = `
apiVersion: sts.plus/v1alpha1
kind: PhasedRollout
metadata:
  name: phasedrollout-sample
spec:
  targetRef: web               # the name of the statefulset to manage
  standardRollingUpdate: false # if true, the normal rolling update will be resumed
  check:
    initialDelaySeconds: 30 # initial delay to wait after a pod is rolled, to permit prometheus to get fresh data
    periodSeconds: 30       # interval between checks
    successThreshold: 3     # number of consecutive success checks to consider the rollout step good
    query:
      expr: "up{}"           # prometheus query 
      url: prom:9000/xx      # url of the prometheus endpoint (i.e. without the ` + "`/api/v1/query`" + ` path)
      secretRef: prom-secret # optional secret to authenticate to prometheus
`

func TestPhasedRolloutDefaults(t *testing.T) {
	checkDefaults := map[string]any{
		"spec.check.initialDelaySeconds": 60,
		"spec.check.periodSeconds":       60,
		"spec.check.successThreshold":    3,
		"spec.check.successWhen":         "NoData",
		"spec.check.onFailure":           "Pause",
	}
	tests := []struct {
		name   string
		doc    string
		want   map[string]any
		absent []string
	}{
		{
			name: "seed 003 example",
			doc:  seed003Rollout,
			want: map[string]any{
				"spec.targetRef":                 "web",
				"spec.skipCheck":                 false,
				"spec.check.initialDelaySeconds": 30,
				"spec.check.periodSeconds":       30,
				"spec.check.maxTries":            10,
				"spec.check.successThreshold":    3,
				"spec.check.successWhen":         "NoData",
				"spec.check.onFailure":           "Pause",
				"spec.check.query.expr":          "up{}",
				"spec.check.query.url":           "prom:9000/xx",
				"spec.check.query.secretRef":     "prom-secret",
			},
			absent: []string{"spec.standardRollingUpdate", "spec.check.query.insecureSkipVerify"},
		},
		{
			name:   "public code sample (standardRollingUpdate alias)",
			doc:    publicRolloutSample,
			want:   map[string]any{"spec.standardRollingUpdate": false, "spec.check.successWhen": "NoData"},
			absent: []string{"spec.skipCheck", "spec.check.maxTries"},
		},
		{
			name: "no check block (skipCheck)",
			doc: `
apiVersion: sts.plus/v1alpha1
kind: PhasedRollout
metadata: {name: pr-no-check}
spec: {targetRef: web, skipCheck: true}
`,
			want:   checkDefaults,
			absent: []string{"spec.check.query", "spec.check.maxTries"},
		},
		{
			name: "no check block (standardRollingUpdate)",
			doc: `
apiVersion: sts.plus/v1alpha1
kind: PhasedRollout
metadata: {name: pr-no-check-alias}
spec: {targetRef: web, standardRollingUpdate: true}
`,
			want: checkDefaults,
		},
		{
			name: "check with only a query",
			doc: `
apiVersion: sts.plus/v1alpha1
kind: PhasedRollout
metadata: {name: pr-query-only}
spec:
  targetRef: web
  check: {query: {expr: 'up == 0', url: 'http://prometheus:9090'}}
`,
			want:   checkDefaults,
			absent: []string{"spec.skipCheck", "spec.standardRollingUpdate"},
		},
		{
			name: "explicit zero initialDelaySeconds, both aliases, inverse semantic, rollback",
			doc: `
apiVersion: sts.plus/v1alpha1
kind: PhasedRollout
metadata: {name: pr-explicit}
spec:
  targetRef: web
  skipCheck: false
  standardRollingUpdate: false
  check:
    initialDelaySeconds: 0
    periodSeconds: 1
    successThreshold: 1
    maxTries: 1
    successWhen: DataReturned
    onFailure: Rollback
    query: {expr: 'up{job="web"} == 1', url: 'https://prometheus:9090', insecureSkipVerify: true}
`,
			want: map[string]any{
				"spec.check.initialDelaySeconds":      0,
				"spec.check.periodSeconds":            1,
				"spec.check.successThreshold":         1,
				"spec.check.maxTries":                 1,
				"spec.check.successWhen":              "DataReturned",
				"spec.check.onFailure":                "Rollback",
				"spec.check.query.insecureSkipVerify": true,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := readBack(t, mustApply(t, tt.doc))
			for path, want := range tt.want {
				require.EqualValues(t, want, field(t, got, path), path)
			}
			for _, path := range tt.absent {
				_, found, err := unstructured.NestedFieldNoCopy(got.Object, strings.Split(path, ".")...)
				require.NoError(t, err)
				require.False(t, found, "%s should not be set", path)
			}
		})
	}
}

func TestPhasedRolloutSeedSecretApplies(t *testing.T) {
	mustApply(t, seed003Secret)
	mustApply(t, seed003Rollout)
}

// rolloutBadInputs are PhasedRollouts the operator could never act on.
func rolloutBadInputs() []badInput {
	const query = "    query: {expr: 'up == 0', url: 'http://prometheus:9090'}\n"
	tests := []struct {
		name string
		spec string // the object's spec block, indented by two spaces
		want []string
	}{
		{"targetRef missing", "  check:\n" + query, []string{"spec.targetRef", "Required value"}},
		{"targetRef not a DNS name", "  targetRef: Web_1\n  check:\n" + query, []string{"spec.targetRef"}},
		{"targetRef of 64 characters", "  targetRef: " + strings.Repeat("w", 64) + "\n  check:\n" + query, []string{"spec.targetRef", "may not be more than 63"}},
		{"successThreshold 0", "  targetRef: web\n  check:\n    successThreshold: 0\n" + query, []string{"spec.check.successThreshold"}},
		{"periodSeconds 0", "  targetRef: web\n  check:\n    periodSeconds: 0\n" + query, []string{"spec.check.periodSeconds"}},
		{"initialDelaySeconds negative", "  targetRef: web\n  check:\n    initialDelaySeconds: -1\n" + query, []string{"spec.check.initialDelaySeconds"}},
		{"maxTries 0", "  targetRef: web\n  check:\n    maxTries: 0\n" + query, []string{"spec.check.maxTries"}},
		{
			"maxTries below successThreshold (CEL)",
			"  targetRef: web\n  check:\n    maxTries: 2\n    successThreshold: 3\n" + query,
			[]string{"spec.check.maxTries", "must be >= spec.check.successThreshold"},
		},
		{
			"maxTries below the default successThreshold (CEL after defaulting)",
			"  targetRef: web\n  check:\n    maxTries: 2\n" + query,
			[]string{"spec.check.maxTries", "must be >= spec.check.successThreshold"},
		},
		{
			"skipCheck and standardRollingUpdate conflict (CEL)",
			"  targetRef: web\n  skipCheck: true\n  standardRollingUpdate: false\n",
			[]string{"spec.standardRollingUpdate", "spec.skipCheck"},
		},
		{"no check block and checks not skipped (CEL)", "  targetRef: web\n", []string{"spec.check.query", "required unless spec.skipCheck"}},
		{"check without query (CEL)", "  targetRef: web\n  skipCheck: false\n  check: {periodSeconds: 30}\n", []string{"spec.check.query", "required unless spec.skipCheck"}},
		{"query.expr missing", "  targetRef: web\n  check:\n    query: {url: 'http://prometheus:9090'}\n", []string{"spec.check.query.expr", "Required value"}},
		{"query.url missing", "  targetRef: web\n  check:\n    query: {expr: 'up == 0'}\n", []string{"spec.check.query.url", "Required value"}},
		{"query.url with another scheme (CEL)", "  targetRef: web\n  check:\n    query: {expr: 'up == 0', url: 'ftp://prometheus:9090'}\n", []string{"spec.check.query.url", "http or https"}},
		{"query.url without a host (CEL)", "  targetRef: web\n  check:\n    query: {expr: 'up == 0', url: 'http://'}\n", []string{"spec.check.query.url", "must be a URL with a host"}},
		{"query.url only a port (CEL)", "  targetRef: web\n  check:\n    query: {expr: 'up == 0', url: 'http://:9090'}\n", []string{"spec.check.query.url", "must be a URL with a host"}},
		{"query.url not a URL (CEL)", "  targetRef: web\n  check:\n    query: {expr: 'up == 0', url: '::not a url::'}\n", []string{"spec.check.query.url", "must be a URL with a host"}},
		{"query.secretRef not a Secret name", "  targetRef: web\n  check:\n    query: {expr: 'up == 0', url: 'http://prometheus:9090', secretRef: 'Prom Creds'}\n", []string{"spec.check.query.secretRef"}},
		{"successWhen unknown", "  targetRef: web\n  check:\n    successWhen: Maybe\n" + query, []string{"spec.check.successWhen", "Unsupported value"}},
		{"onFailure unknown", "  targetRef: web\n  check:\n    onFailure: Retry\n" + query, []string{"spec.check.onFailure", "Unsupported value"}},
		// Steps in batches and stuck-pod recovery (issue 18).
		{"steps empty", "  targetRef: web\n  steps: []\n  check:\n" + query, []string{"spec.steps", "at least 1 item"}},
		{"steps pods 0", "  targetRef: web\n  steps: [{pods: 0}]\n  check:\n" + query, []string{"spec.steps[0].pods", "greater than or equal to 1"}},
		{"steps pods missing", "  targetRef: web\n  steps: [{pause: {duration: 30s}}]\n  check:\n" + query, []string{"spec.steps[0].pods", "Required value"}},
		{"steps more than 64", "  targetRef: web\n  steps: [" + strings.Repeat("{pods: 1}, ", 64) + "{pods: 1}]\n  check:\n" + query, []string{"spec.steps", "must have at most 64 items"}},
		{"pause without duration", "  targetRef: web\n  steps: [{pods: 1, pause: {}}]\n  check:\n" + query, []string{"spec.steps[0].pause.duration", "Required value"}},
		{"pause duration not a duration (CEL)", "  targetRef: web\n  steps: [{pods: 1, pause: {duration: soon}}]\n  check:\n" + query, []string{"spec.steps[0].pause.duration", "must be a duration such as 30s"}},
		{"pause duration without a unit (CEL)", "  targetRef: web\n  steps: [{pods: 1, pause: {duration: '30'}}]\n  check:\n" + query, []string{"spec.steps[0].pause.duration", "must be a duration such as 30s"}},
		{"pause duration below 1s (CEL)", "  targetRef: web\n  steps: [{pods: 1, pause: {duration: 500ms}}]\n  check:\n" + query, []string{"spec.steps[0].pause.duration", "from 1s to 24h"}},
		{"pause duration above 24h (CEL)", "  targetRef: web\n  steps: [{pods: 1, pause: {duration: 25h}}]\n  check:\n" + query, []string{"spec.steps[0].pause.duration", "from 1s to 24h"}},
		{"progressDeadlineSeconds 0", "  targetRef: web\n  recreateStuckPods: true\n  progressDeadlineSeconds: 0\n  check:\n" + query, []string{"spec.progressDeadlineSeconds", "greater than or equal to 1"}},
	}
	out := make([]badInput, 0, len(tests))
	for _, tt := range tests {
		out = append(out, badInput{Case: tt.name, Input: tt.spec, Doc: "apiVersion: sts.plus/v1alpha1\nkind: PhasedRollout\nmetadata: {name: pr-invalid}\nspec:\n" + tt.spec, Want: tt.want})
	}
	return out
}

func TestPhasedRolloutRejectsInvalid(t *testing.T) {
	runBadInputs(t, rolloutBadInputs())
}

// Prometheus URLs in the shapes users write are accepted: without a scheme (the original's example),
// with a path, an IPv6 address or credentials.
func TestPhasedRolloutAcceptsURLs(t *testing.T) {
	for i, url := range []string{"prom:9000/xx", "http://prometheus-operated.monitoring.svc:9090", "https://prom.example.com/prometheus", "http://[::1]:9090", "http://10.0.0.1:9090"} {
		mustApply(t, fmt.Sprintf("apiVersion: sts.plus/v1alpha1\nkind: PhasedRollout\nmetadata: {name: pr-url-%d}\nspec:\n  targetRef: web\n  check:\n    query: {expr: 'up == 0', url: '%s'}\n", i, url))
	}
}

func TestPhasedRolloutUpdates(t *testing.T) {
	const doc = `
apiVersion: sts.plus/v1alpha1
kind: PhasedRollout
metadata: {name: pr-update}
spec:
  targetRef: web
  check: {query: {expr: 'up == 0', url: 'http://prometheus:9090'}}
`
	t.Run("targetRef is immutable", func(t *testing.T) {
		obj := mustApply(t, doc)
		rejectUpdateOf(t, obj, func(u *unstructured.Unstructured) {
			require.NoError(t, unstructured.SetNestedField(u.Object, "other", "spec", "targetRef"))
		}, "spec.targetRef", "immutable")
	})
	t.Run("setting a conflicting alias is refused", func(t *testing.T) {
		obj := mustApply(t, doc)
		rejectUpdateOf(t, obj, func(u *unstructured.Unstructured) {
			require.NoError(t, unstructured.SetNestedField(u.Object, true, "spec", "skipCheck"))
			require.NoError(t, unstructured.SetNestedField(u.Object, false, "spec", "standardRollingUpdate"))
		}, "spec.standardRollingUpdate")
	})
	t.Run("skipCheck and check can change", func(t *testing.T) {
		obj := readBack(t, mustApply(t, doc))
		require.NoError(t, unstructured.SetNestedField(obj.Object, true, "spec", "skipCheck"))
		require.NoError(t, unstructured.SetNestedField(obj.Object, int64(5), "spec", "check", "successThreshold"))
		require.NoError(t, k8sClient.Update(t.Context(), obj))
	})
}
