//go:build e2e

package platform

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/statefulops/statefulops/e2e/framework"
	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

var updateStatusGolden = flag.Bool("update-status-golden", false, "rewrite e2e/platform/testdata/plugin/status.golden from this run")

// statusSamples are the operators' samples, one object of each kind, all in one namespace (their
// Services, labels and names do not collide).
var statusSamples = []struct{ file, object string }{
	{"singleton-operator/config/samples/statefulsingleton.yaml", "statefulsingleton.apps.openshift.statefulsingleton.com/my-database"},
	{"lease-operator/config/samples/statefulsetlock.yaml", "statefulsetlock.app.anukkrit.me/postgres-cluster-lock"},
	{"rollout-operator/config/samples/phasedrollout.yaml", "phasedrollout.sts.plus/phasedrollout-sample"},
	{"cluster-operator/config/samples/statefulcluster.yaml", "statefulcluster.enge.me/coder"},
	{"extended-operator/config/samples/extendedstatefulset.yaml", "extendedstatefulset.fissile.cloudfoundry.org/myextendedstatefulset"},
}

// TestPluginStatus applies one sample of each kind, waits until every one is Ready, and checks
// `kubectl statefulops status` on them as a user runs it (through kubectl's plugin lookup, stdout
// piped): the plain text against a golden file (what varies normalised), the JSON summary parsed,
// and --watch printing a new frame after a change.
func TestPluginStatus(t *testing.T) {
	runDocOperators(t)
	ns := framework.NewNamespace(t)
	// The singleton operator enables its pod webhook in a namespace once it sees the StatefulSingleton
	// there; enabled beforehand, the Deployment's pod is always admitted with its start hold (not
	// adopted, as it would be when it won that race), so the view is the same on every run.
	_, err := framework.Kubectl().Run(t.Context(), "label", "namespace", ns, singletonv1.LabelNamespaceEnabled+"=true")
	require.NoError(t, err)
	root := filepath.Join("..", "..")
	for _, s := range statusSamples {
		_, err := framework.Kubectl().Run(t.Context(), "apply", "-n", ns, "-f", filepath.Join(root, s.file))
		require.NoError(t, err, "kubectl apply -f %s", s.file)
	}
	waitStart := time.Now()
	for _, s := range statusSamples {
		_, err := framework.Kubectl().Run(t.Context(), "wait", "-n", ns, "--for=condition=Ready", "--timeout=5m", s.object)
		if err != nil {
			describe, _ := framework.Kubectl().Run(t.Context(), "describe", "-n", ns, s.object)
			t.Fatalf("%s is not Ready: %v\n%s", s.object, err, describe)
		}
	}
	t.Logf("the five samples are Ready after %s", time.Since(waitStart).Round(time.Second))
	checkStart := time.Now()

	t.Run("text", func(t *testing.T) {
		out, err := framework.Plugin(t.Context(), "status", "-n", ns)
		require.NoError(t, err)
		t.Logf("$ kubectl statefulops status -n %s\n%s", ns, out)
		assert.NotContains(t, out, "\x1b", "piped output has no escape sequences")
		got := normaliseStatus(out, ns)
		path := filepath.Join("testdata", "plugin", "status.golden")
		if *updateStatusGolden {
			require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		}
		want, err := os.ReadFile(path)
		require.NoError(t, err, "run with -update-status-golden to write it")
		assert.Equal(t, string(want), got, "kubectl statefulops status -n <ns> (normalised) differs from %s", path)

		one, err := framework.Plugin(t.Context(), "status", "-n", ns, "ssl/postgres-cluster-lock")
		require.NoError(t, err)
		t.Logf("$ kubectl statefulops status ssl/postgres-cluster-lock\n%s", one)
		assert.True(t, strings.HasPrefix(one, "StatefulSetLock "+ns+"/postgres-cluster-lock"), "KIND/NAME shows that object only:\n%s", one)
		var heads int
		for _, l := range strings.Split(one, "\n") {
			if l != "" && !strings.HasPrefix(l, " ") {
				heads++
			}
		}
		assert.Equal(t, 1, heads, "KIND/NAME shows one object:\n%s", one)

		all, err := framework.Plugin(t.Context(), "status", "-A")
		require.NoError(t, err)
		t.Logf("$ kubectl statefulops status -A\n%s", all)
		for _, head := range []string{"StatefulSingleton " + ns + "/my-database", "PhasedRollout " + ns + "/phasedrollout-sample", "ExtendedStatefulSet " + ns + "/myextendedstatefulset"} {
			assert.Contains(t, all, head, "-A shows the objects of every namespace")
		}

		_, err = framework.Plugin(t.Context(), "status", "-n", ns, "sss/no-such-singleton")
		assert.ErrorContains(t, err, "not found", "a missing object is an error")
	})

	t.Run("json", func(t *testing.T) {
		out, err := framework.Plugin(t.Context(), "status", "-n", ns, "-o", "json")
		require.NoError(t, err)
		var sum struct {
			Objects []struct {
				Kind      string `json:"kind"`
				Namespace string `json:"namespace"`
				Name      string `json:"name"`
				Health    struct {
					Status    string `json:"status"`
					Condition string `json:"condition"`
					Reason    string `json:"reason"`
				} `json:"health"`
				Singleton *struct {
					ActivePod string `json:"activePod"`
					Pods      []struct {
						Name, Role string
					} `json:"pods"`
				} `json:"singleton"`
				Lock *struct {
					Writer  string   `json:"writer"`
					Readers []string `json:"readers"`
				} `json:"lock"`
				Rollout *struct {
					Target    string `json:"target"`
					Partition *int32 `json:"partition"`
				} `json:"rollout"`
				Cluster *struct {
					Identities []struct {
						Name   string   `json:"name"`
						Claims []string `json:"claims"`
					} `json:"identities"`
				} `json:"cluster"`
				Extended *struct {
					Versions []struct {
						Version int32 `json:"version"`
						Running bool  `json:"running"`
					} `json:"versions"`
				} `json:"extended"`
			} `json:"objects"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &sum), "-o json is one JSON document:\n%s", out)
		var kinds []string
		for _, o := range sum.Objects {
			kinds = append(kinds, o.Kind)
			assert.Equal(t, ns, o.Namespace)
			assert.Equal(t, "Current", o.Health.Status, "%s %s is Ready, so kstatus reads Current", o.Kind, o.Name)
			switch o.Kind {
			case "StatefulSingleton":
				require.NotNil(t, o.Singleton)
				assert.NotEmpty(t, o.Singleton.ActivePod)
				require.Len(t, o.Singleton.Pods, 1)
				assert.Equal(t, o.Singleton.ActivePod, o.Singleton.Pods[0].Name)
				assert.Equal(t, "active", o.Singleton.Pods[0].Role)
			case "StatefulSetLock":
				require.NotNil(t, o.Lock)
				assert.NotEmpty(t, o.Lock.Writer)
				assert.Len(t, o.Lock.Readers, 2, "three pods: one writer, two readers")
				assert.NotContains(t, o.Lock.Readers, o.Lock.Writer)
			case "PhasedRollout":
				require.NotNil(t, o.Rollout)
				assert.Equal(t, "web", o.Rollout.Target)
				if assert.NotNil(t, o.Rollout.Partition) {
					assert.EqualValues(t, 3, *o.Rollout.Partition, "idle: the partition is held at replicas")
				}
			case "StatefulCluster":
				require.NotNil(t, o.Cluster)
				require.Len(t, o.Cluster.Identities, 3)
				for _, id := range o.Cluster.Identities {
					ordinal := id.Name[strings.LastIndex(id.Name, "-"):]
					if assert.Len(t, id.Claims, 1, "%s has its claim", id.Name) {
						assert.True(t, strings.HasSuffix(id.Claims[0], ordinal), "%s has its own claim, not %s", id.Name, id.Claims[0])
					}
				}
			case "ExtendedStatefulSet":
				require.NotNil(t, o.Extended)
				require.Len(t, o.Extended.Versions, 1)
				assert.True(t, o.Extended.Versions[0].Running)
			}
		}
		assert.Equal(t, []string{"StatefulSingleton", "StatefulSetLock", "PhasedRollout", "StatefulCluster", "ExtendedStatefulSet"}, kinds)
	})

	t.Run("watch", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		cmd := pluginCommand(ctx, "status", "-n", ns, "--watch")
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		defer func() { cancel(); _ = cmd.Wait() }()
		lines := bufio.NewScanner(stdout)
		var seen strings.Builder
		// The first frame ends with the ExtendedStatefulSet, the last kind; the change follows it.
		for lines.Scan() {
			seen.WriteString(lines.Text() + "\n")
			if strings.HasPrefix(lines.Text(), "ExtendedStatefulSet ") {
				break
			}
		}
		_, err = framework.Kubectl().Run(ctx, "patch", "-n", ns, "phasedrollout/phasedrollout-sample", "--type=merge", "-p", `{"spec":{"paused":true}}`)
		require.NoError(t, err)
		separator, paused := false, false
		for !paused && lines.Scan() {
			line := lines.Text()
			seen.WriteString(line + "\n")
			separator = separator || strings.HasPrefix(line, "--- ")
			paused = separator && strings.HasPrefix(line, "  phase ") && strings.Contains(line, "target web") && strings.HasSuffix(line, ", paused")
		}
		assert.True(t, paused, "--watch printed no frame, after a separator, showing the rollout paused:\n%s", seen.String())

		// A new revision of the StatefulSet starts a rollout: a later frame shows its step.
		_, err = framework.Kubectl().Run(ctx, "patch", "-n", ns, "phasedrollout/phasedrollout-sample", "--type=merge", "-p", `{"spec":{"paused":false}}`)
		require.NoError(t, err)
		_, err = framework.Kubectl().Run(ctx, "patch", "-n", ns, "statefulset/web", "--type=merge", "-p", `{"spec":{"template":{"metadata":{"annotations":{"e2e/revision":"2"}}}}}`)
		require.NoError(t, err)
		stepShown := false
		for !stepShown && lines.Scan() {
			seen.WriteString(lines.Text() + "\n")
			stepShown = strings.HasPrefix(lines.Text(), "  step: ")
		}
		for lines.Scan() && lines.Text() != "" { // the rest of that object
			seen.WriteString(lines.Text() + "\n")
		}
		t.Logf("$ kubectl statefulops status -n %s --watch\n%s", ns, seen.String())
		assert.True(t, stepShown, "--watch printed no frame with the rollout's step after the template changed")
	})
	t.Logf("status checks took %s beyond the wait for Ready", time.Since(checkStart).Round(time.Second))
}

// pluginCommand is framework.Plugin's command, for a run whose output is read as it comes.
func pluginCommand(ctx context.Context, args ...string) *exec.Cmd {
	bin := os.Getenv("STATEFULOPS_BIN")
	kubectl := framework.Kubectl()
	cmd := exec.CommandContext(ctx, kubectl.Bin, append([]string{"statefulops", "--kubeconfig", kubectl.Kubeconfig}, args...)...)
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "NO_COLOR=1")
	return cmd
}

var statusNormalisers = []struct {
	re   *regexp.Regexp
	with string
}{
	// A Deployment's pod: <deployment>-<ReplicaSet hash>-<suffix>.
	{regexp.MustCompile(`\b(postgres-database)-[a-z0-9]{6,10}-[a-z0-9]{5}\b`), "$1-<hash>"},
	// ControllerRevision names.
	{regexp.MustCompile(`\b(revision|revisions:) \S+( -> \S+)?`), "$1 <revision>"},
	{regexp.MustCompile(`\b(on|active: \S+ on) [^\s,]+`), "$1 <node>"},
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`), "<time>"},
	// Ages (kubectl's short form) and Go durations (gaps).
	{regexp.MustCompile(`\b\d+(\.\d+)?(ns|µs|ms|s|m|h|d|y)(\d+(\.\d+)?(ns|µs|ms|s|m|h|d))*\b`), "<duration>"},
}

// normaliseStatus replaces what differs from run to run: the namespace, generated names, nodes,
// revisions, times, ages and durations.
func normaliseStatus(out, ns string) string {
	out = strings.ReplaceAll(out, ns, "<ns>")
	for _, n := range statusNormalisers {
		out = n.re.ReplaceAllString(out, n.with)
	}
	return out
}
