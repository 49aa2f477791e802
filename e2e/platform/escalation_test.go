//go:build e2e

package platform

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/statefulops/statefulops/e2e/framework"
	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

// An escalation attempt, or a legitimate write, made as one identity: do returns nil when the API
// server allowed it (server-side dry-run where the verb has one, a SelfSubjectAccessReview for the
// connect verbs and for escalate/impersonate/bind, which have no dry-run).
type try struct {
	what, why string
	do        func(ctx context.Context, c kubernetes.Interface) error
}

type escalationIdentity struct {
	name, namespace, serviceAccount string
	attempts, legitimate            []try
}

var (
	dryCreate = metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	dryUpdate = metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}
	dryDelete = metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}
)

// probeLabel is the label the attempts try to put on objects that are not the identity's.
const probeLabel = `{"metadata":{"labels":{"statefulops.dev/escalation-probe":"x"}}}`

// TestOperatorIdentitiesCannotEscalate impersonates each operator's ServiceAccount, the
// webhook-server's, and an account bound to each operator's metrics-reader role, on the local cluster
// with deploy/ installed, and tries every escalation path a compromised operator would (issue 17):
// RoleBindings to other subjects, of other roles, in kube-system; cluster-admin; kube-system Secrets;
// kube-system and kube-node-lease Leases and unlabelled Leases; other admission webhooks and policies;
// Pod Security labels; pods/exec, attach, portforward; pods in kube-system and privileged pods;
// ClusterRoles and ClusterRoleBindings; escalate, bind, impersonate; nodes/proxy; the API server's
// /metrics. Writes use server-side dry-run, so nothing changes even when one is wrongly allowed. Each
// identity also makes a few of its own legitimate writes, which must stay allowed: a check that refuses
// everything would prove nothing.
func TestOperatorIdentitiesCannotEscalate(t *testing.T) {
	framework.Install(t)
	ctx := t.Context()
	admin := framework.Clientset
	ns := framework.NewNamespace(t)
	probe := "escalation-probe-" + ns

	// The objects the attempts aim at, created as admin (and deleted at the end): their kinds exist in
	// every cluster, and the attempts must reach authorization and admission, not fail on NotFound.
	framework.CreateForTest(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: probe, Namespace: "kube-system"}, StringData: map[string]string{"k": "v"}})
	for _, leaseNS := range []string{"kube-system", "kube-node-lease"} {
		framework.CreateForTest(t, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: probe, Namespace: leaseNS},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("kube-controller-manager")}})
	}
	framework.CreateForTest(t, &admissionv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: probe}})
	framework.CreateForTest(t, &admissionv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: probe}})
	// A policy and binding that match nothing (a namespace label no namespace has).
	framework.CreateForTest(t, &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: probe},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create},
					Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
				}}}},
			Validations: []admissionv1.Validation{{Expression: "true"}},
		}})
	framework.CreateForTest(t, &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: probe},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        probe,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
			MatchResources: &admissionv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"statefulops.dev/escalation-probe-never": "true"}}},
		}})
	// A pod whose labels are not the lease-operator's to change, and a PhasedRollout naming a Secret:
	// the one namespace where the rollout-operator may bind its Secret reader.
	pod := framework.TestPod("probe")
	pod = framework.CreatePod(t, ns, pod)
	var rollout rolloutv1alpha1.PhasedRollout
	require.NoError(t, yaml.UnmarshalStrict([]byte(`
apiVersion: sts.plus/v1alpha1
kind: PhasedRollout
metadata:
  name: probe
spec:
  targetRef: web
  check:
    periodSeconds: 30
    query:
      expr: "up == 0"
      url: http://prometheus:9090
      secretRef: prom-secret
`), &rollout))
	rollout.Namespace = ns
	require.NoError(t, framework.Client.Create(ctx, &rollout))
	// A StatefulSingleton that selects nothing: the one namespace where the webhook-server may bind its
	// pull-secret reader.
	framework.CreateForTest(t, &singletonv1.StatefulSingleton{ObjectMeta: metav1.ObjectMeta{Name: probe, Namespace: ns},
		Spec: singletonv1.StatefulSingletonSpec{Selector: metav1.LabelSelector{
			MatchLabels: map[string]string{"statefulops.dev/escalation-probe-never": "true"}}}})
	// A StatefulSet in kube-system that even carries rollout-operator's ownership annotation, and one
	// of the test namespace it may step (no replicas: neither starts pods); a kube-system pod the
	// singleton-operator could hijack or delete, and a pod of the test namespace held as the webhook
	// holds one (its hold annotation).
	systemSTS := statefulSet(probe, nil)
	systemSTS.Namespace, systemSTS.Spec.Replicas = "kube-system", ptr.To[int32](0)
	systemSTS.Annotations = map[string]string{rolloutv1alpha1.ManagedByAnnotation: "probe"}
	framework.CreateForTest(t, systemSTS)
	ownSTS := statefulSet(probe, nil)
	ownSTS.Namespace, ownSTS.Spec.Replicas = ns, ptr.To[int32](0)
	framework.CreateForTest(t, ownSTS)
	systemPod := framework.TestPod(probe)
	systemPod.Namespace = "kube-system"
	framework.CreateForTest(t, systemPod)
	heldPod := framework.TestPod("held")
	heldPod.Namespace = ns
	heldPod.Annotations = map[string]string{singletonv1.AnnotationHoldMode: string(singletonv1.HoldModeWrapper)}
	framework.CreateForTest(t, heldPod)

	// The webhook-server's grant as it writes it (webhook-server/internal/pullsecrets), in namespace.
	pullReader := func(namespace, subjectNS, subject string) *rbacv1.RoleBinding {
		rb := roleBinding("singleton-operator-webhook-server-secret-reader", "ClusterRole", "singleton-operator-pull-secret-reader", subjectNS, subject)
		rb.Labels = map[string]string{"app.kubernetes.io/managed-by": "singleton-operator-webhook-server", "sts.plus/secret-access": "singleton-operator-webhook-server"}
		rb.Namespace = namespace
		return rb
	}
	operatorNames := []string{"singleton-operator", "cluster-operator", "lease-operator", "rollout-operator", "extended-operator"}
	var identities []escalationIdentity
	for _, op := range operatorNames {
		identities = append(identities, escalationIdentity{name: op, namespace: op + "-system", serviceAccount: op + "-controller-manager"})
	}
	identities = append(identities, escalationIdentity{name: "webhook-server", namespace: "singleton-operator-system", serviceAccount: "singleton-operator-webhook-server"})
	for i := range identities {
		id := &identities[i]
		id.attempts = commonAttempts(ns, probe, pod.Name, id)
		if id.name == "lease-operator" {
			// Its pod patches are limited to its role labels and annotations.
			id.attempts = append(id.attempts, patchTry("change a pod label that is not its role's (app)", "retarget the Services that select on it",
				collection("/api/v1/namespaces/"+ns+"/pods"), pod.Name, `{"metadata":{"labels":{"app":"hijacked"}}}`),
				// Its EndpointSlices are those of its locks' Services only (lease-operator-endpointslice-writes).
				createTry("create an EndpointSlice for the API server's Service", "route the cluster's API traffic to an address of its choosing",
					"/apis/discovery.k8s.io/v1/namespaces/default/endpointslices", leaseSlice("kubernetes-probe", "kubernetes")))
		}
		if id.name == "rollout-operator" {
			// It patches StatefulSets (the partition, its annotation, a template rollback): never in
			// kube-system, never another field (rollout-operator-statefulset-writes).
			id.attempts = append(id.attempts,
				patchTry("patch a kube-system StatefulSet's pod template (privileged, host PID)", "node root through the control plane's namespace",
					collection("/apis/apps/v1/namespaces/kube-system/statefulsets"), probe,
					`{"spec":{"template":{"spec":{"hostPID":true,"containers":[{"name":"main","image":"attacker.example/root:1","securityContext":{"privileged":true}}]}}}}`),
				patchTry("set a kube-system StatefulSet's partition", "hold or release the control plane's pods",
					collection("/apis/apps/v1/namespaces/kube-system/statefulsets"), probe, `{"spec":{"updateStrategy":{"rollingUpdate":{"partition":0}}}}`),
				patchTry("scale a StatefulSet it manages", "change a workload beyond its partition",
					collection("/apis/apps/v1/namespaces/"+ns+"/statefulsets"), probe,
					fmt.Sprintf(`{"metadata":{"annotations":{%q:"probe"}},"spec":{"replicas":5}}`, rolloutv1alpha1.ManagedByAnnotation)),
				// It deletes pods a StatefulSet controls (recreateStuckPods): never in kube-system, never
				// another pod (rollout-operator-pod-deletes).
				attempt("delete a kube-system pod", "take a control-plane component down", func(ctx context.Context, c kubernetes.Interface) error {
					return c.CoreV1().Pods("kube-system").Delete(ctx, probe, dryDelete)
				}),
				attempt("delete a bare pod", "take down a pod nothing recreates", func(ctx context.Context, c kubernetes.Interface) error {
					return c.CoreV1().Pods(ns).Delete(ctx, pod.Name, dryDelete)
				}))
		}
		if id.name == "webhook-server" {
			// It binds its pull-secret reader to itself in namespaces holding a StatefulSingleton, never
			// elsewhere nor to anyone else (singleton-operator-webhook-rolebinding-shape, -namespace).
			id.attempts = append(id.attempts,
				createTry("create a RoleBinding of singleton-operator-pull-secret-reader to itself in kube-system", "Secret read in kube-system (the control plane's credentials)",
					"/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/rolebindings", pullReader("kube-system", id.namespace, id.serviceAccount)),
				createTry("create a RoleBinding of singleton-operator-pull-secret-reader to another subject", "another account would read the namespace's Secrets",
					"/apis/rbac.authorization.k8s.io/v1/namespaces/"+ns+"/rolebindings", pullReader(ns, ns, "default")),
				createTry("create a RoleBinding of singleton-operator-pull-secret-reader to itself where no StatefulSingleton is", "Secret read in a namespace it has no business in",
					"/apis/rbac.authorization.k8s.io/v1/namespaces/"+id.namespace+"/rolebindings", pullReader(id.namespace, id.namespace, id.serviceAccount)))
		}
		if id.name == "extended-operator" {
			// It deletes pods of its versions' StatefulSets (canary retries, updateNotReady's stuck pods):
			// never in kube-system, never another pod (extended-operator-owned-writes).
			id.attempts = append(id.attempts,
				attempt("delete a kube-system pod", "take a control-plane component down", func(ctx context.Context, c kubernetes.Interface) error {
					return c.CoreV1().Pods("kube-system").Delete(ctx, probe, dryDelete)
				}),
				attempt("delete a bare pod", "take down a pod nothing recreates", func(ctx context.Context, c kubernetes.Interface) error {
					return c.CoreV1().Pods(ns).Delete(ctx, pod.Name, dryDelete)
				}))
		}
		if id.name == "singleton-operator" {
			// It releases, adopts and deletes the pods it holds: never in kube-system, never another
			// label (singleton-operator-pod-writes).
			id.attempts = append(id.attempts,
				patchTry("patch a kube-system pod's labels", "retarget the control plane's Services, or take the pod out of its ReplicaSet",
					collection("/api/v1/namespaces/kube-system/pods"), probe, probeLabel),
				attempt("delete a kube-system pod", "take a control-plane component down", func(ctx context.Context, c kubernetes.Interface) error {
					return c.CoreV1().Pods("kube-system").Delete(ctx, probe, dryDelete)
				}),
				// A JSON patch: a merge patch would replace the whole containers list and drop the
				// injected token mount, which the API server refuses whoever asks (a broken attempt).
				attempt("change the image of a pod it holds", "run another program as the pod", func(ctx context.Context, c kubernetes.Interface) error {
					return c.CoreV1().RESTClient().Patch(types.JSONPatchType).AbsPath("/api/v1/namespaces/"+ns+"/pods", heldPod.Name).
						Param("dryRun", metav1.DryRunAll).Body([]byte(`[{"op":"replace","path":"/spec/containers/0/image","value":"attacker.example/miner:1"}]`)).Do(ctx).Error()
				}))
		}
	}
	// The identities' own writes (dry-run): each must stay allowed.
	legit := map[string][]try{
		"singleton-operator": {
			patchTry("label a namespace with its own label "+singletonv1.LabelNamespaceEnabled, "scopes the pod webhook to namespaces with singletons",
				collection("/api/v1/namespaces"), ns, fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, singletonv1.LabelNamespaceEnabled)),
			eventTry(ns),
			leaderLeaseTry("singleton-operator-system", "escalation-probe-leader"),
			patchTry("release a pod it holds (its epoch annotation)", "the release of a handover",
				collection("/api/v1/namespaces/"+ns+"/pods"), heldPod.Name, fmt.Sprintf(`{"metadata":{"annotations":{%q:"1",%q:"1"}}}`,
					singletonv1.AnnotationEpoch, singletonv1.AnnotationStartGranted)),
		},
		"cluster-operator": {
			attempt("create a pod owned by a StatefulCluster", "it is the controller of its StatefulClusters' pods", func(ctx context.Context, c kubernetes.Interface) error {
				p := framework.TestPod("owned")
				p.OwnerReferences = owner("enge.me/v1alpha1", "StatefulCluster")
				p.Labels = map[string]string{clusterv1alpha1.ClusterNameLabel: "probe"}
				_, err := c.CoreV1().Pods(ns).Create(ctx, p, dryCreate)
				return err
			}),
			createTry("create a claim owned by a StatefulCluster", "it creates its pods' claims", "/api/v1/namespaces/"+ns+"/persistentvolumeclaims", labelled(claim("owned", owner("enge.me/v1alpha1", "StatefulCluster")), clusterv1alpha1.ClusterNameLabel, "probe")),
			eventTry(ns),
		},
		"lease-operator": {
			attempt("create a Lease carrying its label, owned by a StatefulSetLock", "each StatefulSetLock is a Lease", func(ctx context.Context, c kubernetes.Interface) error {
				l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "owned", Labels: map[string]string{leasev1.LockLabel: "probe"},
					OwnerReferences: owner("app.anukkrit.me/v1", "StatefulSetLock")}}
				_, err := c.CoordinationV1().Leases(ns).Create(ctx, l, dryCreate)
				return err
			}),
			patchTry("label a pod with its role label "+leasev1.RoleLabel, "the writer/reader role Services select on",
				collection("/api/v1/namespaces/"+ns+"/pods"), pod.Name, fmt.Sprintf(`{"metadata":{"labels":{%q:%q,%q:"lock"}}}`, leasev1.RoleLabel, leasev1.RoleReader, leasev1.LockLabel)),
			leaderLeaseTry("lease-operator-system", "lease-operator.app.anukkrit.me"),
			createTry("create the EndpointSlice of a lock's writer Service, owned by the StatefulSetLock", "spec.services.endpoints: Operator",
				"/apis/discovery.k8s.io/v1/namespaces/"+ns+"/endpointslices", leaseSlice("probe-rw", "probe-rw")),
		},
		"rollout-operator": {
			attempt("bind its Secret reader to itself where a PhasedRollout names a Secret", "reads the PhasedRollout's credentials Secret", func(ctx context.Context, c kubernetes.Interface) error {
				rb := roleBinding("rollout-operator-secret-reader", "ClusterRole", "rollout-operator-secret-reader",
					"rollout-operator-system", "rollout-operator-controller-manager")
				rb.Labels = map[string]string{"app.kubernetes.io/managed-by": "rollout-operator", "sts.plus/secret-access": "rollout-operator"}
				_, err := c.RbacV1().RoleBindings(ns).Create(ctx, rb, dryCreate)
				return err
			}),
			eventTry(ns),
			leaderLeaseTry("rollout-operator-system", "escalation-probe-leader"),
			patchTry("take a StatefulSet over: its partition and ownership annotation", "each step of a PhasedRollout",
				collection("/apis/apps/v1/namespaces/"+ns+"/statefulsets"), probe,
				fmt.Sprintf(`{"metadata":{"annotations":{%q:"probe"}},"spec":{"updateStrategy":{"rollingUpdate":{"partition":1}}}}`, rolloutv1alpha1.ManagedByAnnotation)),
		},
		"extended-operator": {
			createTry("create a StatefulSet owned by an ExtendedStatefulSet", "each version is a StatefulSet it owns", "/apis/apps/v1/namespaces/"+ns+"/statefulsets", labelled(statefulSet("owned", owner("fissile.cloudfoundry.org/v1alpha1", "ExtendedStatefulSet")), extendedv1alpha1.NameLabel, "probe")),
			createTry("create a Job owned by an ExtendedStatefulSet", "its upgrade Jobs", "/apis/batch/v1/namespaces/"+ns+"/jobs", labelled(job("owned", owner("fissile.cloudfoundry.org/v1alpha1", "ExtendedStatefulSet")), extendedv1alpha1.NameLabel, "probe")),
			leaderLeaseTry("extended-operator-system", "escalation-probe-leader"),
		},
		"webhook-server": {
			attempt("update its own MutatingWebhookConfiguration", "its certificate rotator writes the caBundle (an update: it holds no patch)", func(ctx context.Context, c kubernetes.Interface) error {
				mwc, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "singleton-operator-mutating-webhook-configuration", metav1.GetOptions{})
				if err != nil {
					return err
				}
				_, err = c.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, mwc, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
				return err
			}),
			attempt("read its own serving certificate Secret", "it serves TLS with it", func(ctx context.Context, c kubernetes.Interface) error {
				_, err := c.CoreV1().Secrets("singleton-operator-system").Get(ctx, "singleton-operator-webhook-server-cert", metav1.GetOptions{})
				return err
			}),
			attempt("bind its pull-secret reader to itself where a StatefulSingleton is", "reads the pull secrets of the pods it admits", func(ctx context.Context, c kubernetes.Interface) error {
				_, err := c.RbacV1().RoleBindings(ns).Create(ctx, pullReader(ns, "singleton-operator-system", "singleton-operator-webhook-server"), dryCreate)
				return err
			}),
		},
	}
	for i := range identities {
		identities[i].legitimate = legit[identities[i].name]
	}
	// Each binary's metrics reader (a Role in its namespace: get on services/metrics of its metrics
	// Service), bound as docs/metrics.md says to a scraper's ServiceAccount.
	for _, op := range append(slices.Clone(operatorNames), "webhook-server") {
		sa := "metrics-" + strings.TrimSuffix(op, "-operator")
		roleNS, role := framework.MetricsReaderRole(op)
		framework.CreateForTest(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns}})
		framework.CreateForTest(t, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: probe + "-" + sa, Namespace: roleNS},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: sa}},
		})
		reader, err := admin.RbacV1().Roles(roleNS).Get(ctx, role, metav1.GetOptions{})
		require.NoError(t, err)
		identities = append(identities, escalationIdentity{
			name: role, namespace: ns, serviceAccount: sa,
			attempts: []try{
				nonResourceTry("/metrics", "the API server's metrics: the reader of one operator's metrics must not open the kube-apiserver's"),
				nonResourceTry("/metrics/slis", "the API server's SLI metrics"),
				accessTry("get nodes/proxy", "the kubelets' metrics and exec through the node proxy", "", "get", "", "nodes", "proxy", ""),
				attempt("get a Secret in kube-system", "a scraper needs no Secret", func(ctx context.Context, c kubernetes.Interface) error {
					_, err := c.CoreV1().Secrets("kube-system").Get(ctx, probe, metav1.GetOptions{})
					return err
				}),
			},
			legitimate: readerRuleTries(reader.Rules, roleNS),
		})
	}

	total, totalAllowed, totalLegit := 0, 0, 0
	for _, id := range identities {
		c := framework.ImpersonatedClientset(t, id.namespace, id.serviceAccount)
		user := framework.ServiceAccountUser(id.namespace, id.serviceAccount)
		allowed := 0
		for _, a := range id.attempts {
			err := a.do(ctx, c)
			switch verdict(err) {
			case "allowed":
				allowed++
				t.Errorf("escalation: %s: ALLOWED %s; it must be refused: %s", id.name, a.what, a.why)
			case "refused":
			default:
				t.Errorf("escalation: %s: %s was neither allowed nor refused (the attempt is broken): %v", id.name, a.what, err)
			}
		}
		refusedLegit := 0
		for _, l := range id.legitimate {
			if err := legitimateWrite(ctx, c, l); verdict(err) != "allowed" {
				refusedLegit++
				t.Errorf("escalation: %s: its own write %q (%s) was refused: %v", id.name, l.what, l.why, err)
			}
		}
		require.NotEmpty(t, id.legitimate, "%s: a legitimate write shows the impersonation works", id.name)
		t.Logf("escalation: %s attempts=%d allowed=%d legitimate=%d refused=%d", id.name, len(id.attempts), allowed, len(id.legitimate), refusedLegit)
		if allowed > 0 || refusedLegit > 0 {
			t.Logf("kubectl auth can-i --list --as=%s (cluster-wide, then in %s):\n%s", user, ns, framework.CanIList(ctx, user, ns))
		}
		total += len(id.attempts)
		totalAllowed += allowed
		totalLegit += len(id.legitimate)
	}
	t.Logf("escalation: total identities=%d attempts=%d allowed=%d legitimate=%d", len(identities), total, totalAllowed, totalLegit)
}

// verdict sorts an attempt's result: allowed (it reached storage: nil, or AlreadyExists after every
// check passed), refused (RBAC's Forbidden, or a ValidatingAdmissionPolicy's denial), or anything else
// (a broken attempt, reported as such).
// legitimateWrite runs an identity's own write, waiting up to a minute while the API server reports
// the operator's admission policy as not configured yet: a policy whose paramKind is one of our CRDs
// resolves only once the API server's discovery cache has the CRD (kube-apiserver refreshes that cache
// every 30 s), so right after an install the operator's own grant is refused and its reconcile retries.
// Escalation attempts are never retried: a refusal is what they must get.
func legitimateWrite(ctx context.Context, c kubernetes.Interface, l try) error {
	deadline := time.Now().Add(time.Minute)
	for {
		err := l.do(ctx, c)
		if err == nil || !strings.Contains(err.Error(), "failed to configure policy") || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Second):
		}
	}
}

func verdict(err error) string {
	switch {
	case err == nil, apierrors.IsAlreadyExists(err):
		return "allowed"
	case apierrors.IsForbidden(err):
		return "refused"
	case apierrors.IsInvalid(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy"):
		return "refused"
	}
	return err.Error()
}

// commonAttempts are the escalation paths every operator identity is tried on.
func commonAttempts(ns, probe, podName string, id *escalationIdentity) []try {
	// The RoleBinding rows use the rollout-operator's own binding name and role, so only the subject,
	// the role or the namespace is wrong in each: the guard under test is the only one that can refuse.
	return []try{
		createTry("create a RoleBinding of rollout-operator-secret-reader to another subject", "another account would read the namespace's Secrets", "/apis/rbac.authorization.k8s.io/v1/namespaces/"+ns+"/rolebindings", roleBinding("rollout-operator-secret-reader", "ClusterRole", "rollout-operator-secret-reader", ns, "default")),
		createTry("create a RoleBinding of another role (edit) to itself", "rights beyond its own", "/apis/rbac.authorization.k8s.io/v1/namespaces/"+ns+"/rolebindings", roleBinding("rollout-operator-secret-reader", "ClusterRole", "edit", id.namespace, id.serviceAccount)),
		createTry("create a RoleBinding of rollout-operator-secret-reader to itself in kube-system", "Secret read in kube-system (the control plane's credentials)", "/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/rolebindings", roleBinding("rollout-operator-secret-reader", "ClusterRole", "rollout-operator-secret-reader", id.namespace, id.serviceAccount)),
		createTry("create a RoleBinding of cluster-admin to itself", "full control of the namespace", "/apis/rbac.authorization.k8s.io/v1/namespaces/"+ns+"/rolebindings", roleBinding(probe, "ClusterRole", "cluster-admin", id.namespace, id.serviceAccount)),
		attempt("create a ClusterRoleBinding of cluster-admin to itself", "full control of the cluster", func(ctx context.Context, c kubernetes.Interface) error {
			rb := roleBinding(probe, "ClusterRole", "cluster-admin", id.namespace, id.serviceAccount)
			_, err := c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: rb.ObjectMeta, RoleRef: rb.RoleRef, Subjects: rb.Subjects}, dryCreate)
			return err
		}),
		patchTry("add a subject to the cluster-admin ClusterRoleBinding", "full control of the cluster", collection("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"), "cluster-admin",
			fmt.Sprintf(`{"subjects":[{"kind":"ServiceAccount","namespace":%q,"name":%q}]}`, id.namespace, id.serviceAccount)),
		attempt("create a ClusterRole", "a role with any rules, to bind next", func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: probe},
				Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}}}, dryCreate)
			return err
		}),
		patchTry("add a rule to the view ClusterRole", "widen a role many accounts hold", collection("/apis/rbac.authorization.k8s.io/v1/clusterroles"), "view",
			`{"rules":[{"apiGroups":[""],"resources":["secrets"],"verbs":["get","list"]}]}`),
		patchTry("add a rule to its own ClusterRole", "grant itself more", collection("/apis/rbac.authorization.k8s.io/v1/clusterroles"), ownClusterRole(id.serviceAccount),
			`{"rules":[{"apiGroups":["*"],"resources":["*"],"verbs":["*"]}]}`),
		attempt("get a Secret in kube-system", "the control plane's credentials", func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.CoreV1().Secrets("kube-system").Get(ctx, probe, metav1.GetOptions{})
			return err
		}),
		attempt("list Secrets in kube-system", "the control plane's credentials", func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{Limit: 1})
			return err
		}),
		attempt("list Secrets cluster-wide", "every Secret of the cluster", func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.CoreV1().Secrets("").List(ctx, metav1.ListOptions{Limit: 1})
			return err
		}),
		createTry("create a Secret in kube-system", "plant credentials for the control plane", "/api/v1/namespaces/kube-system/secrets", &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: probe + "-new"}}),
		leaseUpdateTry("kube-system", probe, "take over kube-controller-manager's or kube-scheduler's leader election"),
		leaseDeleteTry("kube-system", probe, "break a control-plane component's leader election"),
		leaseUpdateTry("kube-node-lease", probe, "fake a node's heartbeat"),
		leaseDeleteTry("kube-node-lease", probe, "mark a node as gone"),
		createTry("create an unlabelled Lease", "another component's lock, not one of its StatefulSetLocks", "/apis/coordination.k8s.io/v1/namespaces/"+ns+"/leases", &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: probe}}),
		patchTry("patch another MutatingWebhookConfiguration", "rewrite another admission webhook", collection("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"), probe, probeLabel),
		patchTry("patch a ValidatingWebhookConfiguration", "switch off another admission check", collection("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"), probe, probeLabel),
		patchTry("patch a ValidatingAdmissionPolicy", "lift a policy", collection("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"), probe, probeLabel),
		patchTry("patch a ValidatingAdmissionPolicyBinding", "lift a policy's binding", collection("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"), probe, probeLabel),
		attempt("delete a ValidatingAdmissionPolicy", "lift a policy (its own guards included)", func(ctx context.Context, c kubernetes.Interface) error {
			return c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, probe, dryDelete)
		}),
		patchTry("set a namespace's pod-security.kubernetes.io/enforce label to privileged", "lift Pod Security for privileged pods",
			collection("/api/v1/namespaces"), ns, `{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"privileged"}}}`),
		accessTry("create pods/exec", "run commands in any pod", ns, "create", "", "pods", "exec", podName),
		accessTry("create pods/attach", "attach to any pod", ns, "create", "", "pods", "attach", podName),
		accessTry("create pods/portforward", "reach any pod's ports", ns, "create", "", "pods", "portforward", podName),
		createTry("create a pod in kube-system", "run with the control plane's ServiceAccounts", "/api/v1/namespaces/kube-system/pods", framework.TestPod(probe)),
		attempt("create a privileged pod without an owner", "host access", func(ctx context.Context, c kubernetes.Interface) error {
			p := framework.TestPod("privileged")
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
			p.Spec.HostPID = true
			_, err := c.CoreV1().Pods(ns).Create(ctx, p, dryCreate)
			return err
		}),
		createTry("create a pod without an owner of its kind", "a pod of its choosing, not one of its resources'", "/api/v1/namespaces/"+ns+"/pods", framework.TestPod("unowned")),
		createTry("create a PersistentVolumeClaim in kube-system", "claim storage in the control plane's namespace", "/api/v1/namespaces/kube-system/persistentvolumeclaims", claim(probe, nil)),
		createTry("create a StatefulSet in kube-system", "pods in the control plane's namespace", "/apis/apps/v1/namespaces/kube-system/statefulsets", statefulSet(probe, owner("fissile.cloudfoundry.org/v1alpha1", "ExtendedStatefulSet"))),
		createTry("create a StatefulSet without an owner of its kind", "pods of its choosing", "/apis/apps/v1/namespaces/"+ns+"/statefulsets", statefulSet("unowned", nil)),
		createTry("create a Job in kube-system", "pods in the control plane's namespace", "/apis/batch/v1/namespaces/kube-system/jobs", job(probe, owner("fissile.cloudfoundry.org/v1alpha1", "ExtendedStatefulSet"))),
		createTry("create a Job without an owner of its kind", "pods of its choosing", "/apis/batch/v1/namespaces/"+ns+"/jobs", job("unowned", nil)),
		accessTry("escalate ClusterRoles", "write roles with rules it does not hold", "", "escalate", rbacv1.GroupName, "clusterroles", "", ""),
		accessTry("bind cluster-admin", "bind a role it does not hold", "", "bind", rbacv1.GroupName, "clusterroles", "", "cluster-admin"),
		accessTry("impersonate users", "act as anyone", "", "impersonate", "", "users", "", "admin"),
		accessTry("impersonate groups", "act as system:masters", "", "impersonate", "", "groups", "", "system:masters"),
		accessTry("impersonate ServiceAccounts", "act as another ServiceAccount", "kube-system", "impersonate", "", "serviceaccounts", "", "default"),
		accessTry("get nodes/proxy", "the kubelet API: exec and logs of every pod on the node", "", "get", "", "nodes", "proxy", ""),
		accessTry("create nodes/proxy", "the kubelet API: exec and logs of every pod on the node", "", "create", "", "nodes", "proxy", ""),
		nonResourceTry("/metrics", "the API server's metrics are not an operator's"),
	}
}

// ownClusterRole is the ClusterRole deploy/ binds to the ServiceAccount: <operator>-manager-role for
// <operator>-controller-manager, <account>-role for the webhook-server's.
func ownClusterRole(serviceAccount string) string {
	if op, ok := strings.CutSuffix(serviceAccount, "-controller-manager"); ok {
		return op + "-manager-role"
	}
	return serviceAccount + "-role"
}

// createTry creates obj (dry-run) in the collection at path ("/api/v1/namespaces/kube-system/pods").
func createTry(what, why, path string, obj runtime.Object) try {
	return try{what: what, why: why, do: func(ctx context.Context, c kubernetes.Interface) error {
		return c.CoreV1().RESTClient().Post().AbsPath(path).Param("dryRun", metav1.DryRunAll).Body(obj).Do(ctx).Error()
	}}
}

func attempt(what, why string, do func(context.Context, kubernetes.Interface) error) try {
	return try{what: what, why: why, do: do}
}

// patcher is a merge patch (dry-run) of one named object of one resource.
type patcher func(ctx context.Context, c kubernetes.Interface, name string, patch []byte) error

func patchTry(what, why string, p patcher, name, patch string) try {
	return try{what: what, why: why, do: func(ctx context.Context, c kubernetes.Interface) error {
		return p(ctx, c, name, []byte(patch))
	}}
}

// collection is a patcher of the objects of one resource, by its API path ("/api/v1/namespaces",
// "/apis/rbac.authorization.k8s.io/v1/clusterroles"): one generic request serves every kind tried.
func collection(path string) patcher {
	return func(ctx context.Context, c kubernetes.Interface, name string, patch []byte) error {
		return c.CoreV1().RESTClient().Patch(types.MergePatchType).AbsPath(path, name).
			Param("dryRun", metav1.DryRunAll).Body(patch).Do(ctx).Error()
	}
}

// leaseUpdateTry takes the Lease over (dry-run update): the object is read as admin, so the attempt
// is refused by authorization or admission, not by a failed read.
func leaseUpdateTry(ns, name, why string) try {
	return try{what: "update the Lease " + ns + "/" + name, why: why, do: func(ctx context.Context, c kubernetes.Interface) error {
		l, err := framework.Clientset.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		l.Spec.HolderIdentity = ptr.To("attacker")
		_, err = c.CoordinationV1().Leases(ns).Update(ctx, l, dryUpdate)
		return err
	}}
}

func leaseDeleteTry(ns, name, why string) try {
	return try{what: "delete the Lease " + ns + "/" + name, why: why, do: func(ctx context.Context, c kubernetes.Interface) error {
		return c.CoordinationV1().Leases(ns).Delete(ctx, name, dryDelete)
	}}
}

// accessTry asks the API server (SelfSubjectAccessReview, as the identity) whether the identity may
// do what has no dry-run: the connect verbs (exec, attach, portforward, proxy), escalate, bind,
// impersonate.
func accessTry(what, why, ns, verb, group, resource, subresource, name string) try {
	return try{what: what, why: why, do: func(ctx context.Context, c kubernetes.Interface) error {
		r, err := c.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: ns, Verb: verb, Group: group, Resource: resource, Subresource: subresource, Name: name}}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if !r.Status.Allowed {
			return apierrors.NewForbidden(authorizationv1.Resource(resource), name, fmt.Errorf("%s", r.Status.Reason))
		}
		return nil
	}}
}

// nonResourceTry GETs a path of the API server itself.
func nonResourceTry(path, why string) try {
	return try{what: "get the API server's " + path, why: why, do: func(ctx context.Context, c kubernetes.Interface) error {
		_, err := c.CoreV1().RESTClient().Get().AbsPath(path).DoRaw(ctx)
		return err
	}}
}

// readerRuleTries are the metrics reader's own rules, each asked for as the account bound to it: the
// binding works, so the refusals above are the role's, not a broken impersonation.
func readerRuleTries(rules []rbacv1.PolicyRule, ns string) []try {
	var out []try
	for _, r := range rules {
		for _, verb := range r.Verbs {
			for _, path := range r.NonResourceURLs {
				out = append(out, try{what: verb + " " + path, why: "its own rule", do: func(ctx context.Context, c kubernetes.Interface) error {
					s, err := c.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
						Spec: authorizationv1.SelfSubjectAccessReviewSpec{NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb}}}, metav1.CreateOptions{})
					if err == nil && !s.Status.Allowed {
						err = apierrors.NewForbidden(authorizationv1.Resource("nonresource"), path, fmt.Errorf("%s", s.Status.Reason))
					}
					return err
				}})
			}
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					res1, sub, _ := strings.Cut(res, "/")
					names := r.ResourceNames
					if len(names) == 0 {
						names = []string{""}
					}
					for _, name := range names {
						out = append(out, accessTry(verb+" "+res+" "+name, "its own rule", ns, verb, g, res1, sub, name))
					}
				}
			}
		}
	}
	return out
}

func eventTry(ns string) try {
	return attempt("record an Event", "it reports on its objects", func(ctx context.Context, c kubernetes.Interface) error {
		_, err := c.EventsV1().Events(ns).Create(ctx, &eventsv1.Event{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "escalation-"}, EventTime: metav1.NowMicro(), Type: corev1.EventTypeNormal,
			Reason: "Probe", Action: "Probe", ReportingController: "statefulops.dev/escalation", ReportingInstance: "probe",
			Regarding: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "probe", APIVersion: "v1"}}, dryCreate)
		return err
	})
}

// leaderLeaseTry creates the identity's leader-election Lease, named as its manager names it (an
// operator whose Leases are guarded by a policy may write only that one; AlreadyExists, when the
// operator runs and holds it, counts as allowed: the write passed authorization and admission).
func leaderLeaseTry(ns, name string) try {
	return createTry("create its leader-election Lease in its own namespace", "leader election", "/apis/coordination.k8s.io/v1/namespaces/"+ns+"/leases", &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}})
}

// labelled sets one label on a probe object: the label by which an operator's policy recognises its own
// objects.
func labelled[T metav1.Object](obj T, key, value string) T {
	obj.SetLabels(map[string]string{key: value})
	return obj
}

// leaseSlice is an EndpointSlice as the lease-operator writes them for the Service of StatefulSetLock
// "probe" (label, controller reference, managed-by), here for the Service service.
func leaseSlice(name, service string) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: owner("app.anukkrit.me/v1", "StatefulSetLock"), Labels: map[string]string{
			leasev1.LockLabel: "probe", discoveryv1.LabelServiceName: service, discoveryv1.LabelManagedBy: "lease-operator.app.anukkrit.me"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"203.0.113.7"},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "probe-0"}}},
	}
}

func owner(apiVersion, kind string) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: "probe", UID: "00000000-0000-0000-0000-000000000001",
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
}

func roleBinding(name, roleKind, role, saNamespace, sa string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: roleKind, Name: role},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: saNamespace, Name: sa}},
	}
}

func claim(name string, owners []metav1.OwnerReference) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: owners},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
	}
}

func statefulSet(name string, owners []metav1.OwnerReference) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: owners},
		Spec: appsv1.StatefulSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: framework.PodTemplate(name)},
	}
}

func job(name string, owners []metav1.OwnerReference) *batchv1.Job {
	tpl := framework.PodTemplate(name)
	tpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: owners}, Spec: batchv1.JobSpec{Template: tpl}}
}
