//go:build e2e

package framework

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/statefulops/statefulops/e2e/localcluster"
	"github.com/statefulops/statefulops/e2e/realnode"
)

// NeedRealNode reports whether the real-node test t can run: true when the cluster has the real node.
// Without it, t fails with the reason, unless E2E_REAL_NODE=0 was given; then t logs the reason and
// the caller returns early.
func NeedRealNode(t *testing.T) bool {
	t.Helper()
	switch {
	case RealNode.on:
		return true
	case RealNode.explicitlyOff:
		t.Logf("real node off: %s; not run", RealNode.off)
		return false
	default:
		t.Fatalf("real node off: %s (set %s=0 to run without it)", RealNode.off, localcluster.RealNodeEnv)
		return false
	}
}

// TestAppPod is a pod running the test app on the real node (it selects the node and tolerates its
// taint), with the downward API identity and the record dir the app writes its records to.
func TestAppPod(name string, args ...string) *corev1.Pod {
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{realnode.LabelKey: realnode.LabelValue},
			Tolerations: []corev1.Toleration{{
				Key: realnode.TaintKey, Operator: corev1.TolerationOpEqual, Value: realnode.LabelValue, Effect: corev1.TaintEffectNoSchedule,
			}},
			Containers: []corev1.Container{{
				Name:            "app",
				Image:           testAppImage(),
				ImagePullPolicy: corev1.PullNever,
				Args:            append([]string{"--record-dir=/records"}, args...),
				Env: []corev1.EnvVar{
					{Name: "POD_NAME", ValueFrom: field("metadata.name")},
					{Name: "POD_NAMESPACE", ValueFrom: field("metadata.namespace")},
					{Name: "POD_UID", ValueFrom: field("metadata.uid")},
					{Name: "NODE_NAME", ValueFrom: field("spec.nodeName")},
				},
				Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt32(8080)}},
					PeriodSeconds: 1,
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "records", MountPath: "/records"}},
			}},
			Volumes: []corev1.Volume{{
				Name: "records",
				VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
					Path: realnode.RecordDir(RealNode.StateDir), Type: ptr.To(corev1.HostPathDirectory),
				}},
			}},
		},
	}
}

// testAppImage is the test app's image as `make images` tags it: statefulops/testapp:v<VERSION>.
func testAppImage() string {
	version := "0.0.0"
	if root, err := localcluster.RepoRoot(); err == nil {
		if raw, err := os.ReadFile(filepath.Join(root, "VERSION")); err == nil {
			version = strings.TrimSpace(string(raw))
		}
	}
	return "statefulops/testapp:v" + version
}

// AppRecord is one JSON line the test app records.
type AppRecord struct {
	Time     time.Time `json:"time"`
	Event    string    `json:"event"`
	ExitCode int       `json:"exit_code"`
	Pod      struct {
		Name, Namespace, UID, Node string
	} `json:"pod"`
}

// FindRecord returns the first record of event among the JSON lines of out, failing t without one.
func FindRecord(t *testing.T, out, event string) AppRecord {
	t.Helper()
	s := bufio.NewScanner(strings.NewReader(out))
	for s.Scan() {
		var r AppRecord
		if json.Unmarshal(s.Bytes(), &r) == nil && r.Event == event {
			return r
		}
	}
	require.Failf(t, "no record", "no %q record in:\n%s", event, out)
	return AppRecord{}
}

// KubectlOnRealNode runs the local cluster's kubectl against the cluster under test.
func KubectlOnRealNode(t *testing.T, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, RealNode.kubectl, append([]string{"--kubeconfig", Kubeconfig}, args...)...).CombinedOutput()
	return string(out), err
}

// ContainerPID finds the host PID of the process named comm (as /proc/<pid>/comm has it, at most 15
// characters) in a container of pod, on the real node, by the pod's cgroup.
func ContainerPID(t *testing.T, pod *corev1.Pod, comm string) int {
	t.Helper()
	// cgroupfs names the pod's cgroup pod<uid>, the systemd driver pod<uid with underscores>.
	uid := string(pod.UID)
	ids := []string{"pod" + uid, "pod" + strings.ReplaceAll(uid, "-", "_")}
	return hostPID(t, fmt.Sprintf("%s process of pod %s/%s", comm, pod.Namespace, pod.Name), func(pid int) bool {
		name, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil || strings.TrimSpace(string(name)) != comm {
			return false
		}
		cgroup, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		return err == nil && (strings.Contains(string(cgroup), ids[0]) || strings.Contains(string(cgroup), ids[1]))
	})
}

// TestAppPID finds the host PID of the test app running as pod ns/name on the real node, by the
// downward-API identity in its environment.
func TestAppPID(t *testing.T, ns, name string) int {
	t.Helper()
	want := []string{"POD_NAME=" + name, "POD_NAMESPACE=" + ns}
	return hostPID(t, fmt.Sprintf("test-app process of pod %s/%s", ns, name), func(pid int) bool {
		environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			return false
		}
		vars := strings.Split(string(environ), "\x00")
		return slices.Contains(vars, want[0]) && slices.Contains(vars, want[1])
	})
}

// hostPID returns the first process of this host that match accepts, and fails the test when there is
// none.
func hostPID(t *testing.T, what string, match func(pid int) bool) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && match(pid) {
			return pid
		}
	}
	t.Fatalf("no %s on this host", what)
	return 0
}
