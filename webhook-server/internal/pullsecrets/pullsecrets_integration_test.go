//go:build integration

package pullsecrets_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
	"github.com/statefulops/statefulops/shared/testsupport"
	"github.com/statefulops/statefulops/webhook-server/internal/imageconfig"
	"github.com/statefulops/statefulops/webhook-server/internal/imageconfig/registrytest"
	"github.com/statefulops/statefulops/webhook-server/internal/pullsecrets"
)

var suite testsupport.Suite

func TestMain(m *testing.M) {
	os.Exit(testsupport.RunSuite(m, &suite, filepath.Join("..", "..", "..", "singleton-operator", "config", "crd", "bases"), singletonv1.AddToScheme))
}

// The webhook server's identity as deploy/singleton-operator.yaml gives it.
const (
	saNamespace = "singleton-operator-system"
	saName      = "singleton-operator-webhook-server"
)

var subject = rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: saNamespace, Name: saName}

// installIdentity creates the webhook server's ServiceAccount, its generated ClusterRole (config/rbac,
// bound to it), the unbound ClusterRole singleton-operator-pull-secret-reader and the admission policies
// of deploy/singleton-operator.yaml, and returns a rest.Config impersonating the ServiceAccount once the
// policies are in force. Once per envtest.
func installIdentity(t *testing.T) *rest.Config {
	t.Helper()
	ctx := context.Background()
	raw, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", "role.yaml"))
	require.NoError(t, err)
	role := &rbacv1.ClusterRole{}
	require.NoError(t, utilyaml.Unmarshal([]byte(strings.Split(string(raw), "\n---\n")[0]), role))
	require.Equal(t, "ClusterRole", role.Kind)
	role.Name = "singleton-operator-webhook-server-role"
	raw, err = os.ReadFile(filepath.Join("..", "..", "config", "secretreader", "cluster_role.yaml"))
	require.NoError(t, err)
	reader := &rbacv1.ClusterRole{}
	require.NoError(t, utilyaml.Unmarshal(raw, reader))
	reader.Name = pullsecrets.DefaultClusterRole
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: saNamespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: saNamespace, Name: saName}},
		role, reader,
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role.Name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects:   []rbacv1.Subject{subject},
		},
	} {
		if err := suite.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			require.NoError(t, err)
		}
	}
	testsupport.InstallManifestPolicies(t, suite.Client, filepath.Join("..", "..", "..", "deploy", "singleton-operator.yaml"))
	cfg := rest.CopyConfig(suite.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + saNamespace + ":" + saName}
	as, err := client.New(cfg, client.Options{Scheme: suite.Scheme})
	require.NoError(t, err)
	access := access()
	require.Eventually(t, func() bool {
		err := as.Create(ctx, access.RoleBinding("kube-system"), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy")
	}, 30*time.Second, 20*time.Millisecond, "the policies are in force")
	return cfg
}

func access() *opsutil.SecretAccess {
	return &opsutil.SecretAccess{Operator: pullsecrets.Operator, ClusterRole: pullsecrets.DefaultClusterRole, Subject: subject}
}

func namespace(t *testing.T, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	require.NoError(t, suite.Client.Create(context.Background(), ns))
	return ns.Name
}

func singleton(t *testing.T, ns string) *singletonv1.StatefulSingleton {
	t.Helper()
	ss := &singletonv1.StatefulSingleton{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"},
		Spec:       singletonv1.StatefulSingletonSpec{Selector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
	}
	require.NoError(t, suite.Client.Create(context.Background(), ss))
	return ss
}

var cfgRef *rest.Config

func identity(t *testing.T) *rest.Config {
	if cfgRef == nil {
		cfgRef = installIdentity(t)
	}
	return cfgRef
}

// As the webhook server's ServiceAccount under its manifest RBAC and policies, every RoleBinding write a
// compromised webhook server could escalate with is refused; only its own grant, in a namespace with a
// StatefulSingleton, is admitted.
func TestRoleBindingPolicy(t *testing.T) {
	as, err := client.New(identity(t), client.Options{Scheme: suite.Scheme})
	require.NoError(t, err)
	with := namespace(t, "pull-with-")
	singleton(t, with)
	// The grant held (under another name), as it is while the webhook server runs: the Secret reads it
	// gives do not let it bind a role of the same rules to anyone else either (the policies refuse it,
	// not only RBAC's escalation check).
	held := access().RoleBinding(with)
	held.Name, held.Labels = "held-pull-secret-grant", nil
	require.NoError(t, suite.Client.Create(context.Background(), held))
	attempts, allowed := testsupport.CheckRoleBindingPolicy(t, as, suite.Client, access(), with, namespace(t, "pull-without-"))
	assert.Positive(t, attempts)
	assert.Zero(t, allowed)
}

// The webhook server, as its ServiceAccount: in a namespace holding a StatefulSingleton it binds the
// reader ClusterRole to itself, caches that namespace's dockerconfigjson Secrets and ServiceAccounts,
// and a pod's keychain (its ServiceAccount's imagePullSecrets) reads a private image from a real
// registry behind basic auth; it gets nothing in a namespace without one, and loses the grant and the
// cache when the last StatefulSingleton goes.
func TestKeychainFromThePodsServiceAccount(t *testing.T) {
	reg := registrytest.New(t, "puller", "s3cret")
	amd64 := v1.Platform{OS: "linux", Architecture: "amd64"}
	reg.Push(t, "private:1", registrytest.Image(t, v1.Config{Entrypoint: []string{"/private"}}, amd64))
	ctx := context.Background()
	with, without := namespace(t, "pull-with-"), namespace(t, "pull-without-")
	for _, ns := range []string{with, without} {
		require.NoError(t, suite.Client.Create(ctx, reg.PullSecret(ns, "registry", "puller", "s3cret")))
		require.NoError(t, suite.Client.Create(ctx, &corev1.ServiceAccount{
			ObjectMeta:       metav1.ObjectMeta{Namespace: ns, Name: "app"},
			ImagePullSecrets: []corev1.LocalObjectReference{{Name: "registry"}},
		}))
	}
	ss := singleton(t, with)

	caches := &pullsecrets.Caches{}
	suite.StartManagerAs(t, identity(t), func(_ context.Context, mgr ctrl.Manager) error {
		caches.Config, caches.Scheme = mgr.GetConfig(), mgr.GetScheme()
		return pullsecrets.Setup(mgr, caches, pullsecrets.DefaultClusterRole, subject)
	})
	resolver := imageconfig.New(imageconfig.Options{})
	read := func(ns string) error {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"}, Spec: corev1.PodSpec{ServiceAccountName: "app"}}
		_, err := resolver.Resolve(ctx, imageconfig.Request{Namespace: ns, Image: reg.Host + "/private:1", Platform: amd64, Keychain: caches.Keychain(ctx, pod)})
		return err
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, read(with))
	}, 30*time.Second, 50*time.Millisecond, "the pod's ServiceAccount's pull secret is used")
	rb := &rbacv1.RoleBinding{}
	require.NoError(t, suite.Client.Get(ctx, client.ObjectKey{Namespace: with, Name: access().RoleBindingName()}, rb))
	assert.Equal(t, []rbacv1.Subject{subject}, rb.Subjects)

	err := read(without)
	require.Error(t, err, "no StatefulSingleton, no grant: anonymous")
	assert.Contains(t, err.Error(), "UNAUTHORIZED")
	assert.True(t, apierrors.IsNotFound(suite.Client.Get(ctx, client.ObjectKey{Namespace: without, Name: access().RoleBindingName()}, &rbacv1.RoleBinding{})))

	require.NoError(t, suite.Client.Delete(ctx, ss))
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(suite.Client.Get(ctx, client.ObjectKey{Namespace: with, Name: access().RoleBindingName()}, &rbacv1.RoleBinding{}))
	}, 30*time.Second, 50*time.Millisecond, "the grant goes with the last StatefulSingleton")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: with, Name: "p"}, Spec: corev1.PodSpec{ServiceAccountName: "app"}}
	require.Eventually(t, func() bool { return caches.Keychain(ctx, pod) == nil }, 30*time.Second, 50*time.Millisecond, "and so does the cache")
}
