//go:build e2e

package extended

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/statefulops/statefulops/e2e/framework"
	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
)

// Helpers of extended_test.go: extended-operator as a local process under its manifest's
// ServiceAccount, ExtendedStatefulSets through the typed framework.Client, and the invariant
// checkers (spurious restarts, a claim used by two live pods).

// startExtendedOperator runs extended-operator as a local process for the test (see
// framework.StartLocalOperator).
func startExtendedOperator(t *testing.T) *framework.LocalOperator {
	return framework.StartLocalOperator(t, "extended-operator")
}

func createESTS(t *testing.T, ns string, e *extendedv1alpha1.ExtendedStatefulSet) {
	t.Helper()
	e = e.DeepCopy() // Create fills in the server's metadata: leave the caller's object as it was
	e.Namespace = ns
	require.NoError(t, framework.Client.Create(t.Context(), e))
}

// fetchESTS returns the ExtendedStatefulSet (for conditions of Eventually).
func fetchESTS(ctx context.Context, ns, name string) (*extendedv1alpha1.ExtendedStatefulSet, error) {
	e := &extendedv1alpha1.ExtendedStatefulSet{}
	return e, framework.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, e)
}

// updateESTS changes the ExtendedStatefulSet's spec, retrying on conflicts.
func updateESTS(t *testing.T, ns, name string, mutate func(*extendedv1alpha1.ExtendedStatefulSet)) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		e, err := fetchESTS(t.Context(), ns, name)
		if err != nil {
			return err
		}
		mutate(e)
		return framework.Client.Update(t.Context(), e)
	}))
}

// waitESTS waits until cond holds for the ExtendedStatefulSet.
func waitESTS(t *testing.T, ns, name string, cond func(c *assert.CollectT, e *extendedv1alpha1.ExtendedStatefulSet), msg string) {
	t.Helper()
	waitESTSWithin(t, ns, name, framework.Timeout, cond, msg)
}

// waitESTSWithin is waitESTS with its own bound.
func waitESTSWithin(t *testing.T, ns, name string, within time.Duration, cond func(c *assert.CollectT, e *extendedv1alpha1.ExtendedStatefulSet), msg string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		e, err := fetchESTS(t.Context(), ns, name)
		if !assert.NoError(c, err) {
			return
		}
		cond(c, e)
	}, within, framework.Tick, msg)
}

// waitESTSReady waits for condition Ready=True with the given version serving alone.
func waitESTSReady(t *testing.T, ns, name string, version int) {
	t.Helper()
	waitESTSReadyWithin(t, ns, name, version, framework.Timeout)
}

// waitESTSReadyWithin is waitESTSReady with its own bound.
func waitESTSReadyWithin(t *testing.T, ns, name string, version int, within time.Duration) {
	t.Helper()
	waitESTSWithin(t, ns, name, within, func(c *assert.CollectT, e *extendedv1alpha1.ExtendedStatefulSet) {
		assert.Equal(c, map[string]bool{strconv.Itoa(version): true}, e.Status.Versions)
		assert.Equal(c, metav1.ConditionTrue, estsCondition(e, extendedv1alpha1.ConditionReady), "Ready")
	}, fmt.Sprintf("%s Ready at version %d", name, version))
}

func estsCondition(e *extendedv1alpha1.ExtendedStatefulSet, condType string) metav1.ConditionStatus {
	for _, c := range e.Status.Conditions {
		if c.Type == condType {
			return c.Status
		}
	}
	return ""
}

// restartChecker is the spurious-restart invariant checker of one namespace. It watches the StatefulSets
// and counts, per StatefulSet, the changes of the pod template's config hash (each one rolls every pod)
// and the pods that ran (reached phase Running) for it. A roll is spurious when the test made no data
// change for it; a pod that ran is spurious when it is not one of the StatefulSet's first pods, a roll's
// replacements or a restart the test plans.
//
// Only the pods the test itself force-deleted while they ran are left out (excuse), and counted on their
// own: their replacements take their place. Nothing else is: the checker used to leave out, as the
// simulator's, every pod gone without being seen terminating and every pod deleted within 500 ms of its
// creation, because kwok's pod-delete Stage deleted by name with grace period 0 and, run twice, removed
// the StatefulSet controller's brand-new pod of the same name. The local cluster's pod reaper deletes
// with a UID precondition now (localcluster/podreaper, TestReaper), so such a pod is a real restart,
// e.g. an operator deleting with grace 0 or deleting a pod it has just made, and is counted.
type restartChecker struct {
	mu        sync.Mutex
	hashes    map[string]string
	rolls     map[string]int
	rollTimes map[string][]time.Time
	podUIDs   map[string]map[string]bool // StatefulSet → pod UIDs seen
	ran       map[string]map[string]bool // StatefulSet → UIDs of pods seen Running
	forced    map[string]map[string]bool // StatefulSet → UIDs of pods the test force-deleted (excuse)
	podLog    map[string][]string        // StatefulSet → "name uid revision" of each pod, in order seen
	podName   map[string]string          // UID → pod name
	stop      func()
}

// simulatorDeleteWindow is the age under which the extended scale bench (bench_extended_scale_test.go)
// still attributes a deleted pod to kwok's duplicate pod-delete. The restart checker no longer does
// (see restartChecker): the pod reaper made that duplicate impossible, and the bench's recogniser
// can go too.
const simulatorDeleteWindow = 500 * time.Millisecond

func watchRestarts(t *testing.T, ns string) *restartChecker {
	t.Helper()
	rc := &restartChecker{hashes: map[string]string{}, rolls: map[string]int{}, rollTimes: map[string][]time.Time{}, podUIDs: map[string]map[string]bool{}, ran: map[string]map[string]bool{},
		forced: map[string]map[string]bool{}, podLog: map[string][]string{},
		podName: map[string]string{}}
	stsW, err := framework.Clientset.AppsV1().StatefulSets(ns).Watch(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	podW, err := framework.Clientset.CoreV1().Pods(ns).Watch(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	rc.stop = func() { stsW.Stop(); podW.Stop() }
	t.Cleanup(rc.stop)
	go func() {
		for ev := range stsW.ResultChan() {
			sts, ok := ev.Object.(*appsv1.StatefulSet)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			h := sts.Spec.Template.Annotations[extendedv1alpha1.ConfigHashAnnotation]
			rc.mu.Lock()
			if old, seen := rc.hashes[sts.Name]; seen && old != h {
				rc.rolls[sts.Name]++
				rc.rollTimes[sts.Name] = append(rc.rollTimes[sts.Name], time.Now())
			}
			rc.hashes[sts.Name] = h
			rc.mu.Unlock()
		}
	}()
	go func() {
		for ev := range podW.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			ref := metav1.GetControllerOf(pod)
			if ref == nil || ref.Kind != "StatefulSet" {
				continue
			}
			rc.mu.Lock()
			if rc.podUIDs[ref.Name] == nil {
				rc.podUIDs[ref.Name] = map[string]bool{}
			}
			if !rc.podUIDs[ref.Name][string(pod.UID)] {
				rc.podLog[ref.Name] = append(rc.podLog[ref.Name], fmt.Sprintf("%s %s %s %s", time.Now().Format("15:04:05.000"),
					pod.Name, pod.UID, pod.Labels[appsv1.ControllerRevisionHashLabelKey]))
			}
			rc.podUIDs[ref.Name][string(pod.UID)] = true
			uid := string(pod.UID)
			rc.podName[uid] = pod.Name
			if pod.Status.Phase == corev1.PodRunning {
				if rc.ran[ref.Name] == nil {
					rc.ran[ref.Name] = map[string]bool{}
				}
				rc.ran[ref.Name][string(pod.UID)] = true
			}
			rc.mu.Unlock()
		}
	}()
	return rc
}

// excuse leaves out of the count the pods with these UIDs that the test force-deleted while they ran:
// their replacements run in their place.
func (rc *restartChecker) excuse(uids map[string]bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for sts, seen := range rc.podUIDs {
		for uid := range seen {
			if uids[uid] {
				if rc.forced[sts] == nil {
					rc.forced[sts] = map[string]bool{}
				}
				rc.forced[sts][uid] = true
			}
		}
	}
}

// pods returns the pods seen for the StatefulSet, one line each, to explain a count.
func (rc *restartChecker) pods(sts string) []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.podLog[sts])
}

// rollCount is the number of config-hash changes seen on the StatefulSet.
func (rc *restartChecker) rollCount(sts string) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.rolls[sts]
}

// lastRoll is when the watch saw the StatefulSet's n-th roll (1-based), zero if not yet.
func (rc *restartChecker) rollTime(sts string, n int) time.Time {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.rollTimes[sts]) < n {
		return time.Time{}
	}
	return rc.rollTimes[sts][n-1]
}

// reran counts the re-creations of the named pods of the StatefulSet: per name, the pods that ran
// (force-deleted ones left out) beyond the first. A test that deletes or scales away these pods itself
// passes the figure to spurious as planned, so only a restart of another pod still counts.
func (rc *restartChecker) reran(sts string, names ...string) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	perName := map[string]int{}
	for uid := range rc.ran[sts] {
		if !rc.forced[sts][uid] {
			perName[rc.podName[uid]]++
		}
	}
	n := 0
	for _, name := range names {
		n += max(perName[name]-1, 0)
	}
	return n
}

// spurious returns the spurious restarts of the StatefulSet (replicas pods) given the data changes the
// test made: rolls beyond them, plus pods that ran beyond replicas × (1 + rolls) + planned (restarts the
// test causes on purpose), force-deleted pods left out; and the pods the simulator force-deleted.
func (rc *restartChecker) spurious(sts string, replicas, dataChanges, planned int) (spurious, forced int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rolls := rc.rolls[sts]
	extraRolls := max(rolls-dataChanges, 0)
	ran := 0
	for uid := range rc.ran[sts] {
		if !rc.forced[sts][uid] {
			ran++
		}
	}
	extraPods := max(ran-replicas*(1+rolls)-planned, 0)
	return extraRolls + extraPods, len(rc.forced[sts])
}

// claimChecker is the invariant checker of volume handovers: it watches the namespace's pods and claims
// and counts the watch events after which one volume is used by two live pods (not Succeeded or Failed,
// deleted or not: a terminating pod's containers still run). A claim counts as its bound
// PersistentVolume, so two claims of one ordinal in two versions that share a volume (the handover) are
// one; an unbound claim counts as itself.
type claimChecker struct {
	mu      sync.Mutex
	claims  map[string][]string // pod → claims
	volume  map[string]string   // claim → bound volume
	doubles int
	events  int
}

func watchClaims(t *testing.T, ns string) *claimChecker {
	t.Helper()
	w, err := framework.Clientset.CoreV1().Pods(ns).Watch(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	pvcW, err := framework.Clientset.CoreV1().PersistentVolumeClaims(ns).Watch(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	cc := &claimChecker{claims: map[string][]string{}, volume: map[string]string{}}
	t.Cleanup(w.Stop)
	t.Cleanup(pvcW.Stop)
	go func() {
		for ev := range pvcW.ResultChan() {
			if pvc, ok := ev.Object.(*corev1.PersistentVolumeClaim); ok && pvc.Spec.VolumeName != "" {
				cc.mu.Lock()
				cc.volume[pvc.Name] = pvc.Spec.VolumeName
				cc.mu.Unlock()
			}
		}
	}()
	go func() {
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			cc.mu.Lock()
			live := ev.Type != watch.Deleted && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
			var claims []string
			if live {
				for _, v := range pod.Spec.Volumes {
					if v.PersistentVolumeClaim != nil {
						claims = append(claims, v.PersistentVolumeClaim.ClaimName)
					}
				}
			}
			cc.claims[pod.Name] = claims
			users := map[string]int{}
			for _, cs := range cc.claims {
				for _, c := range cs {
					key := "claim " + c
					if v := cc.volume[c]; v != "" {
						key = "volume " + v
					}
					users[key]++
				}
			}
			cc.events++
			for _, n := range users {
				if n > 1 {
					cc.doubles++
					break
				}
			}
			cc.mu.Unlock()
		}
	}()
	return cc
}

func (cc *claimChecker) counts() (doubles, events int) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.doubles, cc.events
}

// percentile returns the p-th percentile of ds (nearest rank).
func extendedPercentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(i-1, 0)]
}

// createConfAndCreds creates the ConfigMap "conf" (level) and the Secret "creds" (password) that the
// tests' ExtendedStatefulSets reference (referenceConfAndCreds).
func createConfAndCreds(t *testing.T, ns, level, password string) {
	t.Helper()
	_, err := framework.Clientset.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "conf"}, Data: map[string]string{"level": level}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = framework.Clientset.CoreV1().Secrets(ns).Create(t.Context(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "creds"}, Data: map[string][]byte{"password": []byte(password)}}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// referenceConfAndCreds makes pod's first container read "conf" as its environment and mount "creds".
func referenceConfAndCreds(pod *corev1.PodSpec) {
	pod.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "conf"}}}}
	pod.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "creds", MountPath: "/creds"}}
	pod.Volumes = []corev1.Volume{{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds"}}}}
}
