//go:build e2e && bench

package framework

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/statefulops/statefulops/e2e/benchfmt"
)

// The scale benches of issue 21 measure one operator with ScaleSmall of its objects, then with
// ScaleLarge (ScaleLarge − ScaleSmall more beside the first ones), each object with its small workload
// on kwok nodes. At each size: how fast newly created objects settle, the latency of one object's
// change while the others are at rest (ScaleSingles changes one after another), the same with 10 % of
// the objects changing at once, the operator's resident memory per object and its API writes at rest.
// The large size's figures are recorded beside the small one's of the same run; the target is p99 at
// ScaleLarge ≤ 2 × p99 at ScaleSmall and memory linear.
const (
	ScaleSmall, ScaleLarge = 100, 1000
	ScaleSingles           = 20
)

// ScaleResult is what one size of a scale bench measured.
type ScaleResult struct {
	Objects    int
	SettleRate float64   // objects settled per second after their creation
	Singles    []float64 // ms: one object's change while the others are at rest, one sample per change
	Tenth      []float64 // ms: 10 % of the objects changing at once, one sample per object
	RSSPerObj  float64   // MiB of resident memory per object, steady
	WritesMin  []float64 // the operator's API writes per minute at rest, Lease writes aside, per window
}

// ScaleSize is one size of a scale bench: the operator, its objects so far, and how to change them.
type ScaleSize struct {
	Op       *ResOperator
	Token    string  // ResMetricsToken's, for the writes at rest
	RSSEmpty float64 // MiB before any object (ScaleRSS)
	Seed     uint64
	// Create creates the objects of this size (their workloads already settled) and Settled reports
	// whether every one of them settled; the settle rate is their number over the time between.
	Create  func() int
	Settled func() bool
	// Total is how many objects exist once created (this size's and the earlier ones').
	Total int
	// Change changes the objects i (indices into the Total objects) at once and returns each one's
	// latency in ms, once every one of them is done (and at rest again).
	Change func(i []int) []float64
}

// Measure runs one size and logs its figures.
func (s ScaleSize) Measure(t *testing.T) ScaleResult {
	t.Helper()
	r := ScaleResult{Objects: s.Total}
	start := time.Now()
	created := s.Create()
	require.Eventually(t, s.Settled, 15*time.Minute, 100*time.Millisecond, "the %d new objects settle", created)
	r.SettleRate = float64(created) / time.Since(start).Seconds()
	ScaleWaitQueueEmpty(t, s.Op, s.Token)
	// "While the others are at rest" means the cluster too, not only the operator's queues: right after
	// the last object settles, kube-controller-manager and kwok are still writing the statuses of the
	// hundreds of workloads just created, and the first change used to wait behind that (the slowest
	// sample of 20 in every family that missed its target, 3-7 × the others). The same wait as before the
	// writes at rest: no API write for 10 s but Lease renewals, node heartbeats and the bench's scrapes.
	resWaitQuiet(t)
	rng := rand.New(rand.NewPCG(uint64(s.Total), s.Seed))
	// CPU profiles of the operator and the kube-apiserver over each kind of change, for the figures
	// that miss their targets (docs/performance.md).
	profiled := CPUProfilesUntil(t, fmt.Sprintf("%s-scale-%d-one-change", s.Op.Family, s.Total), s.Op.Profiled())
	for i := range ScaleSingles {
		began := time.Now()
		r.Singles = append(r.Singles, s.Change([]int{rng.IntN(s.Total)})...)
		t.Logf("%s, %d objects: one change %d began %s, took %.1f ms", s.Op.Name, s.Total, i+1, began.UTC().Format(time.RFC3339Nano), r.Singles[len(r.Singles)-1])
	}
	profiled()
	profiled = CPUProfilesUntil(t, fmt.Sprintf("%s-scale-%d-tenth-at-once", s.Op.Family, s.Total), s.Op.Profiled())
	r.Tenth = s.Change(rng.Perm(s.Total)[:s.Total/10])
	profiled()
	ops := []*ResOperator{s.Op}
	ResWaitRSSSteady(t, ops)
	r.RSSPerObj = (ScaleRSS(t, s.Op) - s.RSSEmpty) / float64(s.Total)
	windows, _ := ResMinuteAtRest(t, ops, s.Token)
	r.WritesMin = ResNonLeaseWritesPerMinute(windows, s.Op.Name)
	t.Logf("%s, %d objects: settle %.1f/s, one change p50 %.1f p99 %.1f ms, %d at once p50 %.1f p99 %.1f ms, %.1f KiB per object, writes at rest %v/min",
		s.Op.Name, s.Total, r.SettleRate, benchfmt.Percentile(r.Singles, 50), benchfmt.Percentile(r.Singles, 99), s.Total/10,
		benchfmt.Percentile(r.Tenth, 50), benchfmt.Percentile(r.Tenth, 99), r.RSSPerObj*1024, r.WritesMin)
	return r
}

// ScaleWaitQueueEmpty waits (at most 5 minutes) until the operator's work queues hold no item ready to
// be reconciled (its metrics' workqueue_depth; a RequeueAfter that is not due yet does not count) in 5
// scrapes in a row, 100 ms apart. The objects may look settled on the workload (their pods Ready) while
// their status writes are still queued; a change measured "while the others are at rest" must not wait
// behind them. (Reconciles in progress are not waited for: lease-operator renews 1,000 Leases every
// 30 s, so at rest some worker is often busy.)
func ScaleWaitQueueEmpty(t *testing.T, op *ResOperator, token string) {
	t.Helper()
	start, empty := time.Now(), 0
	for time.Since(start) < 5*time.Minute {
		text, err := ResScrapeOperator(t.Context(), op, token)
		require.NoError(t, err)
		if ResMetricSum(text, "workqueue_depth", nil) > 0 {
			empty = 0
		} else if empty++; empty == 5 {
			t.Logf("%s: work queues empty after %s", op.Name, time.Since(start).Round(100*time.Millisecond))
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: work queues still hold ready items after 5 minutes", op.Name)
}

// ScaleWaitNoTerminating waits (at most 15 minutes) until no namespace is being deleted: the pods of an
// earlier test's namespaces go through the same kwok controller and workload controllers as the
// bench's, and while hundreds of them drain they delay the bench's pods by seconds. Call it first.
func ScaleWaitNoTerminating(t *testing.T) {
	t.Helper()
	start := time.Now()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		list, err := Clientset.CoreV1().Namespaces().List(t.Context(), metav1.ListOptions{})
		require.NoError(c, err)
		var terminating []string
		for _, ns := range list.Items {
			if ns.Status.Phase == corev1.NamespaceTerminating {
				terminating = append(terminating, ns.Name)
			}
		}
		assert.Empty(c, terminating, "namespaces being deleted")
	}, 15*time.Minute, time.Second, "no namespace is being deleted")
	t.Logf("no namespace being deleted after %s", time.Since(start).Round(time.Second))
}

// ScaleTeardown deletes the bench's namespaces and waits (at most 10 minutes) until they are gone, while
// the operator still runs: its finalizers complete, and the next test of the package (with an operator
// of its own) does not start behind a thousand objects being torn down. Call it at the end of the test,
// after the figures are recorded.
func ScaleTeardown(t *testing.T, namespaces ...string) {
	t.Helper()
	start := time.Now()
	for _, ns := range namespaces {
		err := Clientset.CoreV1().Namespaces().Delete(t.Context(), ns, metav1.DeleteOptions{})
		if !apierrors.IsNotFound(err) {
			require.NoError(t, err)
		}
	}
	require.Eventually(t, func() bool {
		for _, ns := range namespaces {
			if _, err := Clientset.CoreV1().Namespaces().Get(t.Context(), ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false
			}
		}
		return true
	}, 10*time.Minute, time.Second, "the bench's namespaces are gone")
	t.Logf("the bench's %d namespaces deleted in %s", len(namespaces), time.Since(start).Round(time.Second))
}

// ScaleOperator returns the local operator process that StartLocalOperator started under name, and a
// token its secure metrics endpoint accepts.
func ScaleOperator(t *testing.T, family, name string) (*ResOperator, string) {
	t.Helper()
	pid, metricsPort := ResProcess(t, name)
	op := &ResOperator{Family: family, Name: name, PID: pid, MetricsPort: metricsPort, PprofPort: ResPprofPort(t, pid)}
	return op, ResMetricsToken(t, []*ResOperator{op})
}

// ScaleClient is a controller-runtime client without a client-side rate limit, so that a bench's
// creations and changes go as fast as the API server takes them: the figures are the operator's.
func ScaleClient(t *testing.T) client.WithWatch {
	t.Helper()
	cfg := rest.CopyConfig(RESTConfig)
	cfg.QPS = -1
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: Client.Scheme()})
	require.NoError(t, err)
	return c
}

// ResMetricSum sums the samples of one metric of a Prometheus text exposition (ResScrapeOperator's)
// whose labels include every pair of want (nil: all samples).
func ResMetricSum(text, name string, want map[string]string) float64 {
	sum := 0.0
	for _, sample := range resParseCounter(text, name) {
		matches := true
		for k, v := range want {
			matches = matches && sample.labels[k] == v
		}
		if matches {
			sum += sample.value
		}
	}
	return sum
}

// ScaleRSS is the operator's resident memory in MiB (the median of a second's samples).
func ScaleRSS(t *testing.T, op *ResOperator) float64 {
	t.Helper()
	samples := <-ResSampleRSSDuring(t, []*ResOperator{op}, time.Second, 100*time.Millisecond)
	require.NotEmpty(t, samples[op.Name], "%s is running", op.Name)
	return benchfmt.Percentile(samples[op.Name], 50)
}

// ScaleFigures names what a scale bench measured, for its five figures.
type ScaleFigures struct {
	Operator string // family, e.g. "lease"
	Noun     string // one object, e.g. "lock"
	Plural   string // e.g. "locks"
	Change   string // one change, e.g. "failover of one lock"
	Changes  string // several at once, e.g. "simultaneous failovers"
	// Notes of the figures: the change and its clock, how 10 % changed, how objects were created and
	// when they count as settled, what each object brings into the operator's caches. Invariant is
	// appended to the latency notes.
	ChangeNote, TenthNote, SettleNote, MemoryNote, Invariant string
}

// RecordScaleFigures records the large size's figures beside the small one's.
func RecordScaleFigures(t *testing.T, f ScaleFigures, small, large ScaleResult) {
	t.Helper()
	at := func(n int) string { return fmt.Sprintf("the same with %d %s, same run", n, f.Plural) }
	RecordFigure(t, benchfmt.Figure{
		Operator: f.Operator, Name: fmt.Sprintf("%s while the others are at rest, %d %s", f.Change, large.Objects, f.Plural),
		Unit: "ms", Where: "kwok", Samples: large.Singles, Baseline: at(small.Objects), BaselineSamples: small.Singles,
		Targets: []benchfmt.Target{benchfmt.AtMost("ratio99", 2)},
		Note: fmt.Sprintf("%d changes of %s drawn at random, one after another, the first once the API server has seen no write for 10 s "+
			"(Lease renewals, node heartbeats and the bench's scrapes aside) after the objects settled. %s %s", ScaleSingles, f.Plural, f.ChangeNote, f.Invariant),
	})
	RecordFigure(t, benchfmt.Figure{
		Operator: f.Operator, Name: fmt.Sprintf("%d %s (10 %% of %d %s)", large.Objects/10, f.Changes, large.Objects, f.Plural),
		Unit: "ms", Where: "kwok", Samples: large.Tenth,
		Baseline:        fmt.Sprintf("%d %s of %d %s, same run", small.Objects/10, f.Changes, small.Objects, f.Plural),
		BaselineSamples: small.Tenth,
		Targets:         []benchfmt.Target{benchfmt.AtMost("ratio99", 2)},
		Note:            fmt.Sprintf("10 %% of the %s, drawn at random, changed at once; one sample per %s, clocked as above. %s %s", f.Plural, f.Noun, f.TenthNote, f.Invariant),
	})
	RecordFigure(t, benchfmt.Figure{
		Operator: f.Operator, Name: fmt.Sprintf("%s settled per second after their creation, %d created beside %d settled", f.Plural, large.Objects-small.Objects, small.Objects),
		Unit: f.Plural + "/s", Where: "kwok", Samples: []float64{large.SettleRate},
		Baseline: fmt.Sprintf("%d %s created on their own, same run", small.Objects, f.Plural), BaselineSamples: []float64{small.SettleRate},
		Note: f.SettleNote + " One sample per size; higher is better.",
	})
	RecordFigure(t, benchfmt.Figure{
		Operator: f.Operator, Name: fmt.Sprintf("resident memory per %s, %d %s", f.Noun, large.Objects, f.Plural),
		Unit: "KiB", Where: "kwok", Samples: []float64{large.RSSPerObj * 1024},
		Baseline: at(small.Objects), BaselineSamples: []float64{small.RSSPerObj * 1024},
		Note: fmt.Sprintf("(VmRSS once steady − VmRSS before any %s) / %s. %s Memory is linear where the ratio is near 1 or below "+
			"(the fixed part of the caches spreads over more objects).", f.Noun, f.Plural, f.MemoryNote),
	})
	RecordFigure(t, benchfmt.Figure{
		Operator: f.Operator, Name: fmt.Sprintf("API writes at rest, %d %s settled (Lease writes aside)", large.Objects, f.Plural),
		Unit: "writes/min", Where: "kwok", Samples: large.WritesMin,
		Baseline: at(small.Objects), BaselineSamples: small.WritesMin,
		Targets: []benchfmt.Target{benchfmt.AtMost("max", 0)},
		Note: "Counted as in the writes-at-rest rows of the 100-CR resource run (the operator's client-side write requests minus its " +
			"Lease writes, seen on a Lease watch).",
	})
}
