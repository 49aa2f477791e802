// Package pullsecrets gives the pod webhook the registry credentials the kubelet would pull a pod's
// images with — the pod's imagePullSecrets and its ServiceAccount's — without an API call per pod.
//
// The webhook server holds no Secret or ServiceAccount permission of its own. The manifest ships the
// ClusterRole singleton-operator-pull-secret-reader (get, list, watch Secrets and ServiceAccounts),
// bound nowhere; the elected replica binds it to the webhook server's ServiceAccount, with a RoleBinding
// (shared/controllerutil SecretAccess), in each namespace that holds a StatefulSingleton, and deletes it
// when the last one goes. The manifest's admission policies (webhook-server/config/policy) admit from
// the webhook server only that RoleBinding, only in a namespace with a StatefulSingleton — the same
// guard as the operators' other Secret readers.
//
// Every replica keeps, in each of those namespaces, an informer cache of the namespace's
// ServiceAccounts and of its Secrets of type kubernetes.io/dockerconfigjson only (a field selector: RBAC
// cannot narrow a grant by Secret type, the cache never holds another type). Until a namespace's cache
// has synced (the RoleBinding is new, or the replica just started) its pods' images are read anonymously.
//
// The keychain is go-containerregistry's pkg/authn/kubernetes NewFromPullSecrets over the cached
// Secrets, not k8schain: k8schain adds the cloud providers' credential helpers (AWS, Azure, GCP SDKs in
// the binary, and calls to their metadata services from an admission path) and its kubernetes.New reads
// the ServiceAccount and Secrets through the API at every lookup, which the webhook may not do per pod.
// NewFromPullSecrets matches registries exactly as the kubelet's keyring does (longest path first).
package pullsecrets

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/google/go-containerregistry/pkg/authn"
	k8schain "github.com/google/go-containerregistry/pkg/authn/kubernetes"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// The pull-secret grant: the RoleBinding that binds the pull-secret reader ClusterRole to the webhook
// server in a namespace holding a StatefulSingleton, written only as the admission policies of
// config/policy allow (that one name, labels, ClusterRole and subject; only where a StatefulSingleton is).
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=rolebindings,verbs=get;list;create;update;delete
// It may bind that one ClusterRole (resourceNames), never another.
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=bind,resourceNames=singleton-operator-pull-secret-reader
// The RoleBinding's subject is its own identity, asked from the API server at start (SelfSubjectReview).
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=selfsubjectreviews,verbs=create

const (
	// DefaultClusterRole is the ClusterRole of the manifest the webhook server binds in the namespaces
	// holding a StatefulSingleton.
	DefaultClusterRole = "singleton-operator-pull-secret-reader"
	// Operator names the webhook server in its RoleBindings' labels; the RoleBinding is
	// <Operator>-secret-reader.
	Operator = "singleton-operator-webhook-server"
)

// errNotStarted is returned (and the namespace retried) before the manager started the caches.
var errNotStarted = errors.New("the pull secret caches are not started yet")

// Caches keeps the per-namespace caches; a manager Runnable on every replica.
type Caches struct {
	// Config and Scheme build the namespace caches (the manager's).
	Config *rest.Config
	Scheme *runtime.Scheme

	mu     sync.Mutex
	ctx    context.Context // the manager's, once started
	caches map[string]*namespaceCache
}

type namespaceCache struct {
	cache  cache.Cache
	cancel context.CancelFunc
	synced atomic.Bool
}

// Start runs until ctx ends, then stops every namespace cache.
func (c *Caches) Start(ctx context.Context) error {
	c.mu.Lock()
	c.ctx = ctx
	c.mu.Unlock()
	<-ctx.Done()
	c.mu.Lock()
	defer c.mu.Unlock()
	for ns, nc := range c.caches {
		nc.cancel()
		delete(c.caches, ns)
	}
	return nil
}

// NeedLeaderElection: every replica admits pods.
func (c *Caches) NeedLeaderElection() bool { return false }

// Set starts (want) or stops the cache of namespace.
func (c *Caches) Set(namespace string, want bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	nc, running := c.caches[namespace]
	switch {
	case want && !running:
		if c.ctx == nil {
			return errNotStarted
		}
		return c.start(namespace)
	case !want && running:
		nc.cancel()
		delete(c.caches, namespace)
	}
	return nil
}

// start builds and starts the cache of namespace; c.mu is held.
func (c *Caches) start(namespace string) error {
	nsCache, err := cache.New(c.Config, cache.Options{
		Scheme:            c.Scheme,
		DefaultNamespaces: map[string]cache.Config{namespace: {}},
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {Field: fields.OneTermEqualSelector("type", string(corev1.SecretTypeDockerConfigJson))},
		},
		ReaderFailOnMissingInformer: true,
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(c.ctx)
	nc := &namespaceCache{cache: nsCache, cancel: cancel}
	for _, obj := range []client.Object{&corev1.Secret{}, &corev1.ServiceAccount{}} {
		if _, err := nsCache.GetInformer(ctx, obj); err != nil {
			cancel()
			return err
		}
	}
	if c.caches == nil {
		c.caches = map[string]*namespaceCache{}
	}
	c.caches[namespace] = nc
	go func() {
		if err := nsCache.Start(ctx); err != nil {
			log.FromContext(ctx).Error(err, "the pull secret cache stopped", "namespace", namespace)
		}
	}()
	go func() {
		if nsCache.WaitForCacheSync(ctx) {
			nc.synced.Store(true)
		}
	}()
	return nil
}

// Keychain returns the credentials the kubelet would pull pod's images with: its imagePullSecrets and
// its ServiceAccount's (of type kubernetes.io/dockerconfigjson), from the namespace's cache; anonymous
// (nil) while that cache is not synced or holds none of them.
func (c *Caches) Keychain(ctx context.Context, pod *corev1.Pod) authn.Keychain {
	c.mu.Lock()
	nc := c.caches[pod.Namespace]
	c.mu.Unlock()
	if nc == nil || !nc.synced.Load() {
		return nil
	}
	names := make([]string, 0, len(pod.Spec.ImagePullSecrets))
	for _, ref := range pod.Spec.ImagePullSecrets {
		names = append(names, ref.Name)
	}
	saName := pod.Spec.ServiceAccountName
	if saName == "" {
		saName = "default"
	}
	sa := &corev1.ServiceAccount{}
	if err := nc.cache.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: saName}, sa); err == nil {
		for _, ref := range sa.ImagePullSecrets {
			if !slices.Contains(names, ref.Name) {
				names = append(names, ref.Name)
			}
		}
	}
	var secrets []corev1.Secret
	for _, name := range names {
		s := &corev1.Secret{}
		if err := nc.cache.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: name}, s); err == nil {
			secrets = append(secrets, *s)
		}
	}
	if len(secrets) == 0 {
		return nil
	}
	kc, err := k8schain.NewFromPullSecrets(ctx, secrets)
	if err != nil {
		log.FromContext(ctx).Info("Ignoring unreadable pull secrets", "namespace", pod.Namespace, "error", err.Error())
		return nil
	}
	return kc
}

// Setup registers, with mgr, the caches (every replica), the controller that starts and stops them as
// namespaces gain and lose StatefulSingletons (every replica), and the SecretAccess controller that
// keeps the RoleBindings (the elected replica). subject is the webhook server's identity.
func Setup(mgr ctrl.Manager, c *Caches, clusterRole string, subject rbacv1.Subject) error {
	hasSingleton := func(ctx context.Context, namespace string) (bool, error) {
		var list singletonv1.StatefulSingletonList
		if err := mgr.GetClient().List(ctx, &list, client.InNamespace(namespace)); err != nil {
			return false, err
		}
		return slices.ContainsFunc(list.Items, func(ss singletonv1.StatefulSingleton) bool { return ss.DeletionTimestamp.IsZero() }), nil
	}
	if err := mgr.Add(c); err != nil {
		return err
	}
	access := &opsutil.SecretAccess{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Operator: Operator, ClusterRole: clusterRole, Subject: subject,
		Purpose: "lets the singleton-operator webhook server read the image pull secrets and ServiceAccounts of this namespace, which holds a StatefulSingleton, to read the image configs of its pods; deleted when none is left",
		Needed:  hasSingleton,
	}
	if err := access.Setup(mgr, "statefulsingleton-pullsecretaccess", &singletonv1.StatefulSingleton{}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("statefulsingleton-pullsecretcaches").
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false)}).
		Watches(&singletonv1.StatefulSingleton{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace()}}}
		})).
		Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			need, err := hasSingleton(ctx, req.Namespace)
			if err != nil {
				return reconcile.Result{}, err
			}
			return reconcile.Result{}, c.Set(req.Namespace, need)
		}))
}
