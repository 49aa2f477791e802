// Package podreaper finishes the deletion of pods on the local cluster's kwok nodes, the kubelet's
// last step: once a deleted pod's containers have stopped, the pod object is removed (a delete with
// grace period 0).
//
// kwok's own way to do it, a Stage with `delete: true`, deletes by name only, and kwok 0.8.0 can run
// that delete twice for one pod: a job queued by a watch event of the terminating pod that its Deleted
// event failed to cancel, or a retry after a timed-out delete that had in fact succeeded. When the
// StatefulSet controller has meanwhile made the pod again under the same name, the second delete
// removes the brand-new pod, a restart nobody asked for. A Stage cannot prevent it: its selector is
// matched against the pod the job was queued for, never against the pod the name denotes when the
// delete is sent, and kwok's delete step takes no preconditions.
//
// The reaper deletes with a UID precondition instead, so a late or repeated delete of one pod fails
// (409 Conflict) on any newer pod of the same name. It removes a pod
// statefulops.dev/kwok-terminating-seconds seconds after it was deleted (default 1), never later
// than its deletionTimestamp, and only on the nodes whose kubelet kwok simulates (the same node
// selector kwok is given): a pod of a NotReady node, or of the real node, is left alone.
package podreaper

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// TerminatingSecondsAnnotation on a pod sets how long it stays Terminating; localcluster exports the
// same name to the tests.
const TerminatingSecondsAnnotation = "statefulops.dev/kwok-terminating-seconds"

// podRef names one pod object: a pod made again under the same name is another podRef.
type podRef struct {
	namespace, name string
	uid             types.UID
}

// Reaper removes the deleted pods of the nodes its selector matches.
type Reaper struct {
	client  kubernetes.Interface
	nodes   labels.Selector
	factory informers.SharedInformerFactory
	pods    corelisters.PodLister
	nodeL   corelisters.NodeLister
	queue   workqueue.TypedRateLimitingInterface[podRef]
	now     func() time.Time
}

// New returns a reaper of the pods of the nodes nodeSelector (a label selector) matches.
func New(client kubernetes.Interface, nodeSelector string) (*Reaper, error) {
	sel, err := labels.Parse(nodeSelector)
	if err != nil {
		return nil, fmt.Errorf("node selector %q: %w", nodeSelector, err)
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	r := &Reaper{
		client:  client,
		nodes:   sel,
		factory: factory,
		pods:    factory.Core().V1().Pods().Lister(),
		nodeL:   factory.Core().V1().Nodes().Lister(),
		queue:   workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[podRef]()),
		now:     time.Now,
	}
	if _, err := factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    r.podChanged,
		UpdateFunc: func(_, obj any) { r.podChanged(obj) },
	}); err != nil {
		return nil, err
	}
	if _, err := factory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    r.nodeChanged,
		UpdateFunc: func(_, obj any) { r.nodeChanged(obj) },
	}); err != nil {
		return nil, err
	}
	return r, nil
}

// Run reaps with the given number of workers until ctx ends.
func (r *Reaper) Run(ctx context.Context, workers int) error {
	defer r.queue.ShutDown()
	r.factory.Start(ctx.Done())
	defer r.factory.Shutdown()
	for typ, ok := range r.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("cache of %v not synced", typ)
		}
	}
	klog.FromContext(ctx).Info("reaping deleted pods", "nodes", r.nodes.String())
	for range workers {
		go func() {
			for r.processNext(ctx) {
			}
		}()
	}
	<-ctx.Done()
	return nil
}

func (r *Reaper) podChanged(obj any) {
	if pod, ok := obj.(*corev1.Pod); ok && pod.DeletionTimestamp != nil && pod.Spec.NodeName != "" {
		r.queue.Add(podRef{pod.Namespace, pod.Name, pod.UID})
	}
}

// nodeChanged queues the deleted pods of a node it reaps: a node back from NotReady has pods left
// Terminating while it was away. Heartbeats come here too; queueing a pod twice is harmless.
func (r *Reaper) nodeChanged(obj any) {
	node, ok := obj.(*corev1.Node)
	if !ok || !r.nodes.Matches(labels.Set(node.Labels)) {
		return
	}
	pods, err := r.pods.List(labels.Everything())
	if err != nil {
		return // a lister never fails
	}
	for _, pod := range pods {
		if pod.Spec.NodeName == node.Name {
			r.podChanged(pod)
		}
	}
}

func (r *Reaper) processNext(ctx context.Context) bool {
	ref, quit := r.queue.Get()
	if quit {
		return false
	}
	defer r.queue.Done(ref)
	wait, err := r.reap(ctx, ref)
	switch {
	case err != nil:
		klog.FromContext(ctx).Error(err, "reap", "pod", ref.namespace+"/"+ref.name, "uid", ref.uid)
		r.queue.AddRateLimited(ref)
	case wait > 0:
		r.queue.Forget(ref)
		r.queue.AddAfter(ref, wait)
	default:
		r.queue.Forget(ref)
	}
	return true
}

// reap removes the pod ref names once it is due, and returns how long to wait when it is not yet.
// The cache only decides whether and when to try; what is deleted is decided by the UID precondition,
// so a stale cache, a retry or a second queued run can never remove a newer pod of the same name.
func (r *Reaper) reap(ctx context.Context, ref podRef) (time.Duration, error) {
	pod, err := r.pods.Pods(ref.namespace).Get(ref.name)
	if apierrors.IsNotFound(err) || (err == nil && pod.UID != ref.uid) {
		return 0, nil // removed, or replaced: the replacement has a ref of its own
	}
	if err != nil {
		return 0, err
	}
	if pod.DeletionTimestamp == nil || !r.onReapedNode(pod) {
		return 0, nil // a pod of a node away or not simulated: queued again when its node is back
	}
	if wait := RemoveAt(pod).Sub(r.now()); wait > 0 {
		return wait, nil
	}
	return 0, r.Delete(ctx, pod.Namespace, pod.Name, pod.UID)
}

// Delete removes the pod named namespace/name if, and only if, it is still the object with uid: grace
// period 0, as the kubelet's final delete, with a UID precondition. A pod already gone, or replaced by
// a newer one of the same name, is not an error.
func (r *Reaper) Delete(ctx context.Context, namespace, name string, uid types.UID) error {
	err := r.client.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{
		GracePeriodSeconds: new(int64),
		Preconditions:      &metav1.Preconditions{UID: &uid},
	})
	switch {
	case err == nil:
		klog.FromContext(ctx).V(1).Info("removed pod", "pod", namespace+"/"+name, "uid", uid)
		return nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err): // the precondition failed: not our pod
		return nil
	default:
		return err
	}
}

func (r *Reaper) onReapedNode(pod *corev1.Pod) bool {
	node, err := r.nodeL.Get(pod.Spec.NodeName)
	return err == nil && r.nodes.Matches(labels.Set(node.Labels))
}

// RemoveAt is when a deleted pod is removed: terminating seconds after it was deleted
// (deletionTimestamp less its grace period), and never later than its deletionTimestamp. A missing or
// malformed annotation counts as 1 second.
func RemoveAt(pod *corev1.Pod) time.Time {
	deadline := pod.DeletionTimestamp.Time
	var grace int64
	if pod.DeletionGracePeriodSeconds != nil {
		grace = *pod.DeletionGracePeriodSeconds
	}
	wanted := 1.0
	if v, err := strconv.ParseFloat(pod.Annotations[TerminatingSecondsAnnotation], 64); err == nil && v >= 0 && !math.IsInf(v, 0) {
		wanted = v
	}
	return deadline.Add(time.Duration((min(wanted, float64(grace)) - float64(grace)) * float64(time.Second)))
}
