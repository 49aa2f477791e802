// Package controller is the ExtendedStatefulSet controller of extended-operator. Each template change of
// an ExtendedStatefulSet is a new version, deployed as its own StatefulSet <name>-v<N> beside the one
// serving; its canaries come up first and must become Ready within canaryWatchTime (restarted up to
// retryCount times), then its remaining pods, and once it is fully rolled out the lower versions are
// deleted. A version that fails is annotated fissile.cloudfoundry.org/stale=true and scaled to zero while
// the previous version keeps serving. With updateOnEnvChange, a keyed hash of the data of every
// referenced ConfigMap and Secret is kept in the pod templates, so a data change rolls the pods in place.
// A template with volumeClaimTemplates upgrades ordinal by ordinal, each ordinal's volumes moving to the
// new version's claims (handover.go), so data stays with its ordinal and no volume is used by two pods.
// With spec.az.zones each zone has its own versions (<name>-z<index>-v<N>, zones.go), pinned to the zone,
// and upgrades and configuration rolls go one zone at a time; a zone without a Ready node is reported
// (nodes.go). With spec.upgradeJobs a new version waits, without pods, for its pre Job and, once it runs
// in every zone, its post Job runs (jobs.go); a failed pre Job marks the version stale, a failed post Job
// is reported and may roll back.
//
// Restart safety: nothing lives only in memory. Versions, phases, watch start times and retry counts
// are annotations of the StatefulSets, written with a resourceVersion precondition; upgrade Jobs have
// names derived from their version, so a restarted operator finds them; and the config hash
// is recomputed from the data on every reconcile (level-triggered: a change made while the operator was
// down still rolls the pods). Only the debounce of config bursts is in memory; losing it delays a roll
// by one quiet period, never skips one.
//
// User ConfigMaps and Secrets get no ownerReferences and no finalizers (unlike seed 004): deleting the
// ExtendedStatefulSet must never garbage-collect them. Referrers are found through field indexes.
package controller

import (
	"context"
	"errors"
	"time"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/metadata"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch
// ConfigMaps are watched cluster-wide (metadata, cache.go) and read uncached by the config hash;
// Secrets only where the operator holds the per-namespace grant (secretaccess.go).
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch

// Field indexes of ExtendedStatefulSets, to find the referrers of a ConfigMap or Secret.
const (
	indexConfigMaps = "spec.template.configMapRefs"
	indexSecrets    = "spec.template.secretRefs"
)

// Defaults of the timings the command line can change.
const (
	// DefaultConfigQuietPeriod is how long referenced data must stay unchanged before the pods roll, so
	// a burst of edits rolls them once, for objects without spec.updateStrategy.configChangeQuietPeriod
	// (written before the field existed; its schema default is the same 2s).
	DefaultConfigQuietPeriod = 2 * time.Second
	// DefaultConfigMaxDelay bounds the debounce when edits never stop.
	DefaultConfigMaxDelay = 10 * time.Second
	// defaultWatchTime applies when the schema default is missing (objects written before it existed).
	defaultWatchTime = 5 * time.Minute
	// pollWhileWaiting bounds how long a reconcile waits for pods without an event.
	pollWhileWaiting = 30 * time.Second
)

// Reconciler reconciles ExtendedStatefulSets.
//
// Its Client writes StatefulSets, pods and ExtendedStatefulSet status; its Cache holds
// ExtendedStatefulSets, StatefulSets and ConfigMaps (as metadata, cache.go), Secrets only through the
// per-namespace informers of secretaccess.go; its APIReader lists pods (only to restart canaries; pods
// are not cached) and reads the referenced ConfigMaps and Secrets for the config hash.
type Reconciler struct {
	opsutil.Access
	// Scheme builds ownerReferences.
	Scheme *runtime.Scheme
	// HashKey keys the config hash (see loadOrCreateHashKey).
	HashKey []byte

	debounce *debouncer
	// secretAccess grants the operator Secret reads in a namespace before it reads one there.
	secretAccess *opsutil.SecretAccess
	// writes are the status writes of this process, to tell a cached ExtendedStatefulSet older than the
	// last of them (caughtUp).
	writes *opsutil.WriteTracker
}

// Options configure the controller, from the command line (AddFlags) and in tests (Overrides, HashKey).
type Options struct {
	opsutil.Overrides
	// ConfigQuietPeriod and ConfigMaxDelay tune the debounce of configuration changes; zero means the
	// defaults.
	ConfigQuietPeriod, ConfigMaxDelay time.Duration
	// HashKeySecret is the Secret (namespace/name) holding the config hash's key, created when
	// missing; empty means DefaultHashKeySecret.
	HashKeySecret string
	// HashKey, when set, is the key itself (tests); HashKeySecret is then not read.
	HashKey []byte
}

// AddFlags adds the operator's flags to the command's flag set; they set o, whose Setup main.go passes
// to shared/manager.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.ConfigQuietPeriod, "config-quiet-period", DefaultConfigQuietPeriod,
		"How long referenced ConfigMap/Secret data must stay unchanged before pods roll (bursts roll once), for ExtendedStatefulSets without spec.updateStrategy.configChangeQuietPeriod.")
	fs.DurationVar(&o.ConfigMaxDelay, "config-max-delay", DefaultConfigMaxDelay,
		"Longest a configuration roll waits for edits to stop.")
	fs.StringVar(&o.HashKeySecret, "config-hash-key-secret", DefaultHashKeySecret,
		"Secret (namespace/name) holding the key of the config hash; created with a random key when missing.")
}

// Setup registers the ExtendedStatefulSet controller with the manager.
func (o *Options) Setup(ctx context.Context, mgr ctrl.Manager) error {
	opts := *o // the defaults below fill a copy
	opsutil.RegisterMetrics(versionsCreated, versionsDeleted, staleVersions, canaryRetries,
		configRestarts, replicasRestored, volumeHandovers, configDelay, upgradeDuration, zonesRemoved, zoneUpgradesWaiting,
		upgradeJobsCreated, zonesWithoutReadyNode, claimsResized)
	indexer := mgr.GetFieldIndexer()
	for index, kind := range map[string]string{indexConfigMaps: "ConfigMap", indexSecrets: "Secret"} {
		if err := indexer.IndexField(ctx, &extendedv1alpha1.ExtendedStatefulSet{}, index, func(o client.Object) []string {
			return referencedNames(o.(*extendedv1alpha1.ExtendedStatefulSet), kind)
		}); err != nil {
			return err
		}
	}
	if opts.ConfigQuietPeriod <= 0 {
		opts.ConfigQuietPeriod = DefaultConfigQuietPeriod
	}
	if opts.ConfigMaxDelay <= 0 {
		opts.ConfigMaxDelay = DefaultConfigMaxDelay
	}
	metadataClient, err := metadata.NewForConfig(mgr.GetConfig())
	if err != nil {
		return err
	}
	secretWatches := newSecretWatches(metadataClient)
	r := &Reconciler{
		Access:   opsutil.NewAccess(mgr, "extended-operator", opts.Overrides),
		Scheme:   mgr.GetScheme(),
		debounce: newDebouncer(opts.ConfigQuietPeriod, opts.ConfigMaxDelay),
		writes:   opsutil.NewWriteTracker(),
	}
	if r.HashKey = opts.HashKey; r.HashKey == nil {
		if opts.HashKeySecret == "" {
			opts.HashKeySecret = DefaultHashKeySecret
		}
		key, err := loadOrCreateHashKey(ctx, mgr.GetAPIReader(), r.Client, opts.HashKeySecret)
		if err != nil {
			return err
		}
		r.HashKey = key
	}
	if r.secretAccess, err = setupSecretAccess(ctx, mgr, secretWatches); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("extendedstatefulset").
		WithOptions(controller.Options{MaxConcurrentReconciles: opsutil.Workers}).
		For(&extendedv1alpha1.ExtendedStatefulSet{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&appsv1.StatefulSet{}).
		Owns(&batchv1.Job{}).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.zoneReferrers), builder.WithPredicates(nodeZoneChanged())).
		// A class that now allows expansion resumes the claims waiting for it (claimresize.go).
		Watches(&storagev1.StorageClass{}, handler.EnqueueRequestsFromMapFunc(r.expansionWaiters), builder.WithPredicates(expansionChanged())).
		// Metadata only, slim (cache.go): an event names the object; the hash reads its data uncached.
		Watches(ConfigMapMeta(), handler.EnqueueRequestsFromMapFunc(r.referrers(indexConfigMaps)), builder.WithPredicates(configChanged())).
		// Secrets: the per-namespace metadata informers of the granted namespaces (secretaccess.go).
		WatchesRawSource(source.Channel(secretWatches.Events, handler.EnqueueRequestsFromMapFunc(r.referrers(indexSecrets)))).
		Complete(reconcile.AsReconciler(mgr.GetClient(), r))
}

// Reconcile drives one ExtendedStatefulSet's versions towards its spec and writes its status
// (reconcile.AsReconciler gets the object, and ends here when it is gone). There is no finalizer: its
// StatefulSets and Jobs are owned by it and go with it, and the user's ConfigMaps and Secrets stay.
func (r *Reconciler) Reconcile(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet) (result reconcile.Result, err error) {
	if !ests.DeletionTimestamp.IsZero() {
		r.reconcileDelete(ests)
		return reconcile.Result{}, nil
	}
	if ests, err = r.caughtUp(ctx, ests); ests == nil || err != nil {
		return reconcile.Result{}, err
	}
	s, err := r.newScope(ctx, ests)
	// The one status write, also after an error: the conditions say what failed.
	defer func() { result, err = r.patchStatus(ctx, s, err) }()
	if err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, r.reconcileNormal(ctx, s)
}

// caughtUp returns the ExtendedStatefulSet to reconcile: the cached one, or, when the cache has not yet
// seen this process's last status write to it, the object read from the API server (nil when it is
// gone). The status is merge-patched against the object read, so a copy older than the last write would
// leave the fields that write changed and this one computes the same as the stale copy (a version that
// runs again after a configuration roll) as the last write left them, contradicting the conditions
// written beside them; and its waiting Events compare with the conditions as written. The For watch drops
// status-only updates, so no event of that write would start a later reconcile: it reads live instead.
func (r *Reconciler) caughtUp(ctx context.Context, ests *extendedv1alpha1.ExtendedStatefulSet) (*extendedv1alpha1.ExtendedStatefulSet, error) {
	if !r.writes.Behind(ests) {
		return ests, nil
	}
	live := &extendedv1alpha1.ExtendedStatefulSet{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(ests), live); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	if !live.DeletionTimestamp.IsZero() {
		r.reconcileDelete(live)
		return nil, nil
	}
	return live, nil
}

// reconcileDelete forgets the debounce and the status writes of a deleted ExtendedStatefulSet; owner
// references delete the rest.
func (r *Reconciler) reconcileDelete(ests *extendedv1alpha1.ExtendedStatefulSet) {
	for _, z := range desiredZones(ests) {
		r.debounce.forget(debounceKey(ests, z))
	}
	r.writes.Forget(ests)
}

// patchStatus computes the status from the scope and the error that ended the reconcile, if any, writes
// it when it changed, and then records the waiting Events (a Conflict writes nothing). The result asks
// for the next reconcile the scope needs. An object the API server refuses (invalidSpec) is not
// retried: Stalled says why, and the spec change that fixes it starts the next reconcile.
func (r *Reconciler) patchStatus(ctx context.Context, s *scope, err error) (reconcile.Result, error) {
	if apierrors.IsConflict(err) {
		// Someone else wrote the object since it was read (with restartVia PhasedRollout the
		// rollout-operator writes the same StatefulSet's partition): nothing is wrong, and nothing is
		// reported; the retry reads anew and decides again.
		return reconcile.Result{}, err
	}
	if err != nil {
		s.errMessage, s.invalidSpec = err.Error(), apierrors.IsInvalid(err)
	}
	s.merge()
	r.applyStatus(s)
	wrote, serr := opsutil.PatchStatus(ctx, r.Client, s.ests, s.orig, opsutil.IgnoreNotFound())
	if serr != nil {
		return reconcile.Result{}, errors.Join(err, serr)
	}
	if wrote {
		r.writes.Wrote(s.ests)
	}
	r.waitingEvents(s.ests, s.orig)
	r.claimEvents(s.ests, s.orig)
	if s.invalidSpec {
		ctrl.LoggerFrom(ctx).Info("the API server refuses an object built from the spec; waiting for a spec change", "error", err)
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: s.requeueAfter}, nil
}
