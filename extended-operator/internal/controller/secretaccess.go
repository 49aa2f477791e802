package controller

import (
	"context"
	"slices"
	"sync"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// The operator reads Secrets only in the namespaces of ExtendedStatefulSets that reference one (the
// same per-namespace grant as rollout-operator's, shared/controllerutil SecretAccess): the manifest
// ships the ClusterRole extended-operator-secret-reader (get, list, watch Secrets) bound nowhere, and
// the operator binds it to itself, with a RoleBinding, in each namespace where an ExtendedStatefulSet
// references a Secret, and deletes that RoleBinding when none is left. The manifest's admission
// policies (config/policy) admit from it only that RoleBinding, only in a namespace with an
// ExtendedStatefulSet. While it holds the grant it runs a metadata-only Secret informer in that
// namespace (secretWatches), whose events start the reconciles of the referrers as the cluster-wide
// Secret watch did; Secret data is read uncached, by the config hash.
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=rolebindings,verbs=get;list;create;update;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=bind,resourceNames=extended-operator-secret-reader
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=selfsubjectreviews,verbs=create

const (
	// SecretReaderClusterRole is the ClusterRole of deploy/extended-operator.yaml granting Secret
	// reads; the operator binds it in the namespaces that need it.
	SecretReaderClusterRole = "extended-operator-secret-reader"
	operatorName            = "extended-operator"
)

// newSecretAccess is the operator's grant: needed in a namespace while an ExtendedStatefulSet there
// (not being deleted) references a Secret; watches follows it.
func newSecretAccess(c client.Client, apiReader client.Reader, subject rbacv1.Subject, watches *secretWatches) *opsutil.SecretAccess {
	return &opsutil.SecretAccess{
		Client: c, APIReader: apiReader, Operator: operatorName, ClusterRole: SecretReaderClusterRole, Subject: subject,
		Purpose: "lets extended-operator read the Secrets the ExtendedStatefulSets in this namespace reference; deleted when none is left",
		Needed: func(ctx context.Context, namespace string) (bool, error) {
			var list extendedv1alpha1.ExtendedStatefulSetList
			if err := c.List(ctx, &list, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil { // read only
				return false, err
			}
			return slices.ContainsFunc(list.Items, func(e extendedv1alpha1.ExtendedStatefulSet) bool {
				return e.DeletionTimestamp.IsZero() && len(referencedNames(&e, "Secret")) > 0
			}), nil
		},
		Changed: watches.set,
	}
}

// secretWatches runs one metadata-only Secret informer per namespace where the operator holds Secret
// access, and sends each of its events to the controller (Events, a source.Channel mapped to the
// referrers). An informer's first list sends every Secret of the namespace, so a change made before
// it started is not missed: the referrers recompute their hash.
type secretWatches struct {
	client metadata.Interface
	Events chan event.GenericEvent

	mu      sync.Mutex
	running map[string]context.CancelFunc
}

func newSecretWatches(c metadata.Interface) *secretWatches {
	return &secretWatches{client: c, Events: make(chan event.GenericEvent, 256), running: map[string]context.CancelFunc{}}
}

// set starts (granted) or stops the namespace's informer.
func (w *secretWatches) set(ctx context.Context, namespace string, granted bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	stop, running := w.running[namespace]
	switch {
	case granted && !running:
		informerCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		w.running[namespace] = cancel
		inf := metadatainformer.NewFilteredMetadataInformer(w.client, schema.GroupVersionResource{Version: "v1", Resource: "secrets"},
			namespace, 0, toolscache.Indexers{}, nil).Informer()
		// The identity is all the events are read for (cache.go).
		if err := inf.SetTransform(slimConfigMeta); err != nil {
			log.FromContext(ctx).Error(err, "slimming the Secret informer", "namespace", namespace)
		}
		send := func(obj any) {
			if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if o, ok := obj.(client.Object); ok {
				select {
				case w.Events <- event.GenericEvent{Object: o}:
				case <-informerCtx.Done():
				}
			}
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc: send, UpdateFunc: func(_, o any) { send(o) }, DeleteFunc: send,
		}); err != nil {
			log.FromContext(ctx).Error(err, "watching Secrets", "namespace", namespace)
		}
		go inf.RunWithContext(informerCtx)
		log.FromContext(ctx).Info("watching Secrets (metadata)", "namespace", namespace)
	case !granted && running:
		stop()
		delete(w.running, namespace)
		log.FromContext(ctx).Info("no longer watching Secrets", "namespace", namespace)
	}
}

// stopAll stops every informer (the manager is stopping).
func (w *secretWatches) stopAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ns, stop := range w.running {
		stop()
		delete(w.running, ns)
	}
}

// setupSecretAccess registers the grant's controller and the informers' lifetime with the manager.
func setupSecretAccess(ctx context.Context, mgr ctrl.Manager, watches *secretWatches) (*opsutil.SecretAccess, error) {
	// The manager's client does not read from its cache before it starts, and this one writes.
	subject, err := opsutil.SelfSubject(ctx, mgr.GetClient())
	if err != nil {
		return nil, err
	}
	access := newSecretAccess(mgr.GetClient(), mgr.GetAPIReader(), subject, watches)
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		watches.stopAll()
		return nil
	})); err != nil {
		return nil, err
	}
	return access, access.Setup(mgr, "extendedstatefulset-secretaccess", &extendedv1alpha1.ExtendedStatefulSet{})
}
