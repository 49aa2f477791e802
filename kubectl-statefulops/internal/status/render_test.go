package status

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1alpha1 "github.com/statefulops/statefulops/shared/api/cluster/v1alpha1"
	extendedv1alpha1 "github.com/statefulops/statefulops/shared/api/extended/v1alpha1"
	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// now is the fixtures' clock: every age in the goldens is counted from it.
var now = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func ago(d time.Duration) *metav1.Time { t := metav1.NewTime(now.Add(-d)); return &t }

func cond(t, status, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: t, Status: metav1.ConditionStatus(status), Reason: reason, Message: msg, LastTransitionTime: *ago(time.Minute)}
}

func objMeta(ns, name string, gen int64) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name, Generation: gen, CreationTimestamp: *ago(26 * time.Hour)}
}

type podOpt func(*corev1.Pod)

func pod(ns, name string, ready bool, opts ...podOpt) corev1.Pod {
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{}, Annotations: map[string]string{}},
		Spec:       corev1.PodSpec{NodeName: "node-1"},
	}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
	for _, o := range opts {
		o(&p)
	}
	return p
}

func labelled(kv ...string) podOpt {
	return func(p *corev1.Pod) {
		for i := 0; i+1 < len(kv); i += 2 {
			p.Labels[kv[i]] = kv[i+1]
		}
	}
}

func annotated(kv ...string) podOpt {
	return func(p *corev1.Pod) {
		for i := 0; i+1 < len(kv); i += 2 {
			p.Annotations[kv[i]] = kv[i+1]
		}
	}
}

func terminating(p *corev1.Pod) { p.DeletionTimestamp = ago(40 * time.Second) }

func onNode(n string) podOpt { return func(p *corev1.Pod) { p.Spec.NodeName = n } }

func ownedBy(sts string) podOpt {
	return func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: sts, Controller: ptr.To(true)}}
	}
}

func claims(names ...string) podOpt {
	return func(p *corev1.Pod) {
		for _, n := range names {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: n, VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: n}}})
		}
	}
}

// esSet is the StatefulSet of one version of an ExtendedStatefulSet, in the given phase.
func esSet(name, owner string, version int, phase string) appsv1.StatefulSet {
	return appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name,
		Labels:      map[string]string{extendedv1alpha1.NameLabel: owner, extendedv1alpha1.VersionLabel: fmt.Sprint(version)},
		Annotations: map[string]string{extendedv1alpha1.PhaseAnnotation: phase}}}
}

// fixture is one object and what its namespace holds, as the cluster would return them.
type fixture struct {
	name string
	kind string
	obj  client.Object
	ns   namespaceState
}

func fixtures() []fixture {
	dbSel := metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}
	wrapper := []string{singletonv1.AnnotationHoldMode, "Wrapper"}
	released := append(wrapper, singletonv1.AnnotationStartGranted, "3", singletonv1.AnnotationEpoch, "3")
	stsPartition := func(name string, replicas, partition int32) appsv1.StatefulSet {
		return appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop"}, Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To(replicas), UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To(partition)}}}}
	}
	return []fixture{
		{name: "singleton-healthy", kind: "StatefulSingleton", obj: &singletonv1.StatefulSingleton{
			ObjectMeta: objMeta("shop", "db", 1),
			Spec:       singletonv1.StatefulSingletonSpec{Selector: dbSel, HoldMode: singletonv1.HoldModeWrapper},
			Status: singletonv1.StatefulSingletonStatus{ObservedGeneration: 1, Phase: singletonv1.PhaseRunning, ActivePod: "db-7f9c6-abcde",
				ActivePodUID: "uid-db-7f9c6-abcde", ActivePodNode: "node-1", Epoch: 3, TransitionTimestamp: ago(2 * time.Hour),
				LastTransitionDuration: &metav1.Duration{Duration: 850 * time.Millisecond},
				Conditions:             []metav1.Condition{cond("Ready", "True", "Active", "pod db-7f9c6-abcde is active")}},
		}, ns: namespaceState{Pods: []corev1.Pod{
			pod("shop", "db-7f9c6-abcde", true, labelled("app", "db"), annotated(released...)),
			pod("shop", "web-0", true, labelled("app", "web")),
		}}},
		{name: "singleton-unhealthy", kind: "StatefulSingleton", obj: &singletonv1.StatefulSingleton{
			ObjectMeta: objMeta("shop", "db", 2),
			Spec:       singletonv1.StatefulSingletonSpec{Selector: dbSel, HoldMode: singletonv1.HoldModeWrapper},
			Status: singletonv1.StatefulSingletonStatus{ObservedGeneration: 2, Phase: singletonv1.PhaseTransitioning, ActivePod: "db-7f9c6-abcde",
				ActivePodUID: "uid-db-7f9c6-abcde", ActivePodNode: "node-1", Epoch: 3, TransitionTimestamp: ago(40 * time.Second),
				LastTransitionDuration: &metav1.Duration{Duration: 850 * time.Millisecond},
				Handover: &singletonv1.HandoverStatus{WaitingFor: "db-7f9c6-abcde", WaitingForUID: "uid-db-7f9c6-abcde",
					GracePeriodSeconds: 120, TerminatingSince: *ago(40 * time.Second)},
				Conditions: []metav1.Condition{
					cond("Ready", "False", "WaitingForOldPod", "pod db-8a1b2-fghij is held until db-7f9c6-abcde is gone"),
					cond("Reconciling", "True", "WaitingForOldPod", "pod db-8a1b2-fghij is held until db-7f9c6-abcde is gone"),
				}},
		}, ns: namespaceState{Pods: []corev1.Pod{
			pod("shop", "db-7f9c6-abcde", false, labelled("app", "db"), annotated(released...), terminating),
			pod("shop", "db-8a1b2-fghij", false, labelled("app", "db"), annotated(wrapper...), onNode("node-2")),
		}}},
		{name: "lock-healthy", kind: "StatefulSetLock", obj: &leasev1.StatefulSetLock{
			ObjectMeta: objMeta("shop", "pg-lock", 1),
			Spec:       leasev1.StatefulSetLockSpec{StatefulSetName: "pg", LeaseName: "pg-lease", LeaseDurationSeconds: 30},
			Status: leasev1.StatefulSetLockStatus{ObservedGeneration: 1, WriterPod: "pg-0", WriterPodUID: "uid-pg-0", LeaseTransitions: 1,
				LastFailoverTime: ago(10 * time.Minute), LastFailoverReason: "InitialElection",
				Conditions: []metav1.Condition{cond("Ready", "True", "Available", "pg-0 is the writer")}},
		}, ns: namespaceState{Pods: []corev1.Pod{
			pod("shop", "pg-0", true, ownedBy("pg"), labelled(leasev1.RoleLabel, leasev1.RoleWriter)),
			pod("shop", "pg-1", true, ownedBy("pg"), labelled(leasev1.RoleLabel, leasev1.RoleReader)),
			pod("shop", "pg-10", true, ownedBy("pg"), labelled(leasev1.RoleLabel, leasev1.RoleReader)),
			pod("shop", "pg-2", true, ownedBy("pg"), labelled(leasev1.RoleLabel, leasev1.RoleReader)),
			pod("shop", "other-0", true, ownedBy("other"), labelled(leasev1.RoleLabel, leasev1.RoleReader)),
		}}},
		{name: "lock-unhealthy", kind: "StatefulSetLock", obj: &leasev1.StatefulSetLock{
			ObjectMeta: objMeta("shop", "pg-lock", 1),
			Spec:       leasev1.StatefulSetLockSpec{StatefulSetName: "pg", LeaseName: "pg-lease", LeaseDurationSeconds: 30},
			Status: leasev1.StatefulSetLockStatus{ObservedGeneration: 1, LeaseTransitions: 4,
				LastFailoverTime: ago(3 * time.Minute), LastFailoverReason: "WriterNotReady",
				Conditions: []metav1.Condition{
					cond("Ready", "False", "NoReadyPods", "no pod of StatefulSet pg is Ready"),
					cond("Reconciling", "True", "NoReadyPods", "no pod of StatefulSet pg is Ready"),
				}},
		}, ns: namespaceState{Pods: []corev1.Pod{
			pod("shop", "pg-0", false, ownedBy("pg"), labelled(leasev1.RoleLabel, leasev1.RoleReader)),
			pod("shop", "pg-1", false, ownedBy("pg")),
		}}},
		{name: "rollout-healthy", kind: "PhasedRollout", obj: &rolloutv1alpha1.PhasedRollout{
			ObjectMeta: objMeta("shop", "web", 1),
			Spec:       rolloutv1alpha1.PhasedRolloutSpec{TargetRef: "web"},
			Status: rolloutv1alpha1.PhasedRolloutStatus{ObservedGeneration: 1, Phase: "Updated", Message: "the StatefulSet runs its update revision",
				CurrentRevision: "web-6c8b9d", UpdateRevision: "web-6c8b9d", Replicas: ptr.To(int32(3)),
				Conditions: []metav1.Condition{cond("Ready", "True", "Updated", "every pod runs web-6c8b9d")}},
		}, ns: namespaceState{StatefulSets: []appsv1.StatefulSet{stsPartition("web", 3, 3), stsPartition("other", 5, 0)}}},
		{name: "rollout-unhealthy", kind: "PhasedRollout", obj: &rolloutv1alpha1.PhasedRollout{
			ObjectMeta: objMeta("shop", "web", 2),
			Spec: rolloutv1alpha1.PhasedRolloutSpec{TargetRef: "web",
				Check:  rolloutv1alpha1.Check{SuccessThreshold: 3},
				Checks: []rolloutv1alpha1.NamedCheck{{Name: "latency", Check: rolloutv1alpha1.Check{SuccessThreshold: 2}}}},
			Status: rolloutv1alpha1.PhasedRolloutStatus{ObservedGeneration: 2, Phase: "Rolling",
				CurrentRevision: "web-6c8b9d", UpdateRevision: "web-7d9e0f", Replicas: ptr.To(int32(5)),
				LastError: "Prometheus http://prometheus:9090 unreachable: connection refused",
				RollingPodStatus: &rolloutv1alpha1.RollingPodStatus{Status: "WaitForChecks", Partition: ptr.To(int32(2)), Pod: "web-2",
					Checks: []rolloutv1alpha1.CheckStatus{
						{Name: "check", LastResult: "Fail", LastValue: `{job="web"} 1`, LastCheckTime: ago(20 * time.Second), TotalChecks: 4, TotalFailedChecks: 2},
						{Name: "latency", LastResult: "Pass", LastCheckTime: ago(25 * time.Second), TotalChecks: 1, ConsecutiveSuccessfulChecks: 1},
					}},
				Batch: &rolloutv1alpha1.BatchStatus{Step: 1, Pods: 2, Released: 2, FromPartition: 4, ToPartition: 2},
				Conditions: []metav1.Condition{
					cond("Ready", "False", "Rolling", "rolling web-2 to web-7d9e0f"),
					cond("Reconciling", "True", "Rolling", "waiting for the checks of web-2"),
				}},
		}},
		{name: "cluster-healthy", kind: "StatefulCluster", obj: &clusterv1alpha1.StatefulCluster{
			ObjectMeta: objMeta("shop", "coder", 1),
			Spec:       clusterv1alpha1.StatefulClusterSpec{Replicas: ptr.To(int32(3))},
			Status: clusterv1alpha1.StatefulClusterStatus{ObservedGeneration: 1, Replicas: 3, ReadyReplicas: 3, AvailableReplicas: 3,
				CurrentRevision: "coder-5d6f7", UpdateRevision: "coder-5d6f7", NextIdentity: 11, Selector: "app=coder",
				Identities: []clusterv1alpha1.IdentityRecord{{Name: "coder-2", Node: "node-3", RetiredAt: ago(5 * time.Hour),
					Reason: "NodeLost", Message: "node node-3 not Ready for 312s", Claims: []string{"data-coder-2"}}},
				RetiredClaims: []clusterv1alpha1.RetiredClaim{{Name: "data-coder-2", Identity: "coder-2", RetiredAt: ago(5 * time.Hour)}},
				Conditions:    []metav1.Condition{cond("Ready", "True", "Reconciled", "3 of 3 pods Ready")}},
		}, ns: namespaceState{Pods: []corev1.Pod{
			pod("shop", "coder-10", true, labelled("app", "coder"), claims("data-coder-10")),
			pod("shop", "coder-3", true, labelled("app", "coder"), claims("data-coder-3")),
			pod("shop", "coder-4", true, labelled("app", "coder"), claims("data-coder-4"), onNode("node-2")),
			pod("shop", "db-7f9c6-abcde", true, labelled("app", "db")),
		}}},
		{name: "cluster-unhealthy", kind: "StatefulCluster", obj: &clusterv1alpha1.StatefulCluster{
			ObjectMeta: objMeta("shop", "coder", 1),
			Spec:       clusterv1alpha1.StatefulClusterSpec{Replicas: ptr.To(int32(3))},
			Status: clusterv1alpha1.StatefulClusterStatus{ObservedGeneration: 1, Replicas: 3, ReadyReplicas: 2,
				CurrentRevision: "coder-5d6f7", UpdateRevision: "coder-8e9a0", NextIdentity: 5, Selector: "app=coder",
				Conditions: []metav1.Condition{
					cond("Ready", "False", "ClaimPending", "claim data-coder-4 of coder-4 is Pending"),
					cond("Stalled", "True", "ClaimPending", "claim data-coder-4 of coder-4 is Pending: no StorageClass provisions it"),
				}},
		}, ns: namespaceState{Pods: []corev1.Pod{
			pod("shop", "coder-3", true, labelled("app", "coder"), claims("data-coder-3")),
			pod("shop", "coder-4", false, labelled("app", "coder"), claims("data-coder-4"), onNode("")),
			pod("shop", "coder-2", true, labelled("app", "coder"), claims("data-coder-2"), terminating),
		}}},
		{name: "extended-healthy", kind: "ExtendedStatefulSet", obj: &extendedv1alpha1.ExtendedStatefulSet{
			ObjectMeta: objMeta("shop", "app", 2),
			Spec:       extendedv1alpha1.ExtendedStatefulSetSpec{UpdateStrategy: extendedv1alpha1.UpdateStrategy{Canaries: ptr.To(int32(1)), RetryCount: 2}},
			Status: extendedv1alpha1.ExtendedStatefulSetStatus{ObservedGeneration: 2, Versions: map[string]bool{"2": true},
				CurrentVersion: 2, UpdateVersion: 2, Replicas: 2, ReadyReplicas: 2, UpdatedReplicas: 2, ZoneCount: 2,
				Zones: []extendedv1alpha1.ZoneStatus{
					{Name: "zone-a", Index: 1, Replicas: 1, ReadyReplicas: 1, CurrentVersion: 2, UpdateVersion: 2, ReadyNodes: 2},
					{Name: "zone-b", Index: 2, Replicas: 1, ReadyReplicas: 1, CurrentVersion: 2, UpdateVersion: 2, ReadyNodes: 1},
				},
				Conditions: []metav1.Condition{cond("Ready", "True", "Reconciled", "version 2 runs with 2 of 2 pods Ready")}},
		}, ns: namespaceState{StatefulSets: []appsv1.StatefulSet{esSet("app-z0-v2", "app", 2, "Done"), esSet("app-z1-v2", "app", 2, "Done")}, Pods: []corev1.Pod{
			pod("shop", "app-z0-v2-0", true, labelled(extendedv1alpha1.NameLabel, "app", extendedv1alpha1.VersionLabel, "2")),
			pod("shop", "app-z1-v2-0", true, labelled(extendedv1alpha1.NameLabel, "app", extendedv1alpha1.VersionLabel, "2")),
		}}},
		{name: "extended-unhealthy", kind: "ExtendedStatefulSet", obj: &extendedv1alpha1.ExtendedStatefulSet{
			ObjectMeta: objMeta("shop", "app", 3),
			Spec:       extendedv1alpha1.ExtendedStatefulSetSpec{UpdateStrategy: extendedv1alpha1.UpdateStrategy{Canaries: ptr.To(int32(1)), RetryCount: 2}},
			Status: extendedv1alpha1.ExtendedStatefulSetStatus{ObservedGeneration: 3, Versions: map[string]bool{"2": true, "3": false},
				CurrentVersion: 2, UpdateVersion: 3, Replicas: 3, ReadyReplicas: 2, UpdatedReplicas: 1, CanaryRetries: 1,
				UpgradeJobs: []extendedv1alpha1.UpgradeJobStatus{{Name: "app-pre-v3", Type: "Pre", Version: 3, State: "Complete"}},
				Conditions: []metav1.Condition{
					cond("Ready", "False", "CanaryRollout", "canary app-v3-0 of version 3 is not Ready"),
					cond("Reconciling", "True", "CanaryRollout", "canary app-v3-0 of version 3 is not Ready (retry 1 of 2)"),
				}},
		}, ns: namespaceState{StatefulSets: []appsv1.StatefulSet{esSet("app-v2", "app", 2, "Done"), esSet("app-v3", "app", 3, "Canary"), esSet("other-v3", "other", 3, "Rollout")}, Pods: []corev1.Pod{
			pod("shop", "app-v2-0", true, labelled(extendedv1alpha1.NameLabel, "app", extendedv1alpha1.VersionLabel, "2")),
			pod("shop", "app-v2-1", true, labelled(extendedv1alpha1.NameLabel, "app", extendedv1alpha1.VersionLabel, "2")),
			pod("shop", "app-v3-0", false, labelled(extendedv1alpha1.NameLabel, "app", extendedv1alpha1.VersionLabel, "3")),
			pod("shop", "other-v3-0", false, labelled(extendedv1alpha1.NameLabel, "other", extendedv1alpha1.VersionLabel, "3")),
		}}},
	}
}

func summaryOf(t *testing.T, fx ...fixture) Summary {
	t.Helper()
	sum := Summary{Objects: []Object{}}
	for _, f := range fx {
		k, err := lookupKind(f.kind)
		if err != nil {
			t.Fatal(err)
		}
		o, err := summarize(k, f.obj, &f.ns)
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		sum.Objects = append(sum.Objects, o)
	}
	return sum
}

// golden compares got with testdata/<name>.golden, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/status -update to write it)", err)
	}
	if !bytes.Equal(want, got) {
		t.Errorf("%s differs from the output (go test -update rewrites it):\n--- want\n%s\n--- got\n%s", path, want, got)
	}
}

// Each kind, healthy and unhealthy, in the plain text a pipe gets and in the JSON summary.
func TestRenderGolden(t *testing.T) {
	for _, f := range fixtures() {
		t.Run(f.name, func(t *testing.T) {
			sum := summaryOf(t, f)
			var text bytes.Buffer
			if err := RenderText(&text, sum, Style{}, now, "none"); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(text.String(), "\x1b") {
				t.Errorf("plain text holds an escape sequence:\n%q", text.String())
			}
			golden(t, f.name+".txt", text.Bytes())
			var js bytes.Buffer
			if err := RenderJSON(&js, sum); err != nil {
				t.Fatal(err)
			}
			golden(t, f.name+".json", js.Bytes())
		})
	}
}

// The health each fixture gets is kstatus's verdict on its conditions, not the view's own guess.
func TestHealthIsKstatusVerdict(t *testing.T) {
	want := map[string]string{
		"singleton-healthy": "Current", "singleton-unhealthy": "InProgress",
		"lock-healthy": "Current", "lock-unhealthy": "InProgress",
		"rollout-healthy": "Current", "rollout-unhealthy": "InProgress",
		"cluster-healthy": "Current", "cluster-unhealthy": "Failed",
		"extended-healthy": "Current", "extended-unhealthy": "InProgress",
	}
	for _, f := range fixtures() {
		o := summaryOf(t, f).Objects[0]
		if o.Health.Status != want[f.name] {
			t.Errorf("%s: health %s, want %s (%s)", f.name, o.Health.Status, want[f.name], o.Health.Message)
		}
	}
}

// The terminal view: a tree with colour, and with NO_COLOR the same tree without escape sequences.
func TestRenderTree(t *testing.T) {
	fx := fixtures()
	sum := summaryOf(t, fx...)
	sortObjects(sum.Objects)
	var color bytes.Buffer
	if err := RenderText(&color, sum, Style{Tree: true, Color: true}, now, "none"); err != nil {
		t.Fatal(err)
	}
	golden(t, "all.tree-color", color.Bytes())
	var plainTree bytes.Buffer
	if err := RenderText(&plainTree, sum, Style{Tree: true}, now, "none"); err != nil {
		t.Fatal(err)
	}
	golden(t, "all.tree", plainTree.Bytes())
	if strings.Contains(plainTree.String(), "\x1b") {
		t.Error("the tree without colour holds an escape sequence")
	}
	if !strings.Contains(plainTree.String(), "└─ ") || !strings.Contains(plainTree.String(), "├─ ") {
		t.Error("the terminal view is not drawn as a tree")
	}
}

// The JSON summary has the documented stable field names, and YAML carries the same.
func TestStructuredOutputs(t *testing.T) {
	sum := summaryOf(t, fixtures()...)
	var js bytes.Buffer
	if err := RenderJSON(&js, sum); err != nil {
		t.Fatal(err)
	}
	var back Summary
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Objects) != len(fixtures()) || back.Objects[0].Singleton == nil || back.Objects[0].Singleton.ActivePod != "db-7f9c6-abcde" {
		t.Errorf("the JSON summary does not round-trip: %+v", back.Objects[0])
	}
	var y bytes.Buffer
	if err := RenderYAML(&y, sum); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"objects:", "health:", "activePod: db-7f9c6-abcde", "lastHandoverGap: 850ms", "writer: pg-0", "nextIdentity: 11", "canaries:"} {
		if !strings.Contains(y.String(), key) {
			t.Errorf("the YAML summary lacks %q", key)
		}
	}
}

func TestEmptyView(t *testing.T) {
	var b bytes.Buffer
	if err := RenderText(&b, Summary{}, Style{}, now, `No statefulops objects in namespace "shop".`); err != nil {
		t.Fatal(err)
	}
	if b.String() != "No statefulops objects in namespace \"shop\".\n" {
		t.Errorf("empty view: %q", b.String())
	}
}

// An object the operator never reported on reads Current for kstatus; the view says why.
func TestRenderWithoutConditions(t *testing.T) {
	sum := summaryOf(t, fixture{name: "new", kind: "ssl", obj: &leasev1.StatefulSetLock{ObjectMeta: objMeta("shop", "new", 1),
		Spec: leasev1.StatefulSetLockSpec{StatefulSetName: "pg", LeaseName: "pg-lease"}}})
	var b bytes.Buffer
	if err := RenderText(&b, sum, Style{}, now, "none"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "\n  status: Resource is current (no Ready condition: the operator has not reported on it yet)\n") {
		t.Errorf("an object without conditions:\n%s", b.String())
	}
}
