//go:build e2e

package framework

import (
	"context"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/statefulops/statefulops/e2e/benchfmt"
	"github.com/statefulops/statefulops/e2e/localcluster"
	"github.com/statefulops/statefulops/e2e/operators"
)

// The TestChaos* tests are `make chaos`: randomized fault campaigns, one per operator, each driving
// the operator's own operations (handovers, failovers, rollout steps, scale events, config changes)
// while a fault scheduler kills the operator, restarts the API server, flips kwok nodes NotReady,
// force-deletes pods and injects API errors, and the invariant checkers of the operator's e2e tests
// count violations. Each campaign logs one line `chaos: <op>: N operations, K faults injected,
// 0 violations`, appends its benchfmt.ChaosRun to benchfmt.ChaosFile() and fails on any violation.
//
// CHAOS_SEED replays a run (every random choice comes from a math/rand source derived from it and the
// campaign's name; the interleaving with the cluster is of course not replayed); unset, the seed is
// the time and is printed before anything else. CHAOS_SCALE multiplies every campaign's size; unset,
// it is 0.3, the short campaign `make test` runs (a few operations per operator under most fault
// kinds, about 3.5 minutes for all five together); `make chaos` uses 5.

// chaosSeedOnce picks the run's seed once and prints it first, so a failure can be replayed.
var chaosSeedOnce = sync.OnceValue(func() int64 {
	seed := time.Now().UnixNano()
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			panic(fmt.Sprintf("CHAOS_SEED=%q is not an integer: %v", s, err))
		}
		seed = v
	}
	fmt.Fprintf(os.Stderr, "chaos: seed %d (replay with CHAOS_SEED=%d)\n", seed, seed)
	return seed
})

// shortChaosScale is the scale of the short campaign that `make test` runs (CHAOS_SCALE unset).
const shortChaosScale = 0.3

// chaosScale is CHAOS_SCALE, shortChaosScale when unset.
func chaosScale(t *testing.T) float64 {
	s := os.Getenv("CHAOS_SCALE")
	if s == "" {
		return shortChaosScale
	}
	v, err := strconv.ParseFloat(s, 64)
	require.NoError(t, err, "CHAOS_SCALE")
	require.Positive(t, v, "CHAOS_SCALE")
	return v
}

// ChaosLiveness bounds a campaign's waits (a roll, a workload getting Ready): faults go on meanwhile,
// the operator is down for seconds at a time and the machine runs twelve namespaces at once, so this
// is a liveness bound, not a measurement.
const ChaosLiveness = 10 * time.Minute

// Campaign is one running chaos campaign: its random sources, its counters and its record.
type Campaign struct {
	t     *testing.T
	mu    sync.Mutex
	run   benchfmt.ChaosRun
	start time.Time
	// tallies are the checker's figures beside its count, such as what it left out and why (Tally).
	tallies map[string]int
	// stop ends the fault scheduler's goroutines (see schedule); wg waits for them.
	stop chan struct{}
	wg   sync.WaitGroup
}

// NewCampaign starts a campaign for operator and logs its seed first.
func NewCampaign(t *testing.T, operator, what, invariant string) *Campaign {
	t.Helper()
	seed := chaosSeedOnce()
	c := &Campaign{t: t, start: time.Now(), stop: make(chan struct{}), run: benchfmt.ChaosRun{
		Operator: operator, Campaign: what, Seed: seed, Scale: chaosScale(t), Invariant: invariant,
		FaultsByKind: map[string]int{},
	}}
	// go test runs a suite in its own directory: the replay command names it, to be run from e2e/.
	suite := "."
	if wd, err := os.Getwd(); err == nil {
		suite = "./" + filepath.Base(wd) + "/..."
	}
	t.Logf("chaos: %s: seed %d, scale %g (replay: CHAOS_SEED=%d CHAOS_SCALE=%g go test -tags e2e -run '^%s$' %s)",
		operator, seed, c.run.Scale, seed, c.run.Scale, t.Name(), suite)
	t.Cleanup(c.Halt)
	return c
}

// Rand returns a random source of its own for one stream of choices (the driver, each fault kind),
// so a replay makes the same choices in each stream however the goroutines interleave.
func (c *Campaign) Rand(stream string) *rand.Rand {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%s", c.run.Operator, stream)
	return rand.New(rand.NewSource(c.run.Seed ^ int64(h.Sum64())))
}

// N scales a base count by CHAOS_SCALE (at least 1).
func (c *Campaign) N(base int) int { return max(1, int(math.Round(float64(base)*c.run.Scale))) }

// TimeUp reports whether CHAOS_DEADLINE (an RFC 3339 time) has passed: a long campaign then starts
// no new operation and finishes with what it did, so its figures are recorded in a fixed time.
func (c *Campaign) TimeUp() bool {
	s := os.Getenv("CHAOS_DEADLINE")
	if s == "" {
		return false
	}
	deadline, err := time.Parse(time.RFC3339, s)
	require.NoError(c.t, err, "CHAOS_DEADLINE")
	return time.Now().After(deadline)
}

// ParallelRounds runs about total operations as rounds of parallel subtests, each with a namespace
// of its own: run does n operations with its own random source and returns the violations its
// checkers counted. The API server restarts between two rounds (the checkers' watches end with it,
// so each round attaches new ones); CHAOS_SCALE adds parallel namespaces (up to 12) and rounds. The
// namespaces run as parallel subtests, so go test's -parallel (GOMAXPROCS by default) caps how many run
// at once: `make chaos` passes -parallel 12.
func (c *Campaign) ParallelRounds(t *testing.T, total int, name string, run func(t *testing.T, c *Campaign, rng *rand.Rand, n int) int) int {
	parallel := min(12, 1+int(c.run.Scale+4)/5)
	rounds := 1 + c.APIRestarts()
	per := max(1, total/(parallel*rounds))
	var mu sync.Mutex
	violations := 0
	for round := range rounds {
		if c.TimeUp() {
			break
		}
		if round > 0 {
			c.RestartAPIServer()
		}
		t.Run(fmt.Sprintf("round-%d", round), func(t *testing.T) {
			for i := range parallel {
				rng := c.Rand(fmt.Sprintf("driver/%d/%d", round, i))
				t.Run(fmt.Sprintf("%s-%d", name, i), func(t *testing.T) {
					t.Parallel()
					v := run(t, c, rng, per)
					mu.Lock()
					violations += v
					mu.Unlock()
				})
			}
		})
	}
	return violations
}

// APIRestarts is how many times a campaign restarts the API server: once in a short campaign, once
// per 10 of CHAOS_SCALE in a longer one (each restart takes the whole cluster about half a minute).
func (c *Campaign) APIRestarts() int { return max(1, int(c.run.Scale/10)) }

// Op counts operations.
func (c *Campaign) Op(k int) {
	c.mu.Lock()
	before := c.run.Operations
	c.run.Operations += k
	now, faults := c.run.Operations, c.run.Faults
	c.mu.Unlock()
	if now/25 != before/25 { // progress, for a long campaign's log
		c.t.Logf("chaos: %s: %d operations, %d faults so far (%s)", c.run.Operator, now, faults, time.Since(c.start).Round(time.Second))
	}
}

// operations returns the operations counted so far.
func (c *Campaign) operations() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.run.Operations
}

// Fault counts one injected fault of a kind and logs it.
func (c *Campaign) Fault(kind, format string, args ...any) {
	c.mu.Lock()
	c.run.Faults++
	c.run.FaultsByKind[kind]++
	n := c.run.Faults
	c.mu.Unlock()
	c.t.Logf("chaos fault %d [%s] %s", n, kind, fmt.Sprintf(format, args...))
}

// Tally adds n to one of the checker's figures, named by what (e.g. what it left out of its count,
// and why); Finish prints the totals beside the summary line, so that no exclusion is silent.
func (c *Campaign) Tally(what string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tallies == nil {
		c.tallies = map[string]int{}
	}
	c.tallies[what] += n
}

// faults adds k faults of a kind counted elsewhere (the API error proxy counts its own).
func (c *Campaign) faults(kind string, k int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.run.Faults += k
	c.run.FaultsByKind[kind] += k
}

// Schedule runs fault in a goroutine of its own at random moments until halt: it waits a random
// duration in [minGap, maxGap) drawn from the kind's own source, then injects the fault. An error is
// logged and ends this kind (never the test: a fault may fail while another one takes the API away).
func (c *Campaign) Schedule(kind string, minGap, maxGap time.Duration, fault func(ctx context.Context, rng *rand.Rand) error) {
	rng := c.Rand("fault/" + kind)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for {
			gap := minGap + time.Duration(rng.Int63n(int64(maxGap-minGap)+1))
			select {
			case <-c.stop:
				return
			case <-time.After(gap):
			}
			ctx, cancel := context.WithCancel(context.WithoutCancel(c.t.Context()))
			go func() {
				select {
				case <-c.stop:
				case <-ctx.Done():
				}
				cancel()
			}()
			err := fault(ctx, rng)
			cancel()
			if err != nil && ctx.Err() == nil {
				c.t.Logf("chaos fault [%s] failed, this kind stops: %v", kind, err)
				return
			}
		}
	}()
}

// Halt stops the fault scheduler and waits for its goroutines (each restores what its fault broke).
func (c *Campaign) Halt() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	c.wg.Wait()
}

// Finish stops the faults, logs the summary line, appends the record and fails on any violation.
func (c *Campaign) Finish(violations int) {
	c.t.Helper()
	c.Halt()
	c.mu.Lock()
	c.run.Violations = violations
	c.run.Seconds = time.Since(c.start).Seconds()
	run, tallies := c.run, maps.Clone(c.tallies)
	c.mu.Unlock()
	c.t.Log(run.Summary())
	c.t.Logf("chaos: %s: faults by kind %v", run.Operator, run.FaultsByKind)
	for _, what := range slices.Sorted(maps.Keys(tallies)) {
		c.t.Logf("chaos: %s: %d %s", run.Operator, tallies[what], what)
	}
	assert.NoError(c.t, benchfmt.Append(benchfmt.ChaosFile(), run))
	assert.Zero(c.t, violations, "chaos: %s: invariant violations (%s); replay with CHAOS_SEED=%d CHAOS_SCALE=%g", run.Operator, run.Invariant, run.Seed, run.Scale)
}

// Faults shared by the campaigns.

// KillAndRestart is the operator-kill fault: SIGKILL, a random pause, then a restart that waits until
// the new process is ready (which includes winning its leader election).
func (c *Campaign) KillAndRestart(op *chaosOperator) func(ctx context.Context, rng *rand.Rand) error {
	return func(ctx context.Context, rng *rand.Rand) error {
		if err := op.kill(ctx); err != nil {
			return err
		}
		pause := time.Duration(rng.Intn(1500)) * time.Millisecond
		c.Fault("operator-kill", "%s SIGKILLed, restarted after %s", op.name, pause)
		select {
		case <-time.After(pause):
		case <-ctx.Done():
		}
		return op.start(context.WithoutCancel(ctx))
	}
}

// UpgradeAndRestart is the operator-upgrade fault: the process is stopped as a Deployment rollout
// stops it (SIGTERM: it finishes its reconciles and releases its leader-election Lease) and the other
// release's binary is started in its place, this release's and the next one's (`make images-next`
// builds it, stamped NextVersion) in turn, so a campaign runs versions N and N+1 against the same
// objects mid-operation. The restart waits until the new process leads and has logged its version.
func (c *Campaign) UpgradeAndRestart(op *chaosOperator) func(ctx context.Context, rng *rand.Rand) error {
	return func(ctx context.Context, _ *rand.Rand) error {
		op.mu.Lock()
		next, version := nextBinDir(), NextVersion()
		if op.binDir != "" {
			next, version = "", CurrentVersion()
		}
		err := operators.Stop(ctx, op.stateDir, 15*time.Second, op.name)
		op.binDir = next
		op.mu.Unlock()
		if err != nil {
			return err
		}
		c.Fault("operator-upgrade", "%s stopped (SIGTERM) and started as %s", op.name, version)
		if err := op.start(context.WithoutCancel(ctx)); err != nil {
			return err
		}
		if !op.loggedVersion(version) {
			return fmt.Errorf("%s restarted, but its log does not show version %s at its start", op.name, version)
		}
		return nil
	}
}

// nextBinDir holds the binaries of the next release: $STATEFULOPS_BIN_NEXT, else the sibling of
// $STATEFULOPS_BIN named after NextVersion (the Makefile's layout).
func nextBinDir() string {
	if dir := os.Getenv("STATEFULOPS_BIN_NEXT"); dir != "" {
		return dir
	}
	return filepath.Join(filepath.Dir(os.Getenv("STATEFULOPS_BIN")), NextVersion())
}

// FlipNode is the node fault: a random kwok node goes NotReady (kwok stops heartbeating it and
// handling its pods), stays so for a random time and is always made Ready again.
func (c *Campaign) FlipNode(hold time.Duration) func(ctx context.Context, rng *rand.Rand) error {
	return func(ctx context.Context, rng *rand.Rand) error {
		node := localcluster.NodeName(rng.Intn(localcluster.DefaultNodes))
		restore := func() error {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
			defer cancel()
			return localcluster.SetNodeReady(rctx, Clientset, node, true)
		}
		c.Fault("node-notready", "node %s NotReady for %s", node, hold)
		if err := localcluster.SetNodeReady(ctx, Clientset, node, false); err != nil && ctx.Err() == nil {
			return fmt.Errorf("node %s NotReady: %w", node, restoreErr(err, restore()))
		}
		select {
		case <-time.After(hold):
		case <-ctx.Done():
		}
		return restore()
	}
}

func restoreErr(err, restore error) error {
	if restore != nil {
		return fmt.Errorf("%w (and restoring: %v)", err, restore)
	}
	return err
}

// ForceDeletePod is the force-delete fault: a random pod of the namespace matching selector is deleted
// with grace period 0, as `kubectl delete --force` does; deleted, when not nil, is told which.
func (c *Campaign) ForceDeletePod(ns, selector string, deleted func(*corev1.Pod)) func(ctx context.Context, rng *rand.Rand) error {
	return func(ctx context.Context, rng *rand.Rand) error {
		pods, err := Clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		// The API may be away (another fault) or no pod there yet: try again next time, but say so, so
		// that a fault that never fires shows in the log.
		if err != nil {
			c.t.Logf("chaos: pod-force-delete: listing pods (selector %q, namespace %q): %v", selector, ns, err)
			return nil
		}
		if len(pods.Items) == 0 {
			c.t.Logf("chaos: pod-force-delete: no pod matches selector %q in namespace %q", selector, ns)
			return nil
		}
		pod := pods.Items[rng.Intn(len(pods.Items))]
		// The pod's own namespace: ns may be all namespaces.
		err = Clientset.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0),
			Preconditions: &metav1.Preconditions{UID: &pod.UID}})
		if err != nil {
			c.t.Logf("chaos: pod-force-delete: %s/%s: %v", pod.Namespace, pod.Name, err)
			return nil
		}
		c.Fault("pod-force-delete", "pod %s/%s force-deleted", pod.Namespace, pod.Name)
		if deleted != nil {
			deleted(&pod)
		}
		return nil
	}
}

// RestartAPIServer is the API-server fault; it is run by the campaign's driver between operations
// (the checkers' watches end with the API server, so the driver re-attaches them afterwards) and
// needs the local cluster this run started.
func (c *Campaign) RestartAPIServer() bool {
	c.t.Helper()
	if RealNode.Cluster == nil {
		c.t.Logf("chaos: no local cluster (E2E_KUBECONFIG): the API-server restart fault is not injected")
		return false
	}
	ctx, cancel := context.WithTimeout(c.t.Context(), 6*time.Minute)
	defer cancel()
	down, err := RealNode.Cluster.RestartAPIServer(ctx)
	require.NoError(c.t, err, "restarting the API server")
	c.Fault("apiserver-restart", "kube-apiserver SIGKILLed and restarted: unavailable for %s; cluster healthy again", down.Round(time.Millisecond))
	afterAPIRestart.Lock()
	ensure := slices.Clone(afterAPIRestart.funcs[c.t.Name()])
	afterAPIRestart.Unlock()
	for _, f := range ensure {
		require.NoError(c.t, f(ctx), "restarting a process that exited while the API server was away")
	}
	return true
}

// afterAPIRestart holds, per test, what restarts the test's processes that exit while the API
// server is away (operators lose their leader election and exit, by design).
var afterAPIRestart = struct {
	sync.Mutex
	funcs map[string][]func(context.Context) error
}{funcs: map[string][]func(context.Context) error{}}

func registerAfterAPIRestart(t *testing.T, f func(context.Context) error) {
	afterAPIRestart.Lock()
	defer afterAPIRestart.Unlock()
	afterAPIRestart.funcs[t.Name()] = append(afterAPIRestart.funcs[t.Name()], f)
}
