//go:build e2e && bench

package e2e

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/statefulops/statefulops/e2e/benchfmt"
)

// TestBenchResources measures, for every operator at once on one local cluster, what it costs at rest:
//
//   - API writes per minute with resCRs CRs of its kind settled (each with a 1-replica workload on
//     kwok), Lease renewals aside: the operator's own client-side write requests
//     (rest_client_requests_total, every non-GET method) per 10 s window, minus the Lease writes it
//     made (seen on a Lease watch, placed in a window by the Lease's renewTime, which the writer sets)
//     and minus the TokenReviews/SubjectAccessReviews that the test's own scrape of its secure metrics
//     endpoint caused (the API server's counters read right before and after each scrape). The API
//     server's apiserver_request_total, diffed per (group, resource, subresource) over the same
//     minute, is the cross-check and is logged. Baseline: kube-controller-manager's writes in the same
//     windows for the plain StatefulSets of the run (the API server's writes to StatefulSets, pods,
//     ControllerRevisions and Events minus the operators' own non-Lease writes), per 100 StatefulSets.
//   - resident memory (VmRSS) with resUnrelatedPods unrelated pods and resUnrelatedConfig unrelated
//     ConfigMaps and as many Secrets, beside the same process before they existed (its CRs settled).
//
// It asserts behaviour only: every workload settled, every unrelated object created and deleted again,
// every operator still running. The figures are published by `make bench`, never asserted.
func TestBenchResources(t *testing.T) {
	start := time.Now()
	ops := []*resOperator{
		{family: "lease", name: "lease-operator"},
		{family: "rollout", name: "rollout-operator"},
		{family: "cluster", name: "cluster-operator"},
		{family: "extended", name: "extended-operator"},
	}
	for _, o := range ops {
		startLocalOperator(t, o.name)
		o.pid, o.metricsPort = resProcess(t, o.name)
		o.ns = newNamespace(t)
	}
	token := resMetricsToken(t, ops)
	fast := resFastClient(t)
	// Room for the workloads' pods: the local cluster's 3 kwok nodes take 110 pods each.
	scaleNodes(t, 2)

	// The workloads of every operator, created at once.
	var wg sync.WaitGroup
	errs := make([]error, len(ops))
	for i, o := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = resWorkloads[o.family](t.Context(), fast, o.ns)
		}()
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...), "creating the workloads")
	for _, o := range ops {
		resWaitSettled(t, o)
	}
	t.Logf("%d CRs per operator settled after %s", resCRs, time.Since(start).Round(time.Second))

	windows, rssEmpty := resMinuteAtRest(t, ops, token)

	// The unrelated objects: half in namespaces of their own, half in the operators' own namespaces,
	// beside their CRs.
	unrelatedNS := []string{newNamespace(t), newNamespace(t)}
	crNS := make([]string, 0, len(ops))
	for _, o := range ops {
		crNS = append(crNS, o.ns)
	}
	t.Cleanup(func() { resDeleteUnrelated(t, unrelatedNS, crNS) })
	created := time.Now()
	counts := resCreateUnrelated(t, fast, unrelatedNS, crNS)
	t.Logf("created %d unrelated pods, %d ConfigMaps, %d Secrets in %s (load: %s)", counts[0], counts[1], counts[2],
		time.Since(created).Round(time.Second), resLoad())
	resWaitRSSSteady(t, ops)
	rssFull := <-resSampleRSSDuring(t, ops, resRSSSamples*time.Second, time.Second)

	for _, o := range ops {
		require.True(t, resAlive(o.pid), "%s is still running", o.name)
		note := fmt.Sprintf("VmRSS of the local %s process (/proc/<pid>/status). With: %d samples 1 s apart, once RSS "+
			"stayed within 2%% for 5 s after %d unrelated pods (pause container, scheduling gate, so neither the scheduler "+
			"nor kwok touch them; 9 in 10 controlled by an owner object of their namespace as a ReplicaSet's pods are, "+
			"every 10th an orphan), %d ConfigMaps and %d Secrets (200 bytes of data each) were created, half in 2 "+
			"namespaces of their own and half in the 4 operators' CR namespaces beside their CRs (label bench=unrelated). "+
			"Baseline: the same process, same cluster, before they existed, with its %d CRs settled (%d samples 5 s apart "+
			"during the minute at rest). Load during the run: %s.",
			o.name, resRSSSamples, resUnrelatedPods, resUnrelatedConfig, resUnrelatedConfig, resCRs, len(rssEmpty[o.name]), resLoad())
		recordFigure(t, benchfmt.Figure{
			Operator: o.family, Name: "resident memory with 10k unrelated pods (and 10k unrelated ConfigMaps+Secrets)",
			Unit: "MiB", Where: "kwok",
			Samples: rssFull[o.name], Baseline: "same operator, cluster without the unrelated objects",
			BaselineSamples: rssEmpty[o.name], Targets: []benchfmt.Target{benchfmt.AtMost("ratio", 1.2)},
			Note: note,
		})
	}
	resRecordWrites(t, ops, windows)
	t.Logf("TestBenchResources took %s", time.Since(start).Round(time.Second))
}
