//go:build e2e

package rollout

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/statefulops/statefulops/e2e/framework"
	rolloutv1alpha1 "github.com/statefulops/statefulops/shared/api/rollout/v1alpha1"
)

// Helpers of rollout_test.go: rollout-operator as a local process, a real Prometheus (Debian's
// /usr/bin/prometheus) on loopback scraping an exporter the test controls, a recording proxy between
// the operator and Prometheus, and the invariant checker.

// startRolloutOperator runs rollout-operator as a local process for the test (see framework.StartLocalOperator).
func startRolloutOperator(t *testing.T) *framework.LocalOperator {
	return framework.StartLocalOperator(t, "rollout-operator")
}

// metricsExporter serves app_errors{namespace,pod} gauges the test sets.
type metricsExporter struct {
	mu     sync.Mutex
	series map[string]string
	srv    *httptest.Server
}

func newMetricsExporter(t *testing.T) *metricsExporter {
	e := &metricsExporter{series: map[string]string{}}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		e.mu.Lock()
		defer e.mu.Unlock()
		for k, v := range e.series {
			fmt.Fprintf(w, "%s %s\n", k, v)
		}
	}))
	t.Cleanup(e.srv.Close)
	return e
}

// setErrors sets the error gauge of one pod (0 = healthy).
func (e *metricsExporter) setErrors(ns, pod string, v int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.series[fmt.Sprintf(`app_errors{namespace=%q,pod=%q}`, ns, pod)] = strconv.Itoa(v)
}

// prometheus is a real Prometheus process on loopback with its storage in a temp dir.
type prometheus struct {
	t    *testing.T
	dir  string
	port int
	url  string
	cmd  *exec.Cmd
	done chan struct{}
}

// startPrometheusFor starts Prometheus scraping one static target.
func startPrometheusFor(t *testing.T, target string) *prometheus {
	t.Helper()
	return startPrometheusWith(t, fmt.Sprintf("  - job_name: app\n    static_configs:\n      - targets: [%q]\n", target))
}

// startPrometheusWith starts Prometheus on loopback with the given scrape_configs entries (YAML list
// items indented by two spaces), a 200ms scrape interval and a 2s lookback, so a series of a pod that
// is gone turns stale within seconds.
func startPrometheusWith(t *testing.T, scrapeConfigs string) *prometheus {
	t.Helper()
	if _, err := os.Stat("/usr/bin/prometheus"); err != nil {
		t.Fatalf("/usr/bin/prometheus missing (apt-get install -y prometheus): %v", err)
	}
	p := &prometheus{t: t, dir: t.TempDir(), port: framework.FreePort(t)}
	p.url = fmt.Sprintf("http://127.0.0.1:%d", p.port)
	cfg := "global:\n  scrape_interval: 200ms\n  scrape_timeout: 150ms\nscrape_configs:\n" + scrapeConfigs
	require.NoError(t, os.WriteFile(filepath.Join(p.dir, "prometheus.yml"), []byte(cfg), 0o600))
	p.start()
	t.Cleanup(p.stop)
	return p
}

func (p *prometheus) start() {
	p.t.Helper()
	require.NoError(p.t, p.tryStart())
}

// tryStart starts Prometheus and waits until it is ready; it returns what failed instead of failing
// the test, so a fault goroutine of a chaos campaign can call it.
func (p *prometheus) tryStart() error {
	log, err := os.OpenFile(filepath.Join(p.dir, "prometheus.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	p.cmd = exec.Command("/usr/bin/prometheus",
		"--config.file="+filepath.Join(p.dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(p.dir, "data"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", p.port),
		"--query.lookback-delta=2s", "--log.level=warn")
	p.cmd.Stdout, p.cmd.Stderr = log, log
	if err := p.cmd.Start(); err != nil {
		_ = log.Close()
		return err
	}
	done := make(chan struct{})
	p.done = done
	go func(cmd *exec.Cmd) { _ = cmd.Wait(); _ = log.Close(); close(done) }(p.cmd)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get(p.url + "/-/ready")
		if err != nil {
			continue
		}
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return nil
		}
	}
	return fmt.Errorf("Prometheus on %s not ready within a minute (log in %s)", p.url, p.dir)
}

func (p *prometheus) stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// queryRecord is one query the operator sent, as the recording proxy saw it.
type queryRecord struct {
	at      time.Time // when the answer went back to the operator
	query   string
	samples int    // samples in the result
	ok      bool   // a 200 answer with a parsable result
	auth    string // the Authorization header the operator sent
	// aborted: the operator went away or gave up before any answer (its process was killed or
	// stopped mid-query, or it cancelled the query): no result reached it, so none can count for or
	// against a step. Prometheus being down is not this: the operator gets an error answer.
	aborted bool
}

// recordingProxy forwards the operator's queries to Prometheus and records them and their results.
type recordingProxy struct {
	mu      sync.Mutex
	records []queryRecord
	url     string
}

func newRecordingProxy(t *testing.T, upstream string) *recordingProxy {
	t.Helper()
	return newRecordingProxyOn(t, upstream, "127.0.0.1:0")
}

// newRecordingProxyOn is newRecordingProxy listening on addr (e.g. the host's address on the real
// node's bridge, so an operator running as a pod reaches it).
func newRecordingProxyOn(t *testing.T, upstream, addr string) *recordingProxy {
	t.Helper()
	up, err := url.Parse(upstream)
	require.NoError(t, err)
	rp := &recordingProxy{}
	proxy := httputil.NewSingleHostReverseProxy(up)
	proxy.ModifyResponse = func(resp *http.Response) error {
		if !strings.HasSuffix(resp.Request.URL.Path, "/api/v1/query") {
			return nil
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return err
		}
		resp.Body = io.NopCloser(strings.NewReader(string(body)))
		var parsed struct {
			Status string `json:"status"`
			Data   struct {
				Result json.RawMessage `json:"result"`
			} `json:"data"`
		}
		rec := queryRecord{at: time.Now(), query: queryOf(resp.Request), auth: resp.Request.Header.Get("Authorization")}
		if resp.StatusCode == http.StatusOK && json.Unmarshal(body, &parsed) == nil && parsed.Status == "success" {
			var result []json.RawMessage
			if json.Unmarshal(parsed.Data.Result, &result) == nil {
				rec.ok, rec.samples = true, len(result)
			}
		}
		rp.mu.Lock()
		rp.records = append(rp.records, rec)
		rp.mu.Unlock()
		return nil
	}
	proxy.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		rp.mu.Lock()
		rp.records = append(rp.records, queryRecord{at: time.Now(), query: queryOf(r), aborted: r.Context().Err() != nil})
		rp.mu.Unlock()
		http.Error(w, err.Error(), http.StatusBadGateway)
	}
	// client_golang POSTs the query as a form: read it here (the proxied request keeps its body).
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Del("Accept-Encoding") // an uncompressed answer, so the hook can parse it
		if err := r.ParseForm(); err == nil {
			r.Header.Set(queryHeader, r.Form.Get("query"))
			body := r.PostForm.Encode()
			r.Body, r.ContentLength = io.NopCloser(strings.NewReader(body)), int64(len(body))
		}
		proxy.ServeHTTP(w, r)
	}))
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	_ = srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	rp.url = srv.URL
	return rp
}

// queryHeader carries the query from the proxy's handler to its response hook.
const queryHeader = "X-E2e-Query"

// queryOf returns the PromQL of a proxied query request.
func queryOf(r *http.Request) string { return r.Header.Get(queryHeader) }

func (rp *recordingProxy) snapshot() []queryRecord {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return slices.Clone(rp.records)
}

// partitionChange is one partition value of the StatefulSet, as the watch saw it.
type partitionChange struct {
	at    time.Time // when the watch saw it, or when the write was answered (timeFromWrites)
	value int32
	rv    string // the StatefulSet's resourceVersion with this value
}

// partitionWatch records every partition value of one StatefulSet.
type partitionWatch struct {
	mu      sync.Mutex
	changes []partitionChange
}

func watchPartition(t *testing.T, ns, name string) *partitionWatch {
	t.Helper()
	w, err := framework.Clientset.AppsV1().StatefulSets(ns).Watch(t.Context(), metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	pw := &partitionWatch{}
	go func() {
		last := int32(-1)
		for ev := range w.ResultChan() {
			sts, ok := ev.Object.(*appsv1.StatefulSet)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			if _, managed := sts.Annotations["sts.plus/phasedRollout"]; !managed {
				continue
			}
			p := int32(0)
			if ru := sts.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
				p = *ru.Partition
			}
			if p != last {
				pw.mu.Lock()
				pw.changes = append(pw.changes, partitionChange{at: time.Now(), value: p, rv: sts.ResourceVersion})
				pw.mu.Unlock()
				last = p
			}
		}
	}()
	return pw
}

// timeFromWrites times each partition change from the write that made it, where writeTime knows it
// (the API proxy's record of the operator's writes), instead of from the moment the watch delivered
// it: on a loaded machine the watch, and this process, lag by up to seconds, and a late previous
// change hides passing checks the operator made after its write. It returns how many changes keep
// their watch time, for want of a recorded write.
func (pw *partitionWatch) timeFromWrites(writeTime func(resourceVersion string) (time.Time, bool)) (byWatch int) {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	for i := range pw.changes {
		if at, ok := writeTime(pw.changes[i].rv); ok {
			pw.changes[i].at = at
		} else {
			byWatch++
		}
	}
	return byWatch
}

func (pw *partitionWatch) values() []int32 {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	var v []int32
	for _, c := range pw.changes {
		v = append(v, c.value)
	}
	return v
}

// invariant is the result of checking one StatefulSet's partition history against the queries.
type invariant struct {
	advances, unchecked int
	// queries and passes count the queries of this scenario and those that passed; aborted, those
	// that no answer came back for (queryRecord.aborted), which the checker skips.
	queries, passes, aborted int
	overheads                []time.Duration
}

// checkAdvances counts the partition decreases not preceded, since the previous partition change, by
// successThreshold consecutive passing queries (NoData semantic: a 200 answer with no sample) that
// mention marker (the namespace, so each test's queries are told apart). Aborted queries are
// skipped: the operator got no answer, so they neither pass nor fail a step. Skipping one adds no
// pass; it could join two runs of passes only for an operator that ignores a query it cancelled
// itself, and here the operator cancels none: Prometheus answers within milliseconds, far inside
// the operator's 10 s query timeout (an outage is an error answer, recorded as a failure), so an
// aborted query is the operator killed or stopped mid-query, and the next process counts afresh.
func checkAdvances(pw *partitionWatch, rp *recordingProxy, marker string, threshold int) invariant {
	pw.mu.Lock()
	changes := slices.Clone(pw.changes)
	pw.mu.Unlock()
	records := rp.snapshot()
	// In the order of their answers: a record is appended when its answer is read, which for
	// concurrent queries need not be that order.
	slices.SortStableFunc(records, func(a, b queryRecord) int { return a.at.Compare(b.at) })
	var inv invariant
	for _, r := range records {
		if strings.Contains(r.query, marker) {
			inv.queries++
			switch {
			case r.aborted:
				inv.aborted++
			case r.ok && r.samples == 0:
				inv.passes++
			}
		}
	}
	for i := 1; i < len(changes); i++ {
		if changes[i].value >= changes[i-1].value {
			continue
		}
		inv.advances++
		consecutive := 0
		var lastPass time.Time
		for _, r := range records {
			if r.aborted || !strings.Contains(r.query, marker) || !r.at.After(changes[i-1].at) || !r.at.Before(changes[i].at) {
				continue
			}
			if r.ok && r.samples == 0 {
				consecutive++
				lastPass = r.at
			} else {
				consecutive = 0
			}
		}
		if consecutive < threshold {
			inv.unchecked++
		} else {
			inv.overheads = append(inv.overheads, changes[i].at.Sub(lastPass))
		}
	}
	return inv
}

// createPhasedRollout creates a PhasedRollout of sts with a fast check against url.
func createPhasedRollout(t *testing.T, ns, name, sts, promURL string, threshold, maxTries int64, extra map[string]any) {
	t.Helper()
	check := map[string]any{
		"initialDelaySeconds": int64(1),
		"periodSeconds":       int64(1),
		"successThreshold":    threshold,
		"query": map[string]any{
			"expr": `app_errors{namespace="{{namespace}}",pod="{{pod}}"} > 0`,
			"url":  strings.TrimPrefix(promURL, "http://"),
		},
	}
	if maxTries > 0 {
		check["maxTries"] = maxTries
	}
	spec := map[string]any{"check": check}
	if sts != "" { // else extra names spec.targetRefs
		spec["targetRef"] = sts
	}
	for k, v := range extra {
		spec[k] = v
	}
	createPhasedRolloutSpec(t, ns, name, spec)
}

// createPhasedRolloutSpec creates a PhasedRollout with the given spec (unstructured: the tests give
// spec fragments as maps, some of them invalid on purpose).
func createPhasedRolloutSpec(t *testing.T, ns, name string, spec map[string]any) {
	t.Helper()
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "sts.plus/v1alpha1", "kind": "PhasedRollout",
		"metadata": map[string]any{"name": name, "namespace": ns}, "spec": spec,
	}}
	require.NoError(t, framework.Client.Create(t.Context(), obj))
}

// getPhasedRollout reads a PhasedRollout.
func getPhasedRollout(t *testing.T, ns, name string) (*rolloutv1alpha1.PhasedRollout, error) {
	pr := &rolloutv1alpha1.PhasedRollout{}
	return pr, framework.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, pr)
}

// rolloutPhase returns status.phase and status.rollingPodStatus.status.
func rolloutPhase(t *testing.T, ns, name string) (phase, step string) {
	t.Helper()
	pr, err := getPhasedRollout(t, ns, name)
	if err != nil {
		return "", ""
	}
	if pr.Status.RollingPodStatus != nil {
		step = string(pr.Status.RollingPodStatus.Status)
	}
	return string(pr.Status.Phase), step
}

// waitRolloutPhase waits for the phase want. Updated is both idle and a finished rollout (the
// original project's value), so it is waited for only at the StatefulSet's latest revision: the
// StatefulSet controller observed its spec and every pod runs the revision the PhasedRollout rolled
// (with spec.targetRefs: every StatefulSet, each one Updated in status.targets).
func waitRolloutPhase(t *testing.T, ns, name, want string) {
	t.Helper()
	require.Eventually(t, func() bool {
		pr, err := getPhasedRollout(t, ns, name)
		if err != nil || string(pr.Status.Phase) != want {
			return false
		}
		if want != string(rolloutv1alpha1.PhaseUpdated) {
			return true
		}
		for _, name := range pr.Spec.Targets() {
			sts, err := framework.Clientset.AppsV1().StatefulSets(ns).Get(t.Context(), name, metav1.GetOptions{})
			if err != nil || sts.Status.ObservedGeneration != sts.Generation || sts.Status.UpdateRevision != sts.Status.CurrentRevision {
				return false
			}
			if name == pr.Spec.TargetRef && sts.Status.UpdateRevision != pr.Status.UpdateRevision {
				return false
			}
		}
		for _, target := range pr.Status.Targets {
			if target.State != rolloutv1alpha1.TargetUpdated {
				return false
			}
		}
		return true
	}, framework.Timeout, framework.Tick, "PhasedRollout %s phase %s", name, want)
}

func stsPartition(t *testing.T, ns, name string) int32 {
	t.Helper()
	sts, err := framework.Clientset.AppsV1().StatefulSets(ns).Get(t.Context(), name, metav1.GetOptions{})
	require.NoError(t, err)
	if ru := sts.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
		return *ru.Partition
	}
	return 0
}

func waitPartitionValue(t *testing.T, ns, name string, want int32) {
	t.Helper()
	require.Eventually(t, func() bool { return stsPartition(t, ns, name) == want }, framework.Timeout, framework.Tick, "partition %d", want)
}

// rolloutPercentile returns the p-th percentile (0..100) of ds.
func rolloutPercentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(i-1, 0)]
}

// podRevisions records, per pod, when each revision label was first seen and when the pod was
// deleted (deletionTimestamp set or gone).
type podRevisions struct {
	mu      sync.Mutex
	seen    map[string]map[string]time.Time
	deleted map[string][]time.Time
}

func watchPodRevisions(t *testing.T, ns string) *podRevisions {
	t.Helper()
	w, err := framework.Clientset.CoreV1().Pods(ns).Watch(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	pr := &podRevisions{seen: map[string]map[string]time.Time{}, deleted: map[string][]time.Time{}}
	go func() {
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			now := time.Now()
			pr.mu.Lock()
			if ev.Type == watch.Deleted || !pod.DeletionTimestamp.IsZero() {
				pr.deleted[pod.Name] = append(pr.deleted[pod.Name], now)
			} else if rev := pod.Labels[appsv1.ControllerRevisionHashLabelKey]; rev != "" {
				if pr.seen[pod.Name] == nil {
					pr.seen[pod.Name] = map[string]time.Time{}
				}
				if _, ok := pr.seen[pod.Name][rev]; !ok {
					pr.seen[pod.Name][rev] = now
				}
			}
			pr.mu.Unlock()
		}
	}()
	return pr
}

// firstSeen returns when pod was first seen on revision rev.
func (p *podRevisions) firstSeen(pod, rev string) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	at, ok := p.seen[pod][rev]
	return at, ok
}

// deletedBetween reports whether pod was being deleted at some point in [from, to].
func (p *podRevisions) deletedBetween(pod string, from, to time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, at := range p.deleted[pod] {
		if !at.Before(from) && !at.After(to) {
			return true
		}
	}
	return false
}

// stsUpdateRevisionOf returns the StatefulSet's status.updateRevision.
func stsUpdateRevisionOf(t *testing.T, ns, name string) string {
	t.Helper()
	sts, err := framework.Clientset.AppsV1().StatefulSets(ns).Get(t.Context(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return sts.Status.UpdateRevision
}

// revisionsSince returns the revisions pod was first seen on at or after from, in time order.
func (p *podRevisions) revisionsSince(pod string, from time.Time) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var revs []string
	for rev, at := range p.seen[pod] {
		if !at.Before(from) {
			revs = append(revs, rev)
		}
	}
	slices.SortFunc(revs, func(a, b string) int { return p.seen[pod][a].Compare(p.seen[pod][b]) })
	return revs
}

// stsCurrentRevisionOf returns the StatefulSet's status.currentRevision.
func stsCurrentRevisionOf(t *testing.T, ns, name string) string {
	t.Helper()
	sts, err := framework.Clientset.AppsV1().StatefulSets(ns).Get(t.Context(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return sts.Status.CurrentRevision
}
