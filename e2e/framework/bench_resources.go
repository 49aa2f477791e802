//go:build e2e && bench

package framework

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/statefulops/statefulops/e2e/benchfmt"
	"github.com/statefulops/statefulops/e2e/operators"
	leasev1 "github.com/statefulops/statefulops/shared/api/lease/v1"
)

// Sizes of the run.
const (
	ResCRs             = 100   // CRs per operator, each with a 1-replica workload
	ResUnrelatedPods   = 10000 // unrelated pods
	ResUnrelatedConfig = 5000  // unrelated ConfigMaps, and as many Secrets: 10,000 config objects
	resWindows         = 6     // windows of the minute at rest
	resWindow          = 10 * time.Second
	ResRSSSamples      = 10
	ResLabel           = "bench"
	ResLabelValue      = "unrelated"
	resOwnerValue      = "owner" // ResLabel's value on the owners of the unrelated pods
)

// ResOperator is one operator of the run: its local process and the namespace of its CRs.
type ResOperator struct {
	Family, Name string
	PID          int
	MetricsPort  int
	PprofPort    int // its --pprof-bind-address port, 0 without one
	Namespace    string
	WritesNote   string // appended to the note of its writes-at-rest figure
}

// ResProcess returns the PID and metrics port of the local operator StartLocalOperator started.
func ResProcess(t *testing.T, name string) (pid, metricsPort int) {
	t.Helper()
	return ResProcessIn(t, filepath.Join(filepath.Dir(Kubeconfig), strings.TrimSuffix(name, "-operator")+"-e2e"), name)
}

// ResProcessIn returns the PID and metrics port of the local process name started from stateDir.
func ResProcessIn(t *testing.T, stateDir, name string) (pid, metricsPort int) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(operators.Dir(stateDir), name+".pid"))
	require.NoError(t, err)
	pid, err = strconv.Atoi(strings.TrimSpace(string(raw)))
	require.NoError(t, err)
	metricsPort = resFlagPort(t, pid, "metrics-bind-address")
	require.NotZero(t, metricsPort, "%s has a metrics port", name)
	return pid, metricsPort
}

// ResPprofPort returns the port of the process's --pprof-bind-address, or 0 if it has none.
func ResPprofPort(t *testing.T, pid int) int {
	t.Helper()
	return resFlagPort(t, pid, "pprof-bind-address")
}

// resFlagPort returns the port of the process's --<flag>=host:port, or 0 if it has none.
func resFlagPort(t *testing.T, pid int, flag string) int {
	t.Helper()
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	require.NoError(t, err)
	for _, arg := range strings.Split(string(cmdline), "\x00") {
		if addr, ok := strings.CutPrefix(arg, "--"+flag+"="); ok {
			_, port, _ := strings.Cut(addr, ":")
			n, err := strconv.Atoi(port)
			require.NoError(t, err)
			return n
		}
	}
	return 0
}

// Profiled is the process's profiling endpoint (CPUProfiles).
func (o *ResOperator) Profiled() Profiled { return Profiled{Name: o.Name, Port: o.PprofPort} }

// ResFastClient is an admin clientset without client-side rate limits, for the bulk creations.
func ResFastClient(t *testing.T) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(RESTConfig)
	cfg.QPS, cfg.Burst = 2000, 4000
	c, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	return c
}

// ResMetricsToken returns a token that the operators' secure metrics endpoints accept (MetricsToken),
// once each of them does.
func ResMetricsToken(t *testing.T, ops []*ResOperator) string {
	t.Helper()
	ctx := t.Context()
	names := make([]string, 0, len(ops))
	for _, o := range ops {
		names = append(names, o.Name)
	}
	token := MetricsToken(t, names...)
	// The token and its RBAC work before anything is measured.
	for _, o := range ops {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			_, err := ResScrapeOperator(ctx, o, token)
			assert.NoError(c, err)
		}, Timeout, Tick, "%s serves its metrics to the bench token", o.Name)
	}
	return token
}

// The workloads: ResCRs CRs per operator, each with the smallest realistic workload (1 replica).
var ResWorkloads = map[string]func(ctx context.Context, c kubernetes.Interface, ns string) error{
	"lease": func(ctx context.Context, c kubernetes.Interface, ns string) error {
		return ResParallel(ResCRs, func(i int) error {
			name := fmt.Sprintf("db-%03d", i)
			if _, err := c.AppsV1().StatefulSets(ns).Create(ctx, ResStatefulSet(name), metav1.CreateOptions{}); err != nil {
				return err
			}
			_, err := locks(ns).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "app.anukkrit.me/v1", "kind": "StatefulSetLock",
				"metadata": map[string]any{"name": name},
				"spec": map[string]any{"statefulSetName": name, "leaseName": name + "-writer",
					"leaseDurationSeconds": int64(15), "failoverDelaySeconds": int64(5)},
			}}, metav1.CreateOptions{})
			return err
		})
	},
	"rollout": func(ctx context.Context, c kubernetes.Interface, ns string) error {
		return ResParallel(ResCRs, func(i int) error {
			name := fmt.Sprintf("web-%03d", i)
			if _, err := c.AppsV1().StatefulSets(ns).Create(ctx, ResStatefulSet(name), metav1.CreateOptions{}); err != nil {
				return err
			}
			// No rollout is pending at rest, so the check's Prometheus is never queried.
			_, err := rollouts(ns).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "sts.plus/v1alpha1", "kind": "PhasedRollout",
				"metadata": map[string]any{"name": name},
				"spec": map[string]any{"targetRef": name, "check": map[string]any{
					"initialDelaySeconds": int64(1), "periodSeconds": int64(1), "successThreshold": int64(1),
					"query": map[string]any{"expr": `app_errors{pod="{{pod}}"} > 0`, "url": "127.0.0.1:1"},
				}},
			}}, metav1.CreateOptions{})
			return err
		})
	},
	"cluster": func(ctx context.Context, _ kubernetes.Interface, ns string) error {
		return ResParallel(ResCRs, func(i int) error {
			raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(NewStatefulCluster(fmt.Sprintf("kv-%03d", i), 1))
			if err != nil {
				return err
			}
			_, err = statefulClusters(ns).Create(ctx, &unstructured.Unstructured{Object: raw}, metav1.CreateOptions{})
			return err
		})
	},
	"extended": func(ctx context.Context, c kubernetes.Interface, ns string) error {
		return ResParallel(ResCRs, func(i int) error {
			name := fmt.Sprintf("app-%03d", i)
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name + "-config"}, Data: map[string]string{"LOG_LEVEL": "info"}}
			if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				return err
			}
			e := NewESTS(name, 1)
			e.Spec.Template.Spec.Template.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{
				ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}},
			}}
			raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(e)
			if err != nil {
				return err
			}
			u := &unstructured.Unstructured{Object: raw}
			unstructured.RemoveNestedField(u.Object, "status")
			_, err = ESTSClient(ns).Create(ctx, u, metav1.CreateOptions{})
			return err
		})
	},
}

// ResStatefulSet is a plain 1-replica StatefulSet of pause pods labelled app=name.
func ResStatefulSet(name string) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To[int32](1),
			Selector:            &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template:            PodTemplate(name),
			PodManagementPolicy: appsv1.ParallelPodManagement,
		},
	}
}

// ResParallel runs f(0..n-1) on 16 workers and returns the first errors.
func ResParallel(n int, f func(i int) error) error {
	next := make(chan int)
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil && !apierrors.IsAlreadyExists(err) {
					mu.Lock()
					if len(errs) < 5 {
						errs = append(errs, err)
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return errors.Join(errs...)
}

// ResWaitSettled waits until every CR of the operator reports its workload up.
func ResWaitSettled(t *testing.T, o *ResOperator) {
	t.Helper()
	var list func(ctx context.Context) (*unstructured.UnstructuredList, error)
	var settled func(u *unstructured.Unstructured) bool
	switch o.Family {
	case "lease":
		// One writer per StatefulSet; the lock's own status says the same.
		list = func(ctx context.Context) (*unstructured.UnstructuredList, error) {
			return locks(o.Namespace).List(ctx, metav1.ListOptions{})
		}
		settled = func(u *unstructured.Unstructured) bool {
			writer, _, _ := unstructured.NestedString(u.Object, "status", "writerPod")
			return writer != ""
		}
	case "rollout":
		list = func(ctx context.Context) (*unstructured.UnstructuredList, error) {
			return rollouts(o.Namespace).List(ctx, metav1.ListOptions{})
		}
		settled = func(u *unstructured.Unstructured) bool {
			phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
			return phase == "Updated" // idle (the original project's value)
		}
	case "cluster":
		list = func(ctx context.Context) (*unstructured.UnstructuredList, error) {
			return statefulClusters(o.Namespace).List(ctx, metav1.ListOptions{})
		}
		settled = func(u *unstructured.Unstructured) bool {
			ready, _, _ := unstructured.NestedInt64(u.Object, "status", "readyReplicas")
			return ready == 1
		}
	case "extended":
		list = func(ctx context.Context) (*unstructured.UnstructuredList, error) {
			return ESTSClient(o.Namespace).List(ctx, metav1.ListOptions{})
		}
		settled = func(u *unstructured.Unstructured) bool { return resCondition(u, "Ready") == "True" }
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		l, err := list(t.Context())
		require.NoError(c, err)
		n := 0
		for i := range l.Items {
			if settled(&l.Items[i]) {
				n++
			}
		}
		assert.Equal(c, ResCRs, n, "%s CRs settled", o.Family)
	}, 5*time.Minute, time.Second, "the %d CRs of %s settle", ResCRs, o.Name)
	if o.Family == "lease" {
		pods, err := Clientset.CoreV1().Pods(o.Namespace).List(t.Context(), metav1.ListOptions{LabelSelector: leasev1.RoleLabel + "=" + leasev1.RoleWriter})
		require.NoError(t, err)
		require.Len(t, pods.Items, ResCRs, "one writer per StatefulSet")
	}
}

// resCondition is the status of the object's condition of that type.
func resCondition(u *unstructured.Unstructured, condType string) string {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == condType {
			return fmt.Sprint(m["status"])
		}
	}
	return ""
}

// resLeaseWrite is one write of a Lease seen on the watch, placed in time by its renewTime.
type resLeaseWrite struct {
	operator string
	at       time.Time
}

// resLeaseWrites collects the Lease writes of the operators (their leader-election Leases, in
// <operator>-system, and lease-operator's Leases of its locks).
type resLeaseWrites struct {
	mu     sync.Mutex
	writes []resLeaseWrite
}

func (l *resLeaseWrites) between(operator string, from, to time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, w := range l.writes {
		if w.operator == operator && !w.at.Before(from) && w.at.Before(to) {
			n++
		}
	}
	return n
}

func resWatchLeases(t *testing.T, ops []*ResOperator) *resLeaseWrites {
	t.Helper()
	w, err := Clientset.CoordinationV1().Leases("").Watch(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	out := &resLeaseWrites{}
	owner := func(l *coordinationv1.Lease) string {
		if _, ok := l.Labels[leasev1.LockLabel]; ok {
			return "lease-operator"
		}
		for _, o := range ops {
			if l.Namespace == o.Name+"-system" {
				return o.Name
			}
		}
		return ""
	}
	go func() {
		for ev := range w.ResultChan() {
			l, ok := ev.Object.(*coordinationv1.Lease)
			if !ok || (ev.Type != watch.Modified && ev.Type != watch.Added) {
				continue
			}
			op := owner(l)
			if op == "" {
				continue
			}
			at := time.Now()
			if l.Spec.RenewTime != nil {
				at = l.Spec.RenewTime.Time
			}
			out.mu.Lock()
			out.writes = append(out.writes, resLeaseWrite{operator: op, at: at})
			out.mu.Unlock()
		}
	}()
	return out
}

// resBoundary is the state of the counters at one window boundary.
type resBoundary struct {
	at      time.Time
	api     map[string]float64 // API server writes by group/resource/subresource
	clients map[string]float64 // operator -> its client-side write requests
	scraped map[string]time.Time
	reviews map[string]float64 // operator -> reviews its metrics endpoint made for this scrape
}

// ResMinuteAtRest waits for the API server to go quiet, then measures the operators' API writes in
// windows over a minute while sampling their RSS (the memory baseline, before any unrelated object).
func ResMinuteAtRest(t *testing.T, ops []*ResOperator, token string) ([]resWindowWrites, map[string][]float64) {
	t.Helper()
	leases := resWatchLeases(t, ops)
	resWaitQuiet(t)
	rssQuiet := ResSampleRSSDuring(t, ops, resWindows*resWindow, resWindow/2)
	windows := resMeasureWrites(t, ops, token, leases)
	return windows, <-rssQuiet
}

// resWindowWrites are the writes of one window.
type resWindowWrites struct {
	seconds    float64
	api        map[string]float64
	nonLease   map[string]float64 // operator -> writes that are not Lease writes nor scrape reviews
	leaseW     map[string]float64 // operator -> Lease writes
	kcmPer100  float64            // kube-controller-manager's workload writes per 100 StatefulSets
	statefulSs int
}

// resMeasureWrites takes resWindows windows of resWindow at rest.
func resMeasureWrites(t *testing.T, ops []*ResOperator, token string, leases *resLeaseWrites) []resWindowWrites {
	t.Helper()
	stsList, err := Clientset.AppsV1().StatefulSets("").List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	statefulSets := 0
	for _, s := range stsList.Items {
		if metav1.GetControllerOf(&s) == nil || metav1.GetControllerOf(&s).Kind == "ExtendedStatefulSet" {
			statefulSets++ // kube-controller-manager runs every StatefulSet, also those extended-operator writes
		}
	}
	boundary := func() resBoundary {
		b := resBoundary{at: time.Now(), clients: map[string]float64{}, scraped: map[string]time.Time{}, reviews: map[string]float64{}}
		b.api = resAPIWrites(t)
		prev := b.api
		for _, o := range ops {
			b.scraped[o.Name] = time.Now()
			text, err := ResScrapeOperator(t.Context(), o, token)
			require.NoError(t, err)
			b.clients[o.Name] = resClientWrites(text)
			after := resAPIWrites(t)
			b.reviews[o.Name] = resReviews(after) - resReviews(prev)
			prev = after
		}
		return b
	}
	bs := []resBoundary{boundary()}
	for range resWindows {
		time.Sleep(time.Until(bs[len(bs)-1].at.Add(resWindow)))
		bs = append(bs, boundary())
	}
	out := make([]resWindowWrites, 0, resWindows)
	for i := 1; i < len(bs); i++ {
		a, b := bs[i-1], bs[i]
		w := resWindowWrites{seconds: b.at.Sub(a.at).Seconds(), api: map[string]float64{}, nonLease: map[string]float64{},
			leaseW: map[string]float64{}, statefulSs: statefulSets}
		for k, v := range b.api {
			if d := v - a.api[k]; d > 0 {
				w.api[k] = d
			}
		}
		// Every write the API server saw that is not background (Lease renewals, node heartbeats, reviews):
		// an operator's non-Lease writes are among them, which bounds the client-side count. That bound
		// absorbs the one or two Lease writes a window boundary can misplace (a renewTime is set just
		// before its request is sent; the client counter counts it when the answer comes).
		apiOther := 0.0
		for k, v := range w.api {
			if !resBackgroundResource(k) {
				apiOther += v
			}
		}
		opsWorkload := 0.0
		for _, o := range ops {
			lw := float64(leases.between(o.Name, a.scraped[o.Name], b.scraped[o.Name]))
			w.leaseW[o.Name] = lw
			// The reviews of scrape b happened before its counters were read; those of scrape a after.
			n := min(max(b.clients[o.Name]-a.clients[o.Name]-lw-b.reviews[o.Name], 0), apiOther)
			w.nonLease[o.Name] = n
			opsWorkload += n
		}
		workload := 0.0
		for k, v := range w.api {
			if resWorkloadResource(k) {
				workload += v
			}
		}
		w.kcmPer100 = max(workload-opsWorkload, 0) * 100 / float64(max(statefulSets, 1))
		out = append(out, w)
		var line strings.Builder
		for _, o := range ops {
			fmt.Fprintf(&line, " %s: client writes %.0f, Lease writes %.0f, scrape reviews %.0f;", o.Family,
				b.clients[o.Name]-a.clients[o.Name], w.leaseW[o.Name], b.reviews[o.Name])
		}
		t.Logf("window %d (%.1f s):%s API server: non-background writes %.0f, of which workload %.0f", i, w.seconds, line.String(), apiOther, workload)
	}
	return out
}

// resWaitQuiet waits (at most three minutes) until the API server saw no write for 10 s other than
// Lease renewals, node heartbeats and the bench's own metrics reviews: the settling of the workloads
// has ended (a rollout operator, say, answers kube-controller-manager's last status updates), and what
// the minute at rest then counts is what the operators do on their own. Three minutes, not one: after
// 1,000 singletons settle, kube-controller-manager's Deployment controller still writes their statuses
// for over a minute at its client-side limit (about 17 a second), and the first changes measured
// behind that took 2-5 × the others (BENCHMARKS.md of 2026-12-07 23:13).
func resWaitQuiet(t *testing.T) {
	t.Helper()
	start := time.Now()
	quietSince, last := start, resAPIWrites(t)
	for time.Since(start) < 3*time.Minute && time.Since(quietSince) < 10*time.Second {
		time.Sleep(2 * time.Second)
		now := resAPIWrites(t)
		for k, v := range now {
			if v != last[k] && !resBackgroundResource(k) {
				quietSince = time.Now()
				t.Logf("settling: %s +%.0f", k, v-last[k])
			}
		}
		last = now
	}
	t.Logf("quiet for %s after %s", time.Since(quietSince).Round(time.Second), time.Since(start).Round(time.Second))
}

// resBackgroundResource reports whether the API server key names writes that go on at rest by design:
// Lease renewals, node status heartbeats and the reviews of the bench's own scrapes.
func resBackgroundResource(key string) bool {
	return strings.HasPrefix(key, "coordination.k8s.io/leases") || key == "/nodes/status" ||
		strings.HasPrefix(key, "authentication.k8s.io/") || strings.HasPrefix(key, "authorization.k8s.io/")
}

// resWorkloadResource reports whether the API server key names a kind that kube-controller-manager
// writes for StatefulSets at rest, if at all.
func resWorkloadResource(key string) bool {
	for _, r := range []string{"apps/statefulsets", "/pods", "apps/controllerrevisions", "/events", "events.k8s.io/events"} {
		if strings.HasPrefix(key, r) || strings.Contains(key, r+"/") || strings.HasSuffix(key, r) {
			return true
		}
	}
	return false
}

// ResNonLeaseWritesPerMinute is the operator's writes of each window of ResMinuteAtRest that are not
// Lease writes nor the bench's scrape reviews, scaled to a minute.
func ResNonLeaseWritesPerMinute(windows []resWindowWrites, operator string) []float64 {
	out := make([]float64, 0, len(windows))
	for _, w := range windows {
		out = append(out, w.nonLease[operator]*60/w.seconds)
	}
	return out
}

// ResRecordWrites records one writes-at-rest figure per operator and logs the API server's table.
func ResRecordWrites(t *testing.T, ops []*ResOperator, windows []resWindowWrites) {
	t.Helper()
	total := map[string]float64{}
	seconds := 0.0
	for _, w := range windows {
		seconds += w.seconds
		for k, v := range w.api {
			total[k] += v
		}
	}
	keys := make([]string, 0, len(total))
	for k := range total {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var table strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&table, "\n  %-50s %6.0f", k, total[k])
	}
	t.Logf("API server write requests (apiserver_request_total, every non-read verb) over %.0f s at rest, by group/resource/subresource:%s",
		seconds, table.String())
	var kcm []float64
	for _, w := range windows {
		kcm = append(kcm, w.kcmPer100*60/w.seconds)
	}
	for _, o := range ops {
		var samples []float64
		lease := 0.0
		for _, w := range windows {
			samples = append(samples, w.nonLease[o.Name]*60/w.seconds)
			lease += w.leaseW[o.Name]
		}
		RecordFigure(t, benchfmt.Figure{
			Operator: o.Family, Name: fmt.Sprintf("API writes at rest, %d CRs settled (Lease renewals aside)", ResCRs),
			Unit: "writes/min", Where: "kwok", Samples: samples,
			Baseline: "kube-controller-manager, plain StatefulSets settled, per 100", BaselineSamples: kcm,
			Targets: []benchfmt.Target{benchfmt.AtMost("max", 0)},
			Note: fmt.Sprintf("%d windows of %s at rest (they start once the API server saw 10 s without a write other "+
				"than Lease renewals, node heartbeats and the bench's metrics reviews), each scaled to a minute. Operator: its own client-side write requests "+
				"(rest_client_requests_total, non-GET methods) minus its Lease writes seen on a Lease watch (%.0f/min: "+
				"leader election%s) minus the TokenReview/SubjectAccessReview the bench's scrape of its secure metrics caused "+
				"(API server counters around each scrape), bounded by the API server's non-Lease, non-heartbeat writes of the "+
				"window (a Lease write can fall on the other side of a window boundary). Cross-checked with the API server's apiserver_request_total by "+
				"group/resource (logged). Baseline: the API server's writes to StatefulSets, pods, ControllerRevisions and "+
				"Events in the same windows minus the operators' own non-Lease writes, i.e. kube-controller-manager's writes "+
				"for the run's %d StatefulSets, scaled to 100 (user agents are not in apiserver_request_total). Load: %s.",
				resWindows, resWindow, lease*60/seconds, map[bool]string{true: " and the Leases of its locks", false: ""}[o.Family == "lease"],
				windows[0].statefulSs, ResLoad()) + o.WritesNote,
		})
	}
}

// resAPIWrites reads apiserver_request_total's write verbs, summed per group/resource/subresource.
func resAPIWrites(t *testing.T) map[string]float64 {
	t.Helper()
	raw, err := Clientset.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(t.Context())
	require.NoError(t, err)
	out := map[string]float64{}
	for _, s := range resParseCounter(string(raw), "apiserver_request_total") {
		switch s.labels["verb"] {
		case "POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY":
		default:
			continue
		}
		key := s.labels["group"] + "/" + s.labels["resource"]
		if sub := s.labels["subresource"]; sub != "" {
			key += "/" + sub
		}
		out[key] += s.value
	}
	return out
}

// resReviews is the number of TokenReviews and SubjectAccessReviews among the API server's writes.
func resReviews(api map[string]float64) float64 {
	return api["authentication.k8s.io/tokenreviews"] + api["authorization.k8s.io/subjectaccessreviews"]
}

// ResScrapeOperator reads the operator's /metrics with the bench token.
func ResScrapeOperator(ctx context.Context, o *ResOperator, token string) (string, error) {
	code, body, err := ScrapeMetrics(ctx, o.MetricsPort, token)
	if err != nil {
		return "", err
	}
	if code != http.StatusOK {
		return "", fmt.Errorf("%s /metrics: %d: %s", o.Name, code, body)
	}
	return body, nil
}

// resClientWrites sums rest_client_requests_total over the write methods.
func resClientWrites(text string) float64 {
	n := 0.0
	for _, s := range resParseCounter(text, "rest_client_requests_total") {
		switch s.labels["method"] {
		case "POST", "PUT", "PATCH", "DELETE":
			n += s.value
		}
	}
	return n
}

type resSample struct {
	labels map[string]string
	value  float64
}

var resLabelRE = regexp.MustCompile(`(\w+)="((?:[^"\\]|\\.)*)"`)

// resParseCounter returns the samples of one metric from the Prometheus text format.
func resParseCounter(text, name string) []resSample {
	var out []resSample
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name+"{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		if err != nil {
			continue
		}
		s := resSample{labels: map[string]string{}, value: v}
		for _, m := range resLabelRE.FindAllStringSubmatch(labels, -1) {
			s.labels[m[1]] = m[2]
		}
		out = append(out, s)
	}
	return out
}

// resRSS is the VmRSS of the process in MiB.
func resRSS(pid int) (float64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			kb, err := strconv.ParseFloat(f[0], 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}

// ResAlive reports whether the process still runs.
func ResAlive(pid int) bool {
	_, err := resRSS(pid)
	return err == nil
}

// ResSampleRSSDuring samples every operator's RSS every interval for d, in the background.
func ResSampleRSSDuring(t *testing.T, ops []*ResOperator, d, interval time.Duration) <-chan map[string][]float64 {
	done := make(chan map[string][]float64, 1)
	go func() {
		out := map[string][]float64{}
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(interval) {
			for _, o := range ops {
				if v, err := resRSS(o.PID); err == nil {
					out[o.Name] = append(out[o.Name], v)
				}
			}
		}
		done <- out
	}()
	return done
}

// ResWaitRSSSteady waits until every operator's RSS stayed within 2% for 5 s (at most 2 minutes): its
// informers have taken in the new objects.
func ResWaitRSSSteady(t *testing.T, ops []*ResOperator) {
	t.Helper()
	start := time.Now()
	hist := map[string][]float64{}
	steady := func(o *ResOperator) bool {
		h := hist[o.Name]
		if len(h) < 5 {
			return false
		}
		last := h[len(h)-5:]
		return slices.Max(last) <= 1.02*slices.Min(last)
	}
	for time.Since(start) < 2*time.Minute {
		all := true
		for _, o := range ops {
			v, err := resRSS(o.PID)
			require.NoError(t, err, "%s is running", o.Name)
			hist[o.Name] = append(hist[o.Name], v)
			all = all && steady(o)
		}
		if all {
			break
		}
		time.Sleep(time.Second)
	}
	t.Logf("RSS steady after %s", time.Since(start).Round(time.Second))
}

// ResCreateUnrelated creates the unrelated pods, ConfigMaps and Secrets, half in own (namespaces of
// their own), half in crNS, and returns how many of each exist.
func ResCreateUnrelated(t *testing.T, c kubernetes.Interface, own, crNS []string) [3]int {
	t.Helper()
	ctx := t.Context()
	nsFor := func(i int) string {
		if i%2 == 0 {
			return own[(i/2)%len(own)]
		}
		return crNS[(i/2)%len(crNS)]
	}
	labels := map[string]string{ResLabel: ResLabelValue, "app": "unrelated"}
	data := strings.Repeat("x", 200)
	// Most pods of a cluster have a controller (ReplicaSet, Job, DaemonSet...): 9 in 10 unrelated pods
	// get a controller reference to an owner object of their namespace. It is a ConfigMap, so that no
	// controller acts on them; the garbage collector sees a live owner. Every 10th pod is an orphan.
	owners := map[string]metav1.OwnerReference{}
	for _, ns := range slices.Concat(own, crNS) {
		cm, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name: "bench-unrelated-owner", Labels: map[string]string{ResLabel: resOwnerValue},
		}}, metav1.CreateOptions{})
		require.NoError(t, err)
		owners[ns] = metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: cm.Name, UID: cm.UID, Controller: ptr.To(true)}
	}
	require.NoError(t, ResParallel(ResUnrelatedPods, func(i int) error {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("unrelated-%05d", i), Labels: labels},
			Spec: corev1.PodSpec{
				SchedulingGates: []corev1.PodSchedulingGate{{Name: "statefulops.dev/bench-unrelated"}},
				Containers:      []corev1.Container{{Name: "main", Image: PauseImage}},
			},
		}
		if i%10 != 0 {
			pod.OwnerReferences = []metav1.OwnerReference{owners[nsFor(i)]}
		}
		_, err := c.CoreV1().Pods(nsFor(i)).Create(ctx, pod, metav1.CreateOptions{})
		return err
	}))
	require.NoError(t, ResParallel(ResUnrelatedConfig, func(i int) error {
		meta := metav1.ObjectMeta{Name: fmt.Sprintf("unrelated-%05d", i), Labels: labels}
		if _, err := c.CoreV1().ConfigMaps(nsFor(i)).Create(ctx, &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"config": data}}, metav1.CreateOptions{}); err != nil {
			return err
		}
		_, err := c.CoreV1().Secrets(nsFor(i)).Create(ctx, &corev1.Secret{ObjectMeta: meta, Data: map[string][]byte{"password": []byte(data)}}, metav1.CreateOptions{})
		return err
	}))
	sel := metav1.ListOptions{LabelSelector: ResLabel + "=" + ResLabelValue}
	pods, err := c.CoreV1().Pods("").List(ctx, sel)
	require.NoError(t, err)
	cms, err := c.CoreV1().ConfigMaps("").List(ctx, sel)
	require.NoError(t, err)
	secrets, err := c.CoreV1().Secrets("").List(ctx, sel)
	require.NoError(t, err)
	counts := [3]int{len(pods.Items), len(cms.Items), len(secrets.Items)}
	require.Equal(t, [3]int{ResUnrelatedPods, ResUnrelatedConfig, ResUnrelatedConfig}, counts, "every unrelated object exists")
	for _, p := range pods.Items {
		require.Empty(t, p.Spec.NodeName, "unrelated pods stay unscheduled")
	}
	return counts
}

// ResDeleteUnrelated deletes the unrelated objects and waits until they are gone. The namespaces of
// their own are left to NewNamespace's cleanup, which deletes them (deleting them here too made that
// cleanup fail on NotFound).
func ResDeleteUnrelated(t *testing.T, own, crNS []string) {
	ctx := context.WithoutCancel(t.Context())
	sel := metav1.ListOptions{LabelSelector: ResLabel + "=" + ResLabelValue}
	// One DeleteCollection per namespace and kind (the API server deletes server-side, much faster than
	// the namespace controller's deletions).
	for _, ns := range slices.Concat(own, crNS) {
		// On a loaded machine a DeleteCollection can outlast the request timeout while the API server goes
		// on deleting: the wait below, which fails the test, is what counts.
		for _, err := range []error{
			Clientset.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, sel),
			Clientset.CoreV1().ConfigMaps(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, sel),
			Clientset.CoreV1().Secrets(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, sel),
		} {
			if err != nil {
				t.Logf("deleting the unrelated objects of %s (waiting for them anyway): %v", ns, err)
			}
		}
		_ = Clientset.CoreV1().ConfigMaps(ns).Delete(ctx, "bench-unrelated-owner", metav1.DeleteOptions{})
	}
	start := time.Now()
	defer func() { t.Logf("unrelated objects deleted in %s", time.Since(start).Round(time.Second)) }()
	one := metav1.ListOptions{LabelSelector: sel.LabelSelector, Limit: 1}
	assert.Eventually(t, func() bool {
		pods, err := Clientset.CoreV1().Pods("").List(ctx, one)
		if err != nil || len(pods.Items) > 0 {
			return false
		}
		cms, err := Clientset.CoreV1().ConfigMaps("").List(ctx, one)
		if err != nil || len(cms.Items) > 0 {
			return false
		}
		secrets, err := Clientset.CoreV1().Secrets("").List(ctx, one)
		return err == nil && len(secrets.Items) == 0
	}, 5*time.Minute, time.Second, "the unrelated objects are gone")
}

// ResLoad is the machine's load average, for the notes.
func ResLoad() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(raw))
	return strings.Join(f[:3], " ") + " (1/5/15 min)"
}
