package status

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
	opsutil "github.com/statefulops/statefulops/shared/controllerutil"
)

// Summary is what `status -o json|yaml` prints: one entry per object, in the order of the text view.
// Its field names are a stable interface for scripts; times are absolute (the text view shows ages).
type Summary struct {
	Objects []Object `json:"objects"`
}

// Object is one statefulops object: its health and its workload (exactly one of the kind fields is set).
type Object struct {
	Kind       string      `json:"kind"`
	APIVersion string      `json:"apiVersion"`
	Namespace  string      `json:"namespace"`
	Name       string      `json:"name"`
	Created    metav1.Time `json:"created"`
	Health     Health      `json:"health"`

	Singleton *Singleton `json:"singleton,omitempty"`
	Lock      *Lock      `json:"lock,omitempty"`
	Rollout   *Rollout   `json:"rollout,omitempty"`
	Cluster   *Cluster   `json:"cluster,omitempty"`
	Extended  *Extended  `json:"extended,omitempty"`
}

// Health is the kstatus verdict (what Flux, Argo CD and kpt read) and the condition that says what the
// object waits for: Stalled when True, else Reconciling when True, else Ready.
type Health struct {
	// Status is kstatus's: Current, InProgress, Failed, Terminating, NotFound or Unknown.
	Status  string `json:"status"`
	Message string `json:"message,omitempty"`
	// Condition is the type of the condition Reason and ConditionMessage come from.
	Condition        string `json:"condition,omitempty"`
	ConditionStatus  string `json:"conditionStatus,omitempty"`
	Reason           string `json:"reason,omitempty"`
	ConditionMessage string `json:"conditionMessage,omitempty"`
}

// Singleton is a StatefulSingleton's pods and handovers. The status keeps only the last handover's
// gap (lastTransitionDuration), not a history of handovers.
type Singleton struct {
	Phase         string         `json:"phase,omitempty"`
	HoldMode      string         `json:"holdMode"`
	Epoch         int64          `json:"epoch"`
	ActivePod     string         `json:"activePod,omitempty"`
	ActivePodNode string         `json:"activePodNode,omitempty"`
	Pods          []SingletonPod `json:"pods"`
	// Handover is the terminating pod the current handover waits for.
	Handover *Handover `json:"handover,omitempty"`
	// LastTransition is when the current or last handover started.
	LastTransition *metav1.Time `json:"lastTransition,omitempty"`
	// LastHandoverGap is how long the last completed handover held the new pod after the old one was gone.
	LastHandoverGap *metav1.Duration `json:"lastHandoverGap,omitempty"`
}

// SingletonPod is a pod the singleton's selector matches. Role is active (released and current),
// held (waiting for its start), released (released but not the active pod), terminating, or
// unmanaged (admitted without a hold).
type SingletonPod struct {
	Name     string `json:"name"`
	Role     string `json:"role"`
	HoldMode string `json:"holdMode,omitempty"`
	Node     string `json:"node,omitempty"`
	Ready    bool   `json:"ready"`
}

// Handover is the grace-period progress of the pod a handover waits for.
type Handover struct {
	WaitingFor         string      `json:"waitingFor"`
	TerminatingSince   metav1.Time `json:"terminatingSince"`
	GracePeriodSeconds int64       `json:"gracePeriodSeconds"`
}

// Lock is a StatefulSetLock's election. The status keeps only the last failover, not a history.
type Lock struct {
	StatefulSet string `json:"statefulSet"`
	Lease       string `json:"lease"`
	Writer      string `json:"writer,omitempty"`
	// Epoch is the Lease's leaseTransitions, the fencing epoch stamped on the writer.
	Epoch   int32    `json:"epoch"`
	Readers []string `json:"readers"`
	// Unlabelled are pods of the StatefulSet with no role label yet.
	Unlabelled   []string  `json:"unlabelled,omitempty"`
	LastFailover *Failover `json:"lastFailover,omitempty"`
}

// Failover is the last change of writer.
type Failover struct {
	Time   *metav1.Time `json:"time,omitempty"`
	Reason string       `json:"reason,omitempty"`
}

// Rollout is a PhasedRollout's progress: the partition, the step and each check's last result.
type Rollout struct {
	Phase           string          `json:"phase,omitempty"`
	Message         string          `json:"message,omitempty"`
	Target          string          `json:"target"`
	Targets         []RolloutTarget `json:"targets,omitempty"`
	Partition       *int32          `json:"partition,omitempty"`
	Replicas        *int32          `json:"replicas,omitempty"`
	CurrentRevision string          `json:"currentRevision,omitempty"`
	UpdateRevision  string          `json:"updateRevision,omitempty"`
	Step            *RolloutStep    `json:"step,omitempty"`
	Checks          []RolloutCheck  `json:"checks,omitempty"`
	LastQueryResult string          `json:"lastQueryResult,omitempty"`
	LastError       string          `json:"lastError,omitempty"`
	Paused          bool            `json:"paused,omitempty"`
	DryRun          bool            `json:"dryRun,omitempty"`
}

// RolloutTarget is one StatefulSet of spec.targetRefs.
type RolloutTarget struct {
	Name      string `json:"name"`
	State     string `json:"state"`
	Partition *int32 `json:"partition,omitempty"`
	Replicas  int32  `json:"replicas"`
	Updated   int32  `json:"updated"`
	Ready     int32  `json:"ready"`
}

// RolloutStep is the step under way.
type RolloutStep struct {
	State     string `json:"state,omitempty"`
	Pod       string `json:"pod,omitempty"`
	Partition *int32 `json:"partition,omitempty"`
	// Batch is the spec.steps batch, when the rollout uses steps.
	Batch *rolloutv1alpha1.BatchStatus `json:"batch,omitempty"`
}

// RolloutCheck is one check's record in the current step.
type RolloutCheck struct {
	Name             string       `json:"name"`
	LastResult       string       `json:"lastResult,omitempty"`
	LastValue        string       `json:"lastValue,omitempty"`
	LastCheckTime    *metav1.Time `json:"lastCheckTime,omitempty"`
	ConsecutivePass  int32        `json:"consecutivePass"`
	SuccessThreshold int32        `json:"successThreshold,omitempty"`
	Runs             int32        `json:"runs"`
	Failed           int32        `json:"failed"`
}

// Cluster is a StatefulCluster's identities: the live ones, the retired ones and their kept claims.
type Cluster struct {
	Replicas        int32             `json:"replicas"`
	Live            int32             `json:"live"`
	Ready           int32             `json:"ready"`
	CurrentRevision string            `json:"currentRevision,omitempty"`
	UpdateRevision  string            `json:"updateRevision,omitempty"`
	NextIdentity    int64             `json:"nextIdentity"`
	Identities      []Identity        `json:"identities"`
	Retired         []RetiredIdentity `json:"retired,omitempty"`
	RetainedClaims  []RetainedClaim   `json:"retainedClaims,omitempty"`
}

// Identity is a live pod of a StatefulCluster with its claims.
type Identity struct {
	Name        string   `json:"name"`
	Node        string   `json:"node,omitempty"`
	Ready       bool     `json:"ready"`
	Terminating bool     `json:"terminating,omitempty"`
	Claims      []string `json:"claims,omitempty"`
}

// RetiredIdentity is an entry of the StatefulCluster's ledger, newest first.
type RetiredIdentity struct {
	Name      string       `json:"name"`
	Reason    string       `json:"reason,omitempty"`
	Message   string       `json:"message,omitempty"`
	Node      string       `json:"node,omitempty"`
	RetiredAt *metav1.Time `json:"retiredAt,omitempty"`
	Claims    []string     `json:"claims,omitempty"`
}

// RetainedClaim is a claim of a retired identity that was kept.
type RetainedClaim struct {
	Name      string       `json:"name"`
	Identity  string       `json:"identity,omitempty"`
	RetiredAt *metav1.Time `json:"retiredAt,omitempty"`
}

// Extended is an ExtendedStatefulSet's versions, zones and canaries.
type Extended struct {
	Replicas       int32        `json:"replicas"`
	Ready          int32        `json:"ready"`
	Updated        int32        `json:"updated"`
	CurrentVersion int32        `json:"currentVersion"`
	UpdateVersion  int32        `json:"updateVersion"`
	Versions       []Version    `json:"versions"`
	Zones          []Zone       `json:"zones,omitempty"`
	Canaries       Canaries     `json:"canaries"`
	UpgradeJobs    []UpgradeJob `json:"upgradeJobs,omitempty"`
}

// Version is one version with a StatefulSet, and its pods.
type Version struct {
	Version int32 `json:"version"`
	Running bool  `json:"running"`
	// Phase is where the version is in its upgrade (its StatefulSet's phase annotation): PreJob,
	// Canary, Rollout, PostJob or Done.
	Phase string `json:"phase,omitempty"`
	// Stale is true when the version failed and was marked stale.
	Stale bool `json:"stale,omitempty"`
	Pods  int  `json:"pods"`
	Ready int  `json:"ready"`
}

// Zone is one availability zone.
type Zone struct {
	Name           string `json:"name"`
	Index          int32  `json:"index"`
	Replicas       int32  `json:"replicas"`
	Ready          int32  `json:"ready"`
	CurrentVersion int32  `json:"currentVersion"`
	UpdateVersion  int32  `json:"updateVersion"`
	ReadyNodes     int32  `json:"readyNodes"`
}

// Canaries are the canary settings and the canary pods: those of a version in its Canary phase.
type Canaries struct {
	Count      int32    `json:"count"`
	Retries    int32    `json:"retries"`
	RetryCount int32    `json:"retryCount"`
	Pods       []string `json:"pods,omitempty"`
}

// UpgradeJob is a pre or post upgrade Job.
type UpgradeJob struct {
	Name    string `json:"name"`
	Type    string `json:"type,omitempty"`
	Version int32  `json:"version"`
	State   string `json:"state,omitempty"`
}

// namespaceState is what the views read besides the objects themselves, per namespace: pods only
// where an object's status does not say what a view shows, StatefulSets for a rollout's partition.
type namespaceState struct {
	Pods         []corev1.Pod
	StatefulSets []appsv1.StatefulSet
}

// summarize builds the Object of one statefulops object.
func summarize(k kind, obj client.Object, ns *namespaceState) (Object, error) {
	o := Object{
		Kind: k.Kind, APIVersion: k.APIVersion,
		Namespace: obj.GetNamespace(), Name: obj.GetName(), Created: obj.GetCreationTimestamp(),
	}
	h, err := health(k, obj)
	if err != nil {
		return o, err
	}
	o.Health = h
	if ns == nil {
		ns = &namespaceState{}
	}
	switch x := obj.(type) {
	case *singletonv1.StatefulSingleton:
		o.Singleton, err = singletonView(x, ns.Pods)
	case *leasev1.StatefulSetLock:
		o.Lock = lockView(x, ns.Pods)
	case *rolloutv1alpha1.PhasedRollout:
		o.Rollout = rolloutView(x, ns.StatefulSets)
	case *clusterv1alpha1.StatefulCluster:
		o.Cluster, err = clusterView(x, ns.Pods)
	case *extendedv1alpha1.ExtendedStatefulSet:
		o.Extended = extendedView(x, ns.Pods, ns.StatefulSets)
	default:
		return o, fmt.Errorf("%T is not a statefulops kind", obj)
	}
	return o, err
}

// health computes the kstatus verdict on the object as unstructured, as Flux and kpt do.
func health(k kind, obj client.Object) (Health, error) {
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return Health{}, fmt.Errorf("converting %s %s/%s: %w", k.Kind, obj.GetNamespace(), obj.GetName(), err)
	}
	u := &unstructured.Unstructured{Object: raw}
	u.SetAPIVersion(k.APIVersion)
	u.SetKind(k.Kind)
	res, err := kstatus.Compute(u)
	if err != nil {
		return Health{}, fmt.Errorf("computing the status of %s %s/%s: %w", k.Kind, obj.GetNamespace(), obj.GetName(), err)
	}
	h := Health{Status: res.Status.String(), Message: res.Message}
	conds := conditionsOf(obj)
	for _, t := range []string{"Stalled", "Reconciling", "Ready"} {
		c := meta.FindStatusCondition(conds, t)
		if c == nil || (t != "Ready" && c.Status != metav1.ConditionTrue) {
			continue
		}
		h.Condition, h.ConditionStatus, h.Reason, h.ConditionMessage = c.Type, string(c.Status), c.Reason, c.Message
		break
	}
	return h, nil
}

func conditionsOf(obj client.Object) []metav1.Condition {
	switch x := obj.(type) {
	case *singletonv1.StatefulSingleton:
		return x.Status.Conditions
	case *leasev1.StatefulSetLock:
		return x.Status.Conditions
	case *rolloutv1alpha1.PhasedRollout:
		return x.Status.Conditions
	case *clusterv1alpha1.StatefulCluster:
		return x.Status.Conditions
	case *extendedv1alpha1.ExtendedStatefulSet:
		return x.Status.Conditions
	}
	return nil
}

// singletonView reads the active pod, the handover and the last gap from the status, and the held
// pods (which the status does not list) from the pods the selector matches.
func singletonView(s *singletonv1.StatefulSingleton, pods []corev1.Pod) (*Singleton, error) {
	v := &Singleton{
		Phase: string(s.Status.Phase), HoldMode: string(s.Spec.HoldMode), Epoch: s.Status.Epoch,
		ActivePod: s.Status.ActivePod, ActivePodNode: s.Status.ActivePodNode,
		LastTransition: s.Status.TransitionTimestamp, LastHandoverGap: s.Status.LastTransitionDuration,
		Pods: []SingletonPod{},
	}
	if v.HoldMode == "" {
		v.HoldMode = string(singletonv1.HoldModeWrapper)
	}
	if h := s.Status.Handover; h != nil {
		v.Handover = &Handover{WaitingFor: h.WaitingFor, TerminatingSince: h.TerminatingSince, GracePeriodSeconds: h.GracePeriodSeconds}
	}
	sel, err := metav1.LabelSelectorAsSelector(&s.Spec.Selector)
	if err != nil {
		// The operator reports an unparsable selector (Stalled, InvalidSelector); the view shows that.
		return v, nil
	}
	for i := range pods {
		p := &pods[i]
		if sel.Empty() || !sel.Matches(labels.Set(p.Labels)) {
			continue
		}
		sp := SingletonPod{Name: p.Name, HoldMode: p.Annotations[singletonv1.AnnotationHoldMode], Node: p.Spec.NodeName, Ready: opsutil.PodReady(p)}
		_, granted := p.Annotations[singletonv1.AnnotationStartGranted]
		_, stamped := p.Annotations[singletonv1.AnnotationEpoch]
		switch {
		case p.DeletionTimestamp != nil:
			sp.Role = "terminating"
		case p.Name == s.Status.ActivePod && (s.Status.ActivePodUID == "" || string(p.UID) == s.Status.ActivePodUID):
			sp.Role = "active"
		case sp.HoldMode == "":
			sp.Role = "unmanaged"
		case granted || stamped:
			sp.Role = "released"
		default:
			sp.Role = "held"
		}
		v.Pods = append(v.Pods, sp)
	}
	rank := map[string]int{"active": 0, "held": 1, "released": 2, "terminating": 3, "unmanaged": 4}
	sort.SliceStable(v.Pods, func(i, j int) bool {
		if rank[v.Pods[i].Role] != rank[v.Pods[j].Role] {
			return rank[v.Pods[i].Role] < rank[v.Pods[j].Role]
		}
		return v.Pods[i].Name < v.Pods[j].Name
	})
	return v, nil
}

// lockView reads the writer, epoch and last failover from the status, and the readers from the
// StatefulSet's pods' role labels.
func lockView(l *leasev1.StatefulSetLock, pods []corev1.Pod) *Lock {
	v := &Lock{
		StatefulSet: l.Spec.StatefulSetName, Lease: l.Spec.LeaseName,
		Writer: l.Status.WriterPod, Epoch: l.Status.LeaseTransitions, Readers: []string{},
	}
	if l.Status.LastFailoverTime != nil || l.Status.LastFailoverReason != "" {
		v.LastFailover = &Failover{Time: l.Status.LastFailoverTime, Reason: l.Status.LastFailoverReason}
	}
	for i := range pods {
		p := &pods[i]
		if !ownedByStatefulSet(p, l.Spec.StatefulSetName) || p.DeletionTimestamp != nil {
			continue
		}
		switch p.Labels[leasev1.RoleLabel] {
		case leasev1.RoleReader:
			v.Readers = append(v.Readers, p.Name)
		case leasev1.RoleWriter:
		default:
			v.Unlabelled = append(v.Unlabelled, p.Name)
		}
	}
	sortByOrdinal(v.Readers)
	sortByOrdinal(v.Unlabelled)
	return v
}

func ownedByStatefulSet(p *corev1.Pod, name string) bool {
	for _, ref := range p.OwnerReferences {
		if ref.Kind == "StatefulSet" && ref.Name == name && ref.Controller != nil && *ref.Controller {
			return true
		}
	}
	return false
}

// rolloutView reads everything from the status, but the partition of an idle rollout, which only the
// StatefulSet has.
func rolloutView(r *rolloutv1alpha1.PhasedRollout, sets []appsv1.StatefulSet) *Rollout {
	st := r.Status
	v := &Rollout{
		Phase: string(st.Phase), Message: st.Message, Target: r.Spec.TargetRef,
		Replicas: st.Replicas, CurrentRevision: st.CurrentRevision, UpdateRevision: st.UpdateRevision,
		LastQueryResult: st.LastQueryResult, LastError: st.LastError,
		Paused: r.Spec.Paused, DryRun: r.Spec.AnalysisOnly,
	}
	if v.Target == "" {
		v.Target = st.ActiveTarget
	}
	for _, t := range st.Targets {
		v.Targets = append(v.Targets, RolloutTarget{Name: t.Name, State: string(t.State), Partition: t.Partition,
			Replicas: t.Replicas, Updated: t.UpdatedReplicas, Ready: t.ReadyReplicas})
	}
	if rp := st.RollingPodStatus; rp != nil {
		v.Partition = rp.Partition
		v.Step = &RolloutStep{State: string(rp.Status), Pod: rp.Pod, Partition: rp.Partition, Batch: st.Batch}
		thresholds := map[string]int32{"check": r.Spec.Check.SuccessThreshold}
		for _, c := range r.Spec.Checks {
			thresholds[c.Name] = c.SuccessThreshold
		}
		for _, c := range rp.Checks {
			v.Checks = append(v.Checks, RolloutCheck{
				Name: c.Name, LastResult: string(c.LastResult), LastValue: c.LastValue, LastCheckTime: c.LastCheckTime,
				ConsecutivePass: c.ConsecutiveSuccessfulChecks, SuccessThreshold: thresholds[c.Name],
				Runs: c.TotalChecks, Failed: c.TotalFailedChecks,
			})
		}
		if len(rp.Checks) == 0 && rp.TotalChecks > 0 {
			// A rollout with only spec.check keeps the counters on the step itself.
			last := "Pass"
			if rp.ConsecutiveFailedChecks > 0 {
				last = "Fail"
			}
			v.Checks = append(v.Checks, RolloutCheck{
				Name: "check", LastResult: last, LastValue: st.LastQueryResult, LastCheckTime: rp.LastCheckTime,
				ConsecutivePass: rp.ConsecutiveSuccessfulChecks, SuccessThreshold: r.Spec.Check.SuccessThreshold,
				Runs: rp.TotalChecks, Failed: rp.TotalFailedChecks,
			})
		}
	}
	if v.Partition == nil {
		for i := range sets {
			s := &sets[i]
			if s.Name != v.Target {
				continue
			}
			if ru := s.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
				p := *ru.Partition
				v.Partition = &p
			} else {
				zero := int32(0)
				v.Partition = &zero
			}
			if v.Replicas == nil && s.Spec.Replicas != nil {
				n := *s.Spec.Replicas
				v.Replicas = &n
			}
		}
	}
	return v
}

// clusterView reads the retired identities and their claims from the status, and the live
// identities from the pods status.selector selects.
func clusterView(c *clusterv1alpha1.StatefulCluster, pods []corev1.Pod) (*Cluster, error) {
	st := c.Status
	v := &Cluster{
		Live: st.Replicas, Ready: st.ReadyReplicas,
		CurrentRevision: st.CurrentRevision, UpdateRevision: st.UpdateRevision,
		NextIdentity: st.NextIdentity, Identities: []Identity{},
	}
	if c.Spec.Replicas != nil {
		v.Replicas = *c.Spec.Replicas
	}
	for _, r := range st.Identities {
		v.Retired = append(v.Retired, RetiredIdentity{Name: r.Name, Reason: string(r.Reason), Message: r.Message,
			Node: r.Node, RetiredAt: r.RetiredAt, Claims: r.Claims})
	}
	for _, rc := range st.RetiredClaims {
		v.RetainedClaims = append(v.RetainedClaims, RetainedClaim{Name: rc.Name, Identity: rc.Identity, RetiredAt: rc.RetiredAt})
	}
	if st.Selector == "" {
		return v, nil
	}
	sel, err := labels.Parse(st.Selector)
	if err != nil {
		return v, fmt.Errorf("StatefulCluster %s/%s: status.selector %q: %w", c.Namespace, c.Name, st.Selector, err)
	}
	for i := range pods {
		p := &pods[i]
		if !sel.Matches(labels.Set(p.Labels)) {
			continue
		}
		id := Identity{Name: p.Name, Node: p.Spec.NodeName, Ready: opsutil.PodReady(p), Terminating: p.DeletionTimestamp != nil}
		for _, vol := range p.Spec.Volumes {
			if vol.PersistentVolumeClaim != nil {
				id.Claims = append(id.Claims, vol.PersistentVolumeClaim.ClaimName)
			}
		}
		sort.Strings(id.Claims)
		v.Identities = append(v.Identities, id)
	}
	slices.SortFunc(v.Identities, func(a, b Identity) int { return compareByOrdinal(a.Name, b.Name) })
	return v, nil
}

// extendedView reads versions, zones and retries from the status, each version's phase from its
// StatefulSets' annotations, and the pods of each version (the canaries among them) from the pods
// labelled with the ExtendedStatefulSet's name.
func extendedView(e *extendedv1alpha1.ExtendedStatefulSet, pods []corev1.Pod, sets []appsv1.StatefulSet) *Extended {
	st := e.Status
	v := &Extended{
		Replicas: st.Replicas, Ready: st.ReadyReplicas, Updated: st.UpdatedReplicas,
		CurrentVersion: st.CurrentVersion, UpdateVersion: st.UpdateVersion, Versions: []Version{},
		Canaries: Canaries{Retries: st.CanaryRetries, RetryCount: e.Spec.UpdateStrategy.RetryCount},
	}
	if n := e.Spec.UpdateStrategy.Canaries; n != nil {
		v.Canaries.Count = *n
	} else {
		v.Canaries.Count = 1
	}
	byVersion := map[int32]*Version{}
	for s, running := range st.Versions {
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			continue
		}
		byVersion[int32(n)] = &Version{Version: int32(n), Running: running}
	}
	versionOf := func(labels map[string]string) (*Version, bool) {
		if labels[extendedv1alpha1.NameLabel] != e.Name {
			return nil, false
		}
		n, err := strconv.ParseInt(labels[extendedv1alpha1.VersionLabel], 10, 32)
		if err != nil {
			return nil, false
		}
		ver := byVersion[int32(n)]
		if ver == nil {
			ver = &Version{Version: int32(n)}
			byVersion[int32(n)] = ver
		}
		return ver, true
	}
	for i := range sets {
		ver, ok := versionOf(sets[i].Labels)
		if !ok {
			continue
		}
		// With zones a version has one StatefulSet per zone; the zone still in canaries says Canary.
		if phase := sets[i].Annotations[extendedv1alpha1.PhaseAnnotation]; phase != "" && ver.Phase != extendedv1alpha1.PhaseCanary {
			ver.Phase = phase
		}
		ver.Stale = ver.Stale || sets[i].Annotations[extendedv1alpha1.StaleAnnotation] == "true"
	}
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		ver, ok := versionOf(p.Labels)
		if !ok {
			continue
		}
		ver.Pods++
		if opsutil.PodReady(p) {
			ver.Ready++
		}
		if ver.Phase == extendedv1alpha1.PhaseCanary {
			v.Canaries.Pods = append(v.Canaries.Pods, p.Name)
		}
	}
	for _, ver := range byVersion {
		v.Versions = append(v.Versions, *ver)
	}
	slices.SortFunc(v.Versions, func(a, b Version) int { return int(a.Version - b.Version) })
	sortByOrdinal(v.Canaries.Pods)
	for _, z := range st.Zones {
		v.Zones = append(v.Zones, Zone{Name: z.Name, Index: z.Index, Replicas: z.Replicas, Ready: z.ReadyReplicas,
			CurrentVersion: z.CurrentVersion, UpdateVersion: z.UpdateVersion, ReadyNodes: z.ReadyNodes})
	}
	for _, j := range st.UpgradeJobs {
		v.UpgradeJobs = append(v.UpgradeJobs, UpgradeJob{Name: j.Name, Type: j.Type, Version: j.Version, State: j.State})
	}
	return v
}

// compareByOrdinal orders pod names by their trailing number (web-2 before web-10), then by name.
func compareByOrdinal(a, b string) int {
	pa, na := splitOrdinal(a)
	pb, nb := splitOrdinal(b)
	if pa != pb {
		return strings.Compare(pa, pb)
	}
	if na != nb {
		if na < nb {
			return -1
		}
		return 1
	}
	return strings.Compare(a, b)
}

func splitOrdinal(name string) (string, int64) {
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return name, -1
	}
	n, err := strconv.ParseInt(name[i+1:], 10, 64)
	if err != nil {
		return name, -1
	}
	return name[:i], n
}

func sortByOrdinal(names []string) { slices.SortFunc(names, compareByOrdinal) }
