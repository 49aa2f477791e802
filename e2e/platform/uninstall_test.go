//go:build e2e

package platform

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/statefulops/statefulops/e2e/framework"
	"github.com/statefulops/statefulops/e2e/localcluster"
	"github.com/statefulops/statefulops/e2e/operators"
	"github.com/statefulops/statefulops/e2e/realnode"
	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
)

// uninstallBound is how long `kubectl delete -f deploy/<operator>.yaml` may take, with custom resources
// of its kind present, until nothing of it is left (issue 16: every deletion completes).
const uninstallBound = 60 * time.Second

// uninstallCase is one operator: its manifest's CRD, the docs' example applied in two namespaces (the
// second one possibly varied), and what the operator's docs page says the user's workloads are left as.
type uninstallCase struct {
	operator string
	crd      string // plural.group
	sample   string // <operator>/config/samples/<file>.yaml: the docs page's main example
	// variant rewrites the example for the second namespace (nil: as written).
	variant func(yaml string) string
	// before records what the workloads look like before the uninstall; after asserts what the docs
	// say they are left as, given that record.
	before func(t *testing.T, namespaces []string) any
	after  func(t *testing.T, namespaces []string, before any)
}

// TestUninstallWithObjectsPresent runs, per operator, the README's uninstall exactly as written,
// `kubectl delete -f deploy/<operator>.yaml`, while custom resources of its kind are Ready in two
// namespaces with their workloads (nothing deleted first: that is the point). Within 60 seconds the
// command returns and the CRD, every custom resource and the operator's namespace are gone, with no
// namespace left Terminating; the workloads are then in the state the operator's docs page states
// (section "Uninstall"). The README's install, `kubectl apply -f deploy/<operator>.yaml`, then brings
// the operator back (on the real node, when the cluster has one: a real container, no restart, the
// leader), and a new custom resource of its kind becomes Ready through it. The operators are left
// installed as framework.Install left them, also when a subtest fails.
func TestUninstallWithObjectsPresent(t *testing.T) {
	framework.Install(t)
	root, err := localcluster.RepoRoot()
	require.NoError(t, err)
	onRealNode, err := framework.RealNodeReady(t.Context())
	require.NoError(t, err)
	for _, c := range uninstallCases() {
		t.Run(strings.TrimSuffix(c.operator, "-operator"), func(t *testing.T) {
			// The operators are independent (their own CRD, namespace and workloads): in parallel, the
			// five uninstalls and re-installs take the time of the slowest.
			t.Parallel()
			runUninstallCase(t, root, c, onRealNode)
		})
	}
}

func runUninstallCase(t *testing.T, root string, c uninstallCase, onRealNode bool) {
	manifest := filepath.Join(root, "deploy", c.operator+".yaml")
	opNamespace := c.operator + "-system"
	t.Cleanup(func() { restoreOperator(t, c, manifest) })
	waitOperatorRunning(t, c.operator, 4*time.Minute)

	sample, err := os.ReadFile(filepath.Join(root, c.sample))
	require.NoError(t, err)
	namespaces := []string{framework.NewNamespace(t), framework.NewNamespace(t)}
	for i, ns := range namespaces {
		doc := string(sample)
		if i == 1 && c.variant != nil {
			doc = c.variant(doc)
		}
		applyExampleReady(t, ns, doc)
	}
	before := c.before(t, namespaces)
	waitGarbageCollectorWatches(t, c.crd)

	start := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), uninstallBound)
	_, err = framework.Kubectl().Run(ctx, "delete", "-f", manifest)
	cancel()
	returned := time.Since(start)
	if err != nil {
		require.NoError(t, err, "kubectl delete -f deploy/%s.yaml returns within %s (it waits for every object it deletes); left: %s",
			c.operator, uninstallBound, uninstallLeftovers(context.WithoutCancel(t.Context()), c, namespaces))
	}
	var left string
	// What is left of the 60 s, and at least two polls when kubectl took (almost) all of it.
	gone := assert.Eventually(t, func() bool {
		left = uninstallLeftovers(t.Context(), c, namespaces)
		return left == ""
	}, max(uninstallBound-returned, 2*framework.Tick), framework.Tick/2)
	require.True(t, gone, "within %s of kubectl delete -f deploy/%s.yaml: %s", uninstallBound, c.operator, left)
	t.Logf("uninstall %s: %s (kubectl delete -f returned after %s)", c.operator,
		time.Since(start).Round(time.Millisecond), returned.Round(time.Millisecond))

	c.after(t, namespaces, before)

	start = time.Now()
	ctx, cancel = context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	require.NoError(t, applyManifest(ctx, c, manifest), "kubectl apply -f deploy/%s.yaml", c.operator)
	waitOperatorRunning(t, c.operator, 3*time.Minute)
	if onRealNode {
		assertOperatorOnRealNode(t, c.operator, opNamespace)
	}
	applyExampleReady(t, framework.NewNamespace(t), string(sample))
	t.Logf("re-install %s: %s until a new %s is Ready", c.operator, time.Since(start).Round(time.Millisecond), c.crd)
}

// gcDiscoveryLag bounds how long after a CRD is created the garbage collector starts watching its kind:
// kube-controller-manager re-reads the API's discovery every 30 s and its REST mapper is reset every
// 30 s. Custom resources created and deleted before that leave their dependents behind for good (the
// collector never sees the deletion; it verified the owner while it still existed): a Kubernetes
// limitation, not the operators', that a cluster installed a minute ago runs into, and docs/cluster.md
// states it.
const gcDiscoveryLag = 75 * time.Second

// waitGarbageCollectorWatches waits until the CRD has existed for gcDiscoveryLag, so that what the
// uninstall leaves is what it leaves on any cluster where the operator has run for more than a minute.
// In `make test` the CRDs were installed minutes before and it returns at once.
func waitGarbageCollectorWatches(t *testing.T, crd string) {
	t.Helper()
	out, err := framework.Kubectl().Run(t.Context(), "get", "crd", crd, "-o", "jsonpath={.metadata.creationTimestamp}")
	require.NoError(t, err)
	created, err := time.Parse(time.RFC3339, strings.TrimSpace(out))
	require.NoError(t, err)
	if wait := time.Until(created.Add(gcDiscoveryLag)); wait > 0 {
		t.Logf("CRD %s created %s ago: waiting %s for the garbage collector to watch its kind", crd,
			time.Since(created).Round(time.Second), wait.Round(time.Second))
		time.Sleep(wait)
	}
}

// applyExampleReady applies a docs example in ns and waits until each of its custom resources is Ready.
func applyExampleReady(t *testing.T, ns, doc string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "example.yaml")
	require.NoError(t, os.WriteFile(file, []byte(doc), 0o644))
	_, err := framework.Kubectl().Run(t.Context(), "apply", "-n", ns, "-f", file)
	require.NoError(t, err)
	objs, err := statefulopsObjects(doc)
	require.NoError(t, err)
	require.NotEmpty(t, objs)
	for _, obj := range objs {
		_, err := framework.Kubectl().Run(t.Context(), "wait", "-n", ns, "--for=condition=Ready", "--timeout=4m", obj)
		if err != nil {
			describe, _ := framework.Kubectl().Run(context.WithoutCancel(t.Context()), "describe", "-n", ns, obj)
			t.Logf("%s/%s is not Ready:\n%s", ns, obj, describe)
		}
		require.NoError(t, err, "%s/%s gets Ready", ns, obj)
	}
}

// uninstallLeftovers names what of an uninstall is not finished yet: the CRD (hence custom resources
// its cleanup still waits for), custom resources in the test's namespaces, the operator's namespace, or
// a namespace Terminating (one of the test's, or any whose remaining content is of this kind).
func uninstallLeftovers(ctx context.Context, c uninstallCase, namespaces []string) string {
	var left []string
	out, err := framework.Kubectl().Run(ctx, "get", "crd", c.crd, "--ignore-not-found", "-o", "name")
	if err != nil || strings.TrimSpace(out) != "" {
		crs, _ := framework.Kubectl().Run(ctx, "get", c.crd, "-A", "-o", "custom-columns=NS:.metadata.namespace,NAME:.metadata.name,FINALIZERS:.metadata.finalizers", "--no-headers")
		left = append(left, fmt.Sprintf("CRD %s still there (%v), custom resources: %s", c.crd, err, strings.Join(strings.Fields(crs), " ")))
	}
	if _, err := framework.Clientset.CoreV1().Namespaces().Get(ctx, c.operator+"-system", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		left = append(left, fmt.Sprintf("namespace %s-system still there (%v)", c.operator, err))
	}
	all, err := framework.Clientset.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	group := c.crd[strings.Index(c.crd, ".")+1:]
	for _, ns := range all.Items {
		if ns.Status.Phase != corev1.NamespaceTerminating {
			continue
		}
		mine := ns.Name == c.operator+"-system"
		for _, n := range namespaces {
			mine = mine || ns.Name == n
		}
		for _, cond := range ns.Status.Conditions {
			mine = mine || (cond.Status == corev1.ConditionTrue && strings.Contains(cond.Message, group))
		}
		if mine {
			left = append(left, fmt.Sprintf("namespace %s Terminating: %v", ns.Name, ns.Status.Conditions))
		}
	}
	return strings.Join(left, "; ")
}

// waitOperatorRunning waits until the operator's Deployments (singleton-operator's webhook server too)
// have rolled out.
func waitOperatorRunning(t *testing.T, operator string, timeout time.Duration) {
	t.Helper()
	deployments := []string{operator + "-controller-manager"}
	if operator == "singleton-operator" {
		deployments = append(deployments, "singleton-operator-webhook-server")
	}
	for _, d := range deployments {
		_, err := framework.Kubectl().Run(t.Context(), "rollout", "status", "-n", operator+"-system", "deployment/"+d, "--timeout="+timeout.String())
		require.NoError(t, err)
	}
}

// assertOperatorOnRealNode checks that the re-installed operator runs on the real node: the recreated
// namespace is steered there by the cluster itself (localcluster.RealNodeNamespaces), as a real
// containerd container, Ready, never restarted, and it wins its leader election.
func assertOperatorOnRealNode(t *testing.T, operator, namespace string) {
	t.Helper()
	pods, err := framework.Clientset.CoreV1().Pods(namespace).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + operator + ",control-plane=controller-manager"})
	require.NoError(t, err)
	require.Len(t, pods.Items, 1)
	pod := pods.Items[0]
	assert.Equal(t, realnode.NodeName, pod.Spec.NodeName, "the recreated namespace is steered to the real node")
	assert.Equal(t, realnode.LabelValue, pod.Spec.NodeSelector[realnode.LabelKey], "nodeSelector added by the cluster's admission policy")
	assert.Equal(t, corev1.ConditionTrue, framework.PodCondition(&pod, corev1.PodReady))
	require.NotEmpty(t, pod.Status.ContainerStatuses)
	cs := pod.Status.ContainerStatuses[0]
	require.NotNil(t, cs.State.Running, "container running")
	assert.True(t, strings.HasPrefix(cs.ContainerID, "containerd://"), "a real container under the real kubelet: %s", cs.ContainerID)
	assert.Equal(t, int32(0), cs.RestartCount, "no restart")
	require.Eventually(t, func() bool {
		leases, err := framework.Clientset.CoordinationV1().Leases(namespace).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, l := range leases.Items {
			if l.Spec.HolderIdentity != nil && strings.HasPrefix(*l.Spec.HolderIdentity, pod.Name) {
				return true
			}
		}
		return false
	}, framework.Timeout, framework.Tick, "the re-installed %s pod %s leads", operator, pod.Name)
}

// restoreOperator leaves the operator installed as framework.Install left it, whatever the subtest
// did: when an uninstall wedged (the CRD still being deleted) (a custom resource behind a finalizer no operator removes any more),
// the finalizers are removed by hand so that the deletion can finish, then the manifest is applied
// again and its Deployments waited for.
func restoreOperator(t *testing.T, c uninstallCase, manifest string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 4*time.Minute)
	defer cancel()
	k := framework.Kubectl()
	if deleting, _ := k.Run(ctx, "get", "crd", c.crd, "--ignore-not-found", "-o", "jsonpath={.metadata.deletionTimestamp}"); strings.TrimSpace(deleting) != "" {
		out, _ := k.Run(ctx, "get", c.crd, "-A", "-o", "custom-columns=NS:.metadata.namespace,NAME:.metadata.name", "--no-headers")
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(line)
			if len(f) != 2 {
				continue
			}
			_, err := k.Run(ctx, "patch", c.crd, "-n", f[0], f[1], "--type=merge", "-p", `{"metadata":{"finalizers":null}}`)
			t.Logf("restore: finalizers of %s %s/%s removed by hand (%v)", c.crd, f[0], f[1], err)
		}
		// A deletion under way must finish before the manifest can be applied again.
		deadline := time.Now().Add(2 * time.Minute)
		for time.Now().Before(deadline) {
			crd, _ := k.Run(ctx, "get", "crd", c.crd, "--ignore-not-found", "-o", "jsonpath={.metadata.deletionTimestamp}")
			ns, err := framework.Clientset.CoreV1().Namespaces().Get(ctx, c.operator+"-system", metav1.GetOptions{})
			if strings.TrimSpace(crd) == "" && (apierrors.IsNotFound(err) || (err == nil && ns.DeletionTimestamp == nil)) {
				break
			}
			time.Sleep(time.Second)
		}
	}
	if err := applyManifest(ctx, c, manifest); err != nil {
		t.Errorf("restore: kubectl apply -f %s: %v", manifest, err)
		return
	}
	deployments := []string{c.operator + "-controller-manager"}
	if c.operator == "singleton-operator" {
		deployments = append(deployments, "singleton-operator-webhook-server")
	}
	for _, d := range deployments {
		if _, err := k.Run(ctx, "rollout", "status", "-n", c.operator+"-system", "deployment/"+d, "--timeout=3m"); err != nil {
			t.Errorf("restore: %v", err)
		}
	}
}

// applyManifest runs the README's install, `kubectl apply -f deploy/<operator>.yaml`, and waits until
// the operator's CRD is established: only its own, as the other subtests delete theirs meanwhile.
func applyManifest(ctx context.Context, c uninstallCase, manifest string) error {
	if _, err := framework.Kubectl().Run(ctx, "apply", "-f", manifest); err != nil {
		return err
	}
	return operators.WaitCRDsEstablished(ctx, framework.Kubectl(), time.Minute, c.crd)
}

func uninstallCases() []uninstallCase {
	return []uninstallCase{
		{
			// Pods (and ControllerRevisions) carry the StatefulCluster as controller owner: the garbage
			// collector deletes them with it. Claims are owned only when whenDeleted is Delete: the
			// example's default, Retain, keeps them; the second namespace asks for Delete.
			operator: "cluster-operator", crd: "statefulclusters.enge.me",
			sample: "cluster-operator/config/samples/statefulcluster.yaml",
			variant: func(doc string) string {
				return strings.Replace(doc, "spec:\n  replicas: 3\n",
					"spec:\n  replicas: 3\n  persistentVolumeClaimRetentionPolicy:\n    whenDeleted: Delete\n", 1)
			},
			before: func(t *testing.T, namespaces []string) any {
				claims := map[string][]string{}
				for _, ns := range namespaces {
					claims[ns] = claimNames(t, ns)
					require.Len(t, claims[ns], 3, "one claim per pod in %s", ns)
				}
				return claims
			},
			after: func(t *testing.T, namespaces []string, before any) {
				claims := before.(map[string][]string)
				assertEventuallyNoPods(t, namespaces, "app=coder", "the StatefulCluster's pods (controller owner) are garbage-collected")
				assert.ElementsMatch(t, claims[namespaces[0]], claimNames(t, namespaces[0]),
					"whenDeleted Retain (the default): the claims stay, with their data")
				assert.Eventually(t, func() bool { return len(claimNames(t, namespaces[1])) == 0 }, framework.Timeout, framework.Tick,
					"whenDeleted Delete: the claims (owned by the StatefulCluster) are garbage-collected")
			},
		},
		{
			// The StatefulSet carries the ExtendedStatefulSet as controller owner, its pods the StatefulSet:
			// the garbage collector deletes both; the ConfigMap and Service the user applied stay.
			operator: "extended-operator", crd: "extendedstatefulsets.fissile.cloudfoundry.org",
			sample: "extended-operator/config/samples/extendedstatefulset.yaml",
			before: func(t *testing.T, namespaces []string) any {
				for _, ns := range namespaces {
					sts, err := framework.Clientset.AppsV1().StatefulSets(ns).List(t.Context(), metav1.ListOptions{})
					require.NoError(t, err)
					require.NotEmpty(t, sts.Items, "the ExtendedStatefulSet's StatefulSet in %s", ns)
				}
				return nil
			},
			after: func(t *testing.T, namespaces []string, _ any) {
				assert.Eventually(t, func() bool {
					for _, ns := range namespaces {
						sts, err := framework.Clientset.AppsV1().StatefulSets(ns).List(t.Context(), metav1.ListOptions{})
						if err != nil || len(sts.Items) > 0 {
							return false
						}
					}
					return true
				}, framework.Timeout, framework.Tick, "the StatefulSets (controller owner: the ExtendedStatefulSet) are garbage-collected")
				assertEventuallyNoPods(t, namespaces, "app=my-app", "their pods go with them")
				for _, ns := range namespaces {
					_, err := framework.Clientset.CoreV1().ConfigMaps(ns).Get(t.Context(), "my-app-config", metav1.GetOptions{})
					assert.NoError(t, err, "the user's ConfigMap stays")
				}
			},
		},
		{
			// Each lock's Lease carries the lock as owner: the garbage collector deletes it. The pods keep
			// their sts-role labels as they were: exactly one writer per StatefulSet.
			operator: "lease-operator", crd: "statefulsetlocks.app.anukkrit.me",
			sample: "lease-operator/config/samples/statefulsetlock.yaml",
			before: func(t *testing.T, namespaces []string) any {
				roles := map[string]map[string]string{}
				for _, ns := range namespaces {
					// The lock is Ready once it has a writer, which can be while the StatefulSet is still
					// creating its later pods (OrderedReady): the record is taken once every replica is
					// Ready and labelled, else a pod labelled after it (or never, the operator gone)
					// would read as a change the uninstall made.
					require.Eventually(t, func() bool {
						sts, err := framework.Clientset.AppsV1().StatefulSets(ns).Get(t.Context(), "postgres-cluster", metav1.GetOptions{})
						if err != nil || sts.Spec.Replicas == nil || sts.Status.ReadyReplicas != *sts.Spec.Replicas {
							return false
						}
						roles[ns] = podRoles(t, ns, "app=postgres")
						return len(roles[ns]) == int(*sts.Spec.Replicas) && countRole(roles[ns], "") == 0
					}, framework.Timeout, framework.Tick, "every pod of postgres-cluster in %s Ready and labelled", ns)
					require.Equal(t, 1, countRole(roles[ns], "writer"), "one writer in %s: %v", ns, roles[ns])
					_, err := framework.Clientset.CoordinationV1().Leases(ns).Get(t.Context(), "postgres-cluster-leader-lease", metav1.GetOptions{})
					require.NoError(t, err, "the lock's Lease in %s", ns)
				}
				return roles
			},
			after: func(t *testing.T, namespaces []string, before any) {
				roles := before.(map[string]map[string]string)
				for _, ns := range namespaces {
					assert.Eventually(t, func() bool {
						_, err := framework.Clientset.CoordinationV1().Leases(ns).Get(t.Context(), "postgres-cluster-leader-lease", metav1.GetOptions{})
						return apierrors.IsNotFound(err)
					}, framework.Timeout, framework.Tick, "the Lease in %s (owner: the lock) is garbage-collected", ns)
					now := podRoles(t, ns, "app=postgres")
					assert.Equal(t, roles[ns], now, "the pods of %s keep their %s labels as they were", ns, leasev1.RoleLabel)
					assert.Equal(t, 1, countRole(now, "writer"), "exactly one writer in %s: %v", ns, now)
				}
			},
		},
		{
			// The StatefulSet keeps the partition the rollout last set and its ownership annotation (a
			// stale marker, taken over by the next PhasedRollout that targets it); its pods are untouched.
			operator: "rollout-operator", crd: "phasedrollouts.sts.plus",
			sample: "rollout-operator/config/samples/phasedrollout.yaml",
			before: func(t *testing.T, namespaces []string) any {
				snap := map[string]stsSnapshot{}
				for _, ns := range namespaces {
					snap[ns] = snapshotStatefulSet(t, ns, "web")
					require.Equal(t, "phasedrollout-sample", snap[ns].annotation, "the PhasedRollout marks its StatefulSet in %s", ns)
				}
				return snap
			},
			after: func(t *testing.T, namespaces []string, before any) {
				snap := before.(map[string]stsSnapshot)
				for _, ns := range namespaces {
					now := snapshotStatefulSet(t, ns, "web")
					assert.Equal(t, snap[ns].partition, now.partition, "the StatefulSet in %s keeps its partition", ns)
					assert.Equal(t, snap[ns].annotation, now.annotation, "the StatefulSet in %s keeps its %s annotation", ns, rolloutv1alpha1.ManagedByAnnotation)
					assert.Equal(t, snap[ns].pods, now.pods, "the pods in %s are untouched", ns)
				}
			},
		},
		{
			// A StatefulSingleton at rest has no finalizer: it goes with the CRD. The running pod keeps
			// running, and a new pod of the Deployment (its pod deleted) starts: the pod webhook is gone,
			// nothing holds it.
			operator: "singleton-operator", crd: "statefulsingletons.apps.openshift.statefulsingleton.com",
			sample: "singleton-operator/config/samples/statefulsingleton.yaml",
			before: func(t *testing.T, namespaces []string) any {
				running := map[string]types.UID{}
				for _, ns := range namespaces {
					// The StatefulSingleton is Ready once its pod is released; the pod itself gets Ready
					// once its claim is bound and it started.
					var pod *corev1.Pod
					if !assert.Eventually(t, func() bool {
						pod = readyPod(t, ns, "app=postgres-database")
						return pod != nil
					}, framework.Timeout, framework.Tick, "the singleton's pod gets Ready in %s", ns) {
						t.FailNow()
					}
					running[ns] = pod.UID
				}
				return running
			},
			after: func(t *testing.T, namespaces []string, before any) {
				running := before.(map[string]types.UID)
				for _, ns := range namespaces {
					pod := readyPod(t, ns, "app=postgres-database")
					if assert.NotNil(t, pod, "the singleton's pod in %s keeps running", ns) {
						assert.Equal(t, running[ns], pod.UID, "the same pod in %s keeps running", ns)
					}
				}
				ns := namespaces[0]
				require.NoError(t, framework.Clientset.CoreV1().Pods(ns).DeleteCollection(t.Context(), metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "app=postgres-database"}))
				if !assert.Eventually(t, func() bool {
					pod := readyPod(t, ns, "app=postgres-database")
					return pod != nil && pod.UID != running[ns]
				}, framework.Timeout, framework.Tick, "a new pod of the Deployment in %s starts and is not held", ns) {
					t.Logf("pods of the Deployment: %s", describePods(t, ns, "app=postgres-database"))
				}
			},
		},
	}
}

func claimNames(t *testing.T, ns string) []string {
	t.Helper()
	claims, err := framework.Clientset.CoreV1().PersistentVolumeClaims(ns).List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	var names []string
	for _, c := range claims.Items {
		if c.DeletionTimestamp == nil {
			names = append(names, c.Name)
		}
	}
	return names
}

func assertEventuallyNoPods(t *testing.T, namespaces []string, selector, msg string) {
	t.Helper()
	assert.Eventually(t, func() bool {
		for _, ns := range namespaces {
			pods, err := framework.Clientset.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: selector})
			if err != nil || len(pods.Items) > 0 {
				return false
			}
		}
		return true
	}, framework.Timeout, framework.Tick, msg)
}

// podRoles returns pod name → its sts-role label ("" without one).
func podRoles(t *testing.T, ns, selector string) map[string]string {
	t.Helper()
	pods, err := framework.Clientset.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: selector})
	require.NoError(t, err)
	roles := map[string]string{}
	for _, p := range pods.Items {
		roles[p.Name] = p.Labels[leasev1.RoleLabel]
	}
	return roles
}

func countRole(roles map[string]string, role string) int {
	n := 0
	for _, r := range roles {
		if r == role {
			n++
		}
	}
	return n
}

// stsSnapshot is what the rollout operator may have set on a StatefulSet, and its pods.
type stsSnapshot struct {
	partition  int32
	annotation string
	pods       map[string]string // pod name → uid/resourceVersion
}

func snapshotStatefulSet(t *testing.T, ns, name string) stsSnapshot {
	t.Helper()
	sts, err := framework.Clientset.AppsV1().StatefulSets(ns).Get(t.Context(), name, metav1.GetOptions{})
	require.NoError(t, err)
	s := stsSnapshot{annotation: sts.Annotations[rolloutv1alpha1.ManagedByAnnotation], pods: map[string]string{}}
	if ru := sts.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
		s.partition = *ru.Partition
	}
	pods, err := framework.Clientset.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app=" + name})
	require.NoError(t, err)
	for _, p := range pods.Items {
		s.pods[p.Name] = fmt.Sprintf("%s/%s", p.UID, p.Labels["controller-revision-hash"])
	}
	return s
}

// readyPod returns the one Ready, not deleted pod of selector in ns, or nil.
func readyPod(t *testing.T, ns, selector string) *corev1.Pod {
	t.Helper()
	pods, err := framework.Clientset.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: selector})
	require.NoError(t, err)
	var ready []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && framework.PodCondition(&p, corev1.PodReady) == corev1.ConditionTrue {
			ready = append(ready, p)
		}
	}
	if len(ready) != 1 {
		return nil
	}
	return &ready[0]
}

func describePods(t *testing.T, ns, selector string) string {
	pods, err := framework.Clientset.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, p := range pods.Items {
		out = append(out, fmt.Sprintf("%s phase=%s ready=%s gates=%d deleting=%v", p.Name, p.Status.Phase,
			framework.PodCondition(&p, corev1.PodReady), len(p.Spec.SchedulingGates), p.DeletionTimestamp != nil))
	}
	return strings.Join(out, ", ")
}
