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
		{"targetRef missing (CEL)", "  check:\n" + query, []string{"spec", "exactly one of spec.targetRef and spec.targetRefs"}},
		{"targetRef and targetRefs both set (CEL)", "  targetRef: web\n  targetRefs: [zone-a]\n  check:\n" + query, []string{"spec", "exactly one of spec.targetRef and spec.targetRefs"}},
		{"targetRefs empty", "  targetRefs: []\n  check:\n" + query, []string{"spec.targetRefs", "at least 1 item"}},
		{"targetRefs with a duplicate (CEL)", "  targetRefs: [zone-a, zone-a]\n  check:\n" + query, []string{"spec.targetRefs", "must not name a StatefulSet twice"}},
		{"targetRefs element not a DNS name", "  targetRefs: [zone-a, Zone_B]\n  check:\n" + query, []string{"spec.targetRefs[1]"}},
		{"targetRefs more than 16", "  targetRefs: [" + strings.Repeat("z, ", 16) + "z]\n  check:\n" + query, []string{"spec.targetRefs", "must have at most 16 items"}},
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
		{
			"analysisOnly with skipCheck (CEL)",
			"  targetRef: web\n  skipCheck: true\n  analysisOnly: true\n",
			[]string{"spec.analysisOnly", "cannot be combined with spec.skipCheck"},
		},
		{
			"analysisOnly with standardRollingUpdate (CEL)",
			"  targetRef: web\n  standardRollingUpdate: true\n  analysisOnly: true\n",
			[]string{"spec.analysisOnly", "cannot be combined with spec.skipCheck"},
		},
		{"paused not a boolean", "  targetRef: web\n  paused: 'yes'\n  check:\n" + query, []string{"spec.paused"}},
		{"no check block and checks not skipped (CEL)", "  targetRef: web\n", []string{"spec.check.query", "required unless spec.skipCheck"}},
		{"check without query (CEL)", "  targetRef: web\n  skipCheck: false\n  check: {periodSeconds: 30}\n", []string{"spec.check.query", "required unless spec.skipCheck"}},
		{"query.expr missing", "  targetRef: web\n  check:\n    query: {url: 'http://prometheus:9090'}\n", []string{"spec.check.query.expr", "Required value"}},
		{"query.url missing", "  targetRef: web\n  check:\n    query: {expr: 'up == 0'}\n", []string{"spec.check.query.url", "Required value"}},
		{"query.url with another scheme (CEL)", "  targetRef: web\n  check:\n    query: {expr: 'up == 0', url: 'ftp://prometheus:9090'}\n", []string{"spec.check.query.url", "http or https"}},
		{"query.url without a host (CEL)", "  targetRef: web\n  check:\n    query: {expr: 'up == 0', url: 'http://'}\n", []string{"spec.check.query.url", "must be a URL with a host"}},
		{"query.url only a port (CEL)", "  targetRef: web\n  check:\n    query: {expr: 'up == 0', url: 'http://:9090'}\n", []string{"spec.check.query.url", "must be a URL with a host"}},
		{"query.url not a URL (CEL)", "  targetRef: web\n  check:\n    query: {expr: 'up == 0', url: '::not a url::'}\n", []string{"spec.check.query.url", "must be a URL with a host"}},
		{"query.secretRef not a Secret name", "  targetRef: web\n  check:\n    query: {expr: 'up == 0', url: 'http://prometheus:9090', secretRef: 'Prom Creds'}\n", []string{"spec.check.query.secretRef"}},
		{
			"both query and webhook (CEL)",
			"  targetRef: web\n  check:\n" + query + "    webhook: {url: 'http://gate.ops:8080/check'}\n",
			[]string{"spec.check.webhook", "alternatives"},
		},
		{"webhook.url missing", "  targetRef: web\n  check:\n    webhook: {timeoutSeconds: 5}\n", []string{"spec.check.webhook.url", "Required value"}},
		{"webhook.url without a scheme (CEL)", "  targetRef: web\n  check:\n    webhook: {url: 'gate.ops:8080/check'}\n", []string{"spec.check.webhook.url", "http or https"}},
		{"webhook.url with another scheme (CEL)", "  targetRef: web\n  check:\n    webhook: {url: 'ftp://gate.ops/check'}\n", []string{"spec.check.webhook.url", "http or https"}},
		{"webhook.url without a host (CEL)", "  targetRef: web\n  check:\n    webhook: {url: 'http://:8080/check'}\n", []string{"spec.check.webhook.url", "must be a URL with a host"}},
		{"webhook.timeoutSeconds 0", "  targetRef: web\n  check:\n    webhook: {url: 'http://gate.ops', timeoutSeconds: 0}\n", []string{"spec.check.webhook.timeoutSeconds"}},
		{"webhook.timeoutSeconds above 300", "  targetRef: web\n  check:\n    webhook: {url: 'http://gate.ops', timeoutSeconds: 301}\n", []string{"spec.check.webhook.timeoutSeconds"}},
		{"webhook.secretRef not a Secret name", "  targetRef: web\n  check:\n    webhook: {url: 'http://gate.ops', secretRef: 'Gate Creds'}\n", []string{"spec.check.webhook.secretRef"}},
		{"successWhen unknown", "  targetRef: web\n  check:\n    successWhen: Maybe\n" + query, []string{"spec.check.successWhen", "Unsupported value"}},
		{"onFailure unknown", "  targetRef: web\n  check:\n    onFailure: Retry\n" + query, []string{"spec.check.onFailure", "Unsupported value"}},
		{"checks with a duplicate name", "  targetRef: web\n  checks:\n  - " + namedCheck("errors") + "\n  - " + namedCheck("errors") + "\n", []string{"spec.checks[1]", "Duplicate value"}},
		{"17 checks (at most 16)", "", []string{"spec.checks", "must have at most 16 items"}},
		{"checks element without query or webhook (CEL)", "  targetRef: web\n  checks:\n  - {name: errors}\n", []string{"spec.checks[0]", "needs exactly one of query and webhook"}},
		{"checks element with both query and webhook (CEL)", "  targetRef: web\n  checks:\n  - {name: errors, webhook: {url: 'http://gate:8080/check'}, query: {expr: 'up', url: 'http://prometheus:9090'}}\n", []string{"spec.checks[0]", "needs exactly one of query and webhook"}},
		{"checks element name not a DNS label", "  targetRef: web\n  checks:\n  - " + namedCheck("Errors_1") + "\n", []string{"spec.checks[0].name"}},
		{"checks element named check beside spec.check's query (CEL)", "  targetRef: web\n  check:\n" + query + "  checks:\n  - " + namedCheck("check") + "\n", []string{"spec.checks", "must not be"}},
		{"noDataPolicy without successCondition (CEL)", "  targetRef: web\n  check:\n    noDataPolicy: Fail\n" + query, []string{"spec.check.noDataPolicy", "noDataPolicy needs successCondition"}},
		{"checks element noDataPolicy without successCondition (CEL)", "  targetRef: web\n  checks:\n  - {name: errors, noDataPolicy: Pass, query: {expr: 'up', url: 'http://prometheus:9090'}}\n", []string{"spec.checks[0].noDataPolicy", "noDataPolicy needs successCondition"}},
		{"errorPolicy unknown", "  targetRef: web\n  check:\n    errorPolicy: Ignore\n" + query, []string{"spec.check.errorPolicy", "Unsupported value"}},
		{"noDataPolicy unknown", "  targetRef: web\n  check:\n    successCondition: result < 1\n    noDataPolicy: Maybe\n" + query, []string{"spec.check.noDataPolicy", "Unsupported value"}},
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
	var many strings.Builder
	for i := range 17 {
		fmt.Fprintf(&many, "  - %s\n", namedCheck(fmt.Sprintf("c%d", i)))
	}
	for i := range tests {
		if tests[i].name == "17 checks (at most 16)" {
			tests[i].spec = "  targetRef: web\n  checks:\n" + many.String()
		}
	}
	out := make([]badInput, 0, len(tests))
	for _, tt := range tests {
		input := tt.spec
		if len(input) > 400 {
			input = "" // too long to show: the case says it
		}
		out = append(out, badInput{Case: tt.name, Input: input, Doc: "apiVersion: sts.plus/v1alpha1\nkind: PhasedRollout\nmetadata: {name: pr-invalid}\nspec:\n" + tt.spec, Want: tt.want})
	}
	return out
}

// namedCheck is a spec.checks element named name, in YAML flow style.
func namedCheck(name string) string {
	return "{name: " + name + ", query: {expr: 'up == 0', url: 'http://prometheus:9090'}}"
}

// spec.checks without a query in spec.check is accepted (the rule that requires spec.check.query is
// relaxed), each element gets spec.check's defaults, and the verdict fields are accepted.
func TestPhasedRolloutChecksWithoutCheckQuery(t *testing.T) {
	obj := readBack(t, mustApply(t, `
apiVersion: sts.plus/v1alpha1
kind: PhasedRollout
metadata: {name: pr-checks}
spec:
  targetRef: web
  checks:
  - {name: errors, query: {expr: 'up == 0', url: 'http://prometheus:9090'}}
  - name: latency
    successCondition: result < 0.5
    noDataPolicy: Inconclusive
    errorPolicy: Pause
    query: {expr: 'latency', url: 'http://prometheus:9090'}
`))
	checks, found, err := unstructured.NestedSlice(obj.Object, "spec", "checks")
	require.NoError(t, err)
	require.True(t, found)
	require.Len(t, checks, 2)
	for _, c := range checks {
		m := c.(map[string]any)
		require.EqualValues(t, 60, m["initialDelaySeconds"], "%v", m)
		require.EqualValues(t, 60, m["periodSeconds"])
		require.EqualValues(t, 3, m["successThreshold"])
		require.Equal(t, "NoData", m["successWhen"])
		require.Equal(t, "Pause", m["onFailure"])
		require.NotContains(t, m, "maxTries")
	}
	require.Equal(t, "Pause", checks[1].(map[string]any)["errorPolicy"])
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

// A check may be a webhook gate instead of a query: accepted without a query, timeoutSeconds
// defaulted to 10, the other check fields defaulted as for a query.
func TestPhasedRolloutAcceptsAWebhookCheck(t *testing.T) {
	got := readBack(t, mustApply(t, `
apiVersion: sts.plus/v1alpha1
kind: PhasedRollout
metadata: {name: pr-webhook}
spec:
  targetRef: web
  check:
    webhook: {url: 'https://gate.ops.svc:8443/rollout', secretRef: gate-token, insecureSkipVerify: true}
`))
	require.EqualValues(t, 10, field(t, got, "spec.check.webhook.timeoutSeconds"))
	require.EqualValues(t, "https://gate.ops.svc:8443/rollout", field(t, got, "spec.check.webhook.url"))
	require.EqualValues(t, 3, field(t, got, "spec.check.successThreshold"))
	_, found, err := unstructured.NestedFieldNoCopy(got.Object, "spec", "check", "query")
	require.NoError(t, err)
	require.False(t, found, "no query is defaulted beside a webhook")
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
	t.Run("targetRefs is immutable", func(t *testing.T) {
		obj := mustApply(t, strings.Replace(strings.Replace(doc, "pr-update", "pr-update-zones", 1), "targetRef: web", "targetRefs: [zone-a, zone-b]", 1))
		rejectUpdateOf(t, obj, func(u *unstructured.Unstructured) {
			require.NoError(t, unstructured.SetNestedStringSlice(u.Object, []string{"zone-b", "zone-a"}, "spec", "targetRefs"))
		}, "spec.targetRefs", "immutable")
	})
	t.Run("targetRef cannot become targetRefs", func(t *testing.T) {
		obj := mustApply(t, strings.Replace(doc, "pr-update", "pr-update-switch", 1))
		rejectUpdateOf(t, obj, func(u *unstructured.Unstructured) {
			unstructured.RemoveNestedField(u.Object, "spec", "targetRef")
			require.NoError(t, unstructured.SetNestedStringSlice(u.Object, []string{"web", "zone-b"}, "spec", "targetRefs"))
		}, "cannot switch between them")
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
