//go:build e2e

package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/statefulops/statefulops/e2e/localcluster"
	"github.com/statefulops/statefulops/e2e/realnode"
)

// The upgrade tests replace an operator's image while its workloads are mid-operation, the way a
// platform team upgrades one operator on its own: `kubectl set image` on its Deployment, or
// `kubectl apply -f` of the manifest of the next release. `make images-next` builds the second image
// set those tests move to: the same code stamped with NextVersion, so the two images really differ
// (digest, version in the log) and the Deployment really rolls.

// Move is how an upgrade test moves an operator to a version.
type Move string

const (
	// SetImage is `kubectl set image` on each Deployment of the operator's manifest.
	SetImage Move = "kubectl set image"
	// ApplyManifest is `kubectl apply -f` of the operator's manifest rendered for the version.
	ApplyManifest Move = "kubectl apply -f"
)

// CurrentVersion is the version the repository builds, v<VERSION> (the tag of `make images`).
func CurrentVersion() string { return "v" + repoVersion() }

// NextVersion is the version of the second image set, v<VERSION>-next (the tag of `make images-next`).
func NextVersion() string { return CurrentVersion() + "-next" }

func repoVersion() string {
	root, err := localcluster.RepoRoot()
	if err != nil {
		return "0.0.0"
	}
	raw, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		return "0.0.0"
	}
	return strings.TrimSpace(string(raw))
}

// nextImagesDir is where `make images-next` wrote its tarballs: $STATEFULOPS_IMAGES_NEXT, else the
// sibling of the current image dir named after NextVersion (the Makefile's layout).
func nextImagesDir() string {
	if dir := os.Getenv("STATEFULOPS_IMAGES_NEXT"); dir != "" {
		return dir
	}
	return filepath.Join(filepath.Dir(os.Getenv("STATEFULOPS_IMAGES")), NextVersion())
}

// importNextOnce imports the next image set into the real node's containerd once per run.
var importNextOnce = sync.OnceValue(func() error {
	dir := nextImagesDir()
	if _, err := os.Stat(filepath.Join(dir, "singleton-operator.tar")); err != nil {
		return fmt.Errorf("no image set %s in %s (run `make images-next`): %w", NextVersion(), dir, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, err := realnode.ImportImages(ctx, realnode.Options{StateDir: RealNode.StateDir, ImagesDir: dir})
	return err
})

// operatorDeployment is one Deployment of an operator's manifest and the image its container runs.
type operatorDeployment struct {
	name, container, image string
}

// operatorDeployments returns the Deployments of deploy/<operator>.yaml: its manager, and for
// singleton-operator also its webhook server, which upgrades with it (one manifest, one release).
func operatorDeployments(operator string) []operatorDeployment {
	deployments := []operatorDeployment{{name: operator + "-controller-manager", container: "manager", image: operator}}
	if operator == "singleton-operator" {
		deployments = append(deployments, operatorDeployment{name: WebhookDeployment, container: "webhook-server", image: "webhook-server"})
	}
	return deployments
}

// imageTag matches every image of ours in a manifest (statefulops/<name>:<tag>), the managers' and the
// ones passed as flags (the singleton webhook's --sidecar-image).
var imageTag = regexp.MustCompile(`(statefulops/[a-z0-9-]+):v[0-9A-Za-z.+-]+`)

// RenderManifest writes deploy/<operator>.yaml with every image of ours tagged version, as the
// manifest of that release would be, and returns its path.
func RenderManifest(t *testing.T, operator, version string) string {
	t.Helper()
	root, err := localcluster.RepoRoot()
	require.NoError(t, err)
	raw, err := os.ReadFile(filepath.Join(root, "deploy", operator+".yaml"))
	require.NoError(t, err)
	rendered := imageTag.ReplaceAllString(string(raw), "${1}:"+version)
	path := filepath.Join(t.TempDir(), operator+"-"+version+".yaml")
	require.NoError(t, os.WriteFile(path, []byte(rendered), 0o644))
	return path
}

// UpgradeOperator moves the in-cluster operator of deploy/<operator>.yaml to version by move, waits
// until each of its Deployments has rolled out with that image, and, for a manager, until a pod of the
// new image leads (holds its leader-election Lease and logged its version). It returns the time from
// the move to that leadership: what the operator's workloads waited for their operator.
//
// It needs the real node (the images really run there); the caller checks NeedRealNode.
func UpgradeOperator(t *testing.T, operator, version string, move Move) time.Duration {
	t.Helper()
	if version == NextVersion() {
		require.NoError(t, importNextOnce(), "importing the %s images into the real node", version)
	}
	ctx := t.Context()
	namespace := operator + "-system"
	start := time.Now()
	switch move {
	case SetImage:
		for _, d := range operatorDeployments(operator) {
			_, err := Kubectl().Run(ctx, "set", "image", "-n", namespace, "deployment/"+d.name,
				d.container+"=statefulops/"+d.image+":"+version)
			require.NoError(t, err)
		}
	case ApplyManifest:
		_, err := Kubectl().Run(ctx, "apply", "-f", RenderManifest(t, operator, version))
		require.NoError(t, err)
	default:
		t.Fatalf("unknown move %q", move)
	}
	for _, d := range operatorDeployments(operator) {
		_, err := Kubectl().Run(ctx, "rollout", "status", "-n", namespace, "deployment/"+d.name, "--timeout=180s")
		require.NoError(t, err, "%s: %s to %s", d.name, move, version)
		pods := deploymentPods(t, namespace, d.name)
		for _, p := range pods {
			require.Equal(t, "statefulops/"+d.image+":"+version, containerImage(&p, d.container), "%s after %s", p.Name, move)
		}
	}
	leader := waitLeaderOf(t, namespace, operatorDeployments(operator)[0].name, version)
	took := time.Since(start)
	t.Logf("upgrade: %s moved to %s by %s: %s leads %s after the move", operator, version, move, leader, took.Round(time.Millisecond))
	return took
}

// deploymentPods returns the running, not terminating pods of Deployment name.
func deploymentPods(t *testing.T, namespace, name string) []corev1.Pod {
	t.Helper()
	d, err := Clientset.AppsV1().Deployments(namespace).Get(t.Context(), name, metav1.GetOptions{})
	require.NoError(t, err)
	selector, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	require.NoError(t, err)
	list, err := Clientset.CoreV1().Pods(namespace).List(t.Context(), metav1.ListOptions{LabelSelector: selector.String()})
	require.NoError(t, err)
	var pods []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && ownedByCurrentReplicaSet(t, d, &p) {
			pods = append(pods, p)
		}
	}
	require.NotEmpty(t, pods, "deployment %s/%s has no running pod", namespace, name)
	return pods
}

// ownedByCurrentReplicaSet reports whether pod belongs to the ReplicaSet of d's current revision.
func ownedByCurrentReplicaSet(t *testing.T, d *appsv1.Deployment, pod *corev1.Pod) bool {
	t.Helper()
	owner := metav1.GetControllerOf(pod)
	if owner == nil || owner.Kind != "ReplicaSet" {
		return false
	}
	rs, err := Clientset.AppsV1().ReplicaSets(d.Namespace).Get(t.Context(), owner.Name, metav1.GetOptions{})
	require.NoError(t, err)
	return rs.Annotations["deployment.kubernetes.io/revision"] == d.Annotations["deployment.kubernetes.io/revision"]
}

func containerImage(pod *corev1.Pod, container string) string {
	for _, c := range pod.Spec.Containers {
		if c.Name == container {
			return c.Image
		}
	}
	return ""
}

// waitLeaderOf waits until a pod of Deployment name that runs version holds a leader-election Lease
// of namespace (controller-runtime's identity is <pod name>_<uuid>) and has logged that version at
// its start, and returns that pod's name.
func waitLeaderOf(t *testing.T, namespace, name, version string) string {
	t.Helper()
	var leader string
	require.Eventually(t, func() bool {
		leases, err := Clientset.CoordinationV1().Leases(namespace).List(t.Context(), metav1.ListOptions{LabelSelector: labels.Everything().String()})
		if err != nil {
			return false
		}
		for _, p := range deploymentPods(t, namespace, name) {
			for _, l := range leases.Items {
				if l.Spec.HolderIdentity != nil && strings.HasPrefix(*l.Spec.HolderIdentity, p.Name+"_") {
					leader = p.Name
					return true
				}
			}
		}
		return false
	}, 2*time.Minute, 100*time.Millisecond, "no pod of %s/%s running %s leads", namespace, name, version)
	logs, err := Kubectl().Run(t.Context(), "logs", "-n", namespace, leader, "-c", "manager")
	require.NoError(t, err)
	require.Contains(t, logs, `"version":"`+version+`"`, "%s logs the version of its image at its start", leader)
	return leader
}

// UpgradeStep is one move of an upgrade test.
type UpgradeStep struct {
	Version string
	Move    Move
}

// UpgradeSteps are the moves every upgrade test makes, each while the operator's workloads are
// mid-operation: to the next release with `kubectl set image`, back to this release by applying its
// manifest (a rollback, version skew the other way), and to the next release by applying its manifest.
func UpgradeSteps() []UpgradeStep {
	return []UpgradeStep{
		{Version: NextVersion(), Move: SetImage},
		{Version: CurrentVersion(), Move: ApplyManifest},
		{Version: NextVersion(), Move: ApplyManifest},
	}
}

// PrepareUpgradeTest readies an upgrade test of operator: it reports false (and t has logged why)
// without the real node, where the images really run; otherwise it installs every manifest, waits
// until the operator's Deployments have rolled out, and restores the operator when t ends
// (restoreOperatorAfter).
func PrepareUpgradeTest(t *testing.T, operator string) bool {
	t.Helper()
	if !NeedRealNode(t) {
		return false
	}
	Install(t)
	waitOperatorRolledOut(t.Context(), t, operator)
	restoreOperatorAfter(t, operator)
	return true
}

// restoreOperatorAfter puts the operator back on deploy/<operator>.yaml as the repository has it when
// t ends, so the suites after an upgrade test run this release's image.
func restoreOperatorAfter(t *testing.T, operator string) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		root, err := localcluster.RepoRoot()
		require.NoError(t, err)
		_, err = Kubectl().Run(ctx, "apply", "-f", filepath.Join(root, "deploy", operator+".yaml"))
		require.NoError(t, err)
		waitOperatorRolledOut(ctx, t, operator)
	})
}

// waitOperatorRolledOut waits until every Deployment of the operator's manifest has rolled out.
func waitOperatorRolledOut(ctx context.Context, t *testing.T, operator string) {
	t.Helper()
	for _, d := range operatorDeployments(operator) {
		_, err := Kubectl().Run(ctx, "rollout", "status", "-n", operator+"-system", "deployment/"+d.name, "--timeout=180s")
		require.NoError(t, err)
	}
}
