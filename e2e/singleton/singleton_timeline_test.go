//go:build e2e

package singleton

import (
	"bufio"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/statefulops/statefulops/e2e/framework"
	"github.com/statefulops/statefulops/e2e/realnode"
	singletonv1 "github.com/statefulops/statefulops/shared/api/singleton/v1"
)

// podTimes is what the test's own pod watch saw of one pod, in the test's clock (the same machine as
// the real node, so comparable with the test app's records).
type podTimes struct {
	name     string
	created  time.Time // first seen
	running  time.Time // first seen with every container running (a Wrapper pod waiting for its grant)
	released time.Time // first seen with the epoch annotation (the operator's release)
	onExit   time.Time // first seen released on its predecessor's exit (AnnotationStartOnExit)
	gone     time.Time // first seen terminal, or deleted from the API
	exited   time.Time // first seen with the exit report (AnnotationExited): its sidecar saw every app exit
}

// podTimeline watches every pod of a namespace and records when each was created, released and gone,
// so the gap between two processes can be split into the kubelet's, the operator's and the grant's
// share.
type podTimeline struct {
	mu   sync.Mutex
	pods map[types.UID]*podTimes

	// The revision rule: when the operator releases a pod, no held pod of the same singleton may be of
	// a newer revision. Revisions (the pod-template-hash of a Deployment's pods, the
	// controller-revision-hash of a StatefulSet's) are ordered by their first appearance.
	revisionOrder map[string]int
	current       map[types.UID]*corev1.Pod
	releases      int
	violations    []string
}

// revisionMargin: a newer pod seen less than this before a release may have been created after the
// operator's last look at the API (its list right before the release), so it does not count.
const revisionMargin = 250 * time.Millisecond

func podRevision(pod *corev1.Pod) string {
	if h := pod.Labels[appsv1.ControllerRevisionHashLabelKey]; h != "" {
		return h
	}
	return pod.Labels[appsv1.DefaultDeploymentUniqueLabelKey]
}

// checkRevisionRule records pod and, when this event is its release, checks the revision rule.
func (tl *podTimeline) checkRevisionRule(pod *corev1.Pod, deleted bool, now time.Time) {
	rev := podRevision(pod)
	if _, ok := tl.revisionOrder[rev]; !ok && rev != "" {
		tl.revisionOrder[rev] = len(tl.revisionOrder)
	}
	wasReleased := false
	if prev := tl.current[pod.UID]; prev != nil {
		wasReleased = releaseDecided(prev)
	}
	if deleted {
		delete(tl.current, pod.UID)
		return
	}
	tl.current[pod.UID] = pod
	if wasReleased || !releaseDecided(pod) || rev == "" {
		return
	}
	tl.releases++
	for uid, other := range tl.current {
		if uid == pod.UID || other.Labels[singletonv1.LabelSingleton] != pod.Labels[singletonv1.LabelSingleton] ||
			releaseDecided(other) || other.DeletionTimestamp != nil {
			continue
		}
		seen := tl.pods[uid].created
		if o, ok := tl.revisionOrder[podRevision(other)]; ok && o > tl.revisionOrder[rev] && now.Sub(seen) > revisionMargin {
			tl.violations = append(tl.violations, fmt.Sprintf("released %s (revision %s) while %s of the newer revision %s was held (seen %s before)",
				pod.Name, rev, other.Name, podRevision(other), now.Sub(seen).Round(time.Millisecond)))
		}
	}
}

// releaseDecided reports whether the operator decided to release the pod: it released it, or released
// it on its predecessor's exit (the decision the revision rule is about; the epoch follows later).
func releaseDecided(pod *corev1.Pod) bool {
	return pod.Annotations[singletonv1.AnnotationEpoch] != "" || pod.Annotations[singletonv1.AnnotationStartOnExit] != ""
}

// revisionRule returns the releases checked and the violations of the revision rule.
func (tl *podTimeline) revisionRule() (int, []string) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return tl.releases, slices.Clone(tl.violations)
}

func watchPodTimeline(t *testing.T, ns string) *podTimeline {
	t.Helper()
	w, err := framework.Clientset.CoreV1().Pods(ns).Watch(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	tl := &podTimeline{pods: map[types.UID]*podTimes{}, revisionOrder: map[string]int{}, current: map[types.UID]*corev1.Pod{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			now := time.Now()
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			tl.mu.Lock()
			pt := tl.pods[pod.UID]
			if pt == nil {
				pt = &podTimes{name: pod.Name, created: now}
				tl.pods[pod.UID] = pt
			}
			if pt.released.IsZero() && pod.Annotations[singletonv1.AnnotationEpoch] != "" {
				pt.released = now
			}
			if pt.onExit.IsZero() && pod.Annotations[singletonv1.AnnotationStartOnExit] != "" {
				pt.onExit = now
			}
			if pt.running.IsZero() && allRunning(pod) {
				pt.running = now
			}
			if pt.exited.IsZero() && pod.Annotations[singletonv1.AnnotationExited] != "" {
				pt.exited = now
			}
			if pt.gone.IsZero() && (ev.Type == watch.Deleted || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed) {
				pt.gone = now
			}
			tl.checkRevisionRule(pod, ev.Type == watch.Deleted, now)
			tl.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		w.Stop()
		<-done
	})
	return tl
}

func allRunning(pod *corev1.Pod) bool {
	if len(pod.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Running == nil {
			return false
		}
	}
	return true
}

// cleared is when the pod stopped blocking a release as the operator sees it: gone, or its exit
// reported, whichever the harness saw first (zero: neither yet); reported says it was the report.
func (pt podTimes) cleared() (at time.Time, reported bool) {
	if !pt.exited.IsZero() && (pt.gone.IsZero() || pt.exited.Before(pt.gone)) {
		return pt.exited, true
	}
	return pt.gone, false
}

func (tl *podTimeline) get(uid string) podTimes {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if pt := tl.pods[types.UID(uid)]; pt != nil {
		return *pt
	}
	return podTimes{}
}

// interval is one process of the test app, from its own records.
type interval struct {
	pod, podUID string
	instance    string
	start, stop time.Time
	records     []string // the raw records, printed when the interval is part of an overlap
}

// readIntervals reads the test app's records of the pods of ns whose name starts with prefix, ordered
// by start.
func readIntervals(t *testing.T, ns, prefix string) []*interval {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(realnode.RecordDir(framework.RealNode.StateDir), "*.jsonl"))
	require.NoError(t, err)
	byInstance := map[string]*interval{}
	for _, f := range files {
		fh, err := os.Open(f)
		require.NoError(t, err)
		s := bufio.NewScanner(fh)
		for s.Scan() {
			var r struct {
				framework.AppRecord
				Instance string `json:"instance"`
			}
			if json.Unmarshal(s.Bytes(), &r) != nil || r.Pod.Namespace != ns || !strings.HasPrefix(r.Pod.Name, prefix) {
				continue
			}
			iv := byInstance[r.Instance]
			if iv == nil {
				iv = &interval{pod: r.Pod.Name, podUID: r.Pod.UID, instance: r.Instance}
				byInstance[r.Instance] = iv
			}
			iv.records = append(iv.records, s.Text())
			switch r.Event {
			case "start":
				iv.start = r.Time
			case "stop":
				iv.stop = r.Time
			}
		}
		_ = fh.Close()
	}
	var ivs []*interval
	for _, iv := range byInstance {
		if !iv.start.IsZero() {
			ivs = append(ivs, iv)
		}
	}
	slices.SortFunc(ivs, func(a, b *interval) int { return a.start.Compare(b.start) })
	return ivs
}

// handover is one measured gap between two consecutive processes of a singleton, split by what the
// test's pod watch saw: old process exit → old pod out of the way (its exit report, or gone from the
// API or terminal: the kubelet) → new pod released (the operator) → new process started (the grant
// path, or for a pod created after the release also the pod's start).
type handover struct {
	scenario                 string
	from, to                 string
	gap                      time.Duration
	toGone, toRelease, toRun time.Duration
	prestarted               bool // the new pod existed before the release (its start was not in the gap)
	reported                 bool // the old pod's exit report came before it was gone (Wrapper mode)
	onExit                   bool // the new pod was released on the old one's exit before its process started
}

// checkHandovers counts overlapping process intervals among ivs (the invariant: must be 0) and returns
// the handovers between consecutive processes, labelled with the scenario during which the new process
// started.
//
// A process that left no stop record (killed before its SIGTERM handler could write one, e.g. stopped
// while it was starting) is taken to have run until its pod was seen terminal or gone from the API — an
// upper bound: the kubelet reports that only once every container stopped. Without that either, it
// counts as overlapping.
func checkHandovers(t *testing.T, ivs []*interval, tl *podTimeline, scenarioAt func(time.Time) string) (int, []handover) {
	t.Helper()
	overlaps := 0
	var hs []handover
	for i := 1; i < len(ivs); i++ {
		prev, next := ivs[i-1], ivs[i]
		old, cur := tl.get(prev.podUID), tl.get(next.podUID)
		stop := prev.stop
		if stop.IsZero() {
			stop = old.gone
			t.Logf("%s (%s) left no stop record; its pod was seen gone at %s", prev.pod, prev.instance, stop)
		}
		if stop.IsZero() || next.start.Before(stop) {
			overlaps++
			t.Logf("OVERLAP: %s (%s, start %s, stop %s) and %s (%s, start %s); records:\n%s\n%s", prev.pod, prev.instance, prev.start, stop,
				next.pod, next.instance, next.start, strings.Join(prev.records, "\n"), strings.Join(next.records, "\n"))
			continue
		}
		h := handover{scenario: scenarioAt(next.start), from: prev.pod, to: next.pod, gap: next.start.Sub(stop)}
		cleared, reported := old.cleared()
		h.reported = reported
		h.onExit = !cur.onExit.IsZero() && cur.onExit.Before(next.start)
		if !cleared.IsZero() && !cur.released.IsZero() {
			h.toGone = cleared.Sub(stop)
			h.toRelease = cur.released.Sub(cleared)
			h.toRun = next.start.Sub(cur.released)
			h.prestarted = !cur.running.IsZero() && cur.running.Before(cur.released)
		}
		hs = append(hs, h)
	}
	return overlaps, hs
}

// logHandovers prints every handover and the percentiles of the gap and of its parts.
func logHandovers(t *testing.T, label string, hs []handover) {
	t.Helper()
	var gaps, gone, rel, runPre, runLate, reported, onExit []time.Duration
	for _, h := range hs {
		cleared := "old pod gone"
		if h.reported {
			cleared = "exit reported"
			reported = append(reported, h.gap)
		}
		if h.onExit {
			// Released ahead on the old pod's exit: the grant server started the new process on the
			// report itself, before the exit's record and the release's completion reached the API.
			onExit = append(onExit, h.gap)
			t.Logf("%s handover %-22s %s → %s: gap %s, released on the old pod's exit (old exit→%s %s, →release completed %s)",
				label, h.scenario, h.from, h.to, h.gap.Round(time.Millisecond), cleared, h.toGone.Round(time.Millisecond),
				(h.toGone + h.toRelease).Round(time.Millisecond))
			gaps = append(gaps, h.gap)
			continue
		}
		t.Logf("%s handover %-22s %s → %s: gap %s = old exit→%s %s + →released %s + →new process started %s (new pod running before the release: %t)",
			label, h.scenario, h.from, h.to, h.gap.Round(time.Millisecond), cleared, h.toGone.Round(time.Millisecond),
			h.toRelease.Round(time.Millisecond), h.toRun.Round(time.Millisecond), h.prestarted)
		gaps = append(gaps, h.gap)
		gone = append(gone, h.toGone)
		rel = append(rel, h.toRelease)
		if h.prestarted {
			runPre = append(runPre, h.toRun)
		} else {
			runLate = append(runLate, h.toRun)
		}
	}
	pct := func(ds []time.Duration) string {
		return fmt.Sprintf("p50 %s p99 %s (n=%d)", singletonPercentile(ds, 50), singletonPercentile(ds, 99), len(ds))
	}
	t.Logf("%s handovers on the old pod's exit report: %d of %d, gap %s", label, len(reported), len(hs), pct(reported))
	t.Logf("%s handovers released ahead on the old pod's exit: %d of %d, gap %s", label, len(onExit), len(hs), pct(onExit))
	t.Logf("%s gap parts: old exit→old pod gone or exit reported %s; old pod gone→release %s; release→process start, pod already running (the grant path) %s; release→process start, pod not yet running at the release %s",
		label, pct(gone), pct(rel), pct(runPre), pct(runLate))
	byScenario := map[string][]time.Duration{}
	for _, h := range hs {
		byScenario[h.scenario] = append(byScenario[h.scenario], h.gap)
	}
	for _, s := range slices.Sorted(maps.Keys(byScenario)) {
		t.Logf("%s gap by scenario: %-22s %s", label, s, pct(byScenario[s]))
	}
}

func singletonPercentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	if i > 0 {
		i--
	}
	return s[min(i, len(s)-1)].Round(time.Millisecond)
}
