//go:build e2e && bench

package platform

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/statefulops/statefulops/e2e/benchfmt"
	"github.com/statefulops/statefulops/e2e/framework"
)

// TestBenchResources measures, for every operator at once on one local cluster, what it costs at rest:
//
//   - API writes per minute with framework.ResCRs CRs of its kind settled (each with a 1-replica workload on
//     kwok), Lease renewals aside: the operator's own client-side write requests
//     (rest_client_requests_total, every non-GET method) per 10 s window, minus the Lease writes it
//     made (seen on a Lease watch, placed in a window by the Lease's renewTime, which the writer sets)
//     and minus the TokenReviews/SubjectAccessReviews that the test's own scrape of its secure metrics
//     endpoint caused (the API server's counters read right before and after each scrape). The API
//     server's apiserver_request_total, diffed per (group, resource, subresource) over the same
//     minute, is the cross-check and is logged. Baseline: kube-controller-manager's writes in the same
//     windows for the plain StatefulSets of the run (the API server's writes to StatefulSets, pods,
//     ControllerRevisions and Events minus the operators' own non-Lease writes), per 100 StatefulSets.
//   - resident memory (VmRSS) with framework.ResUnrelatedPods unrelated pods and framework.ResUnrelatedConfig unrelated
//     ConfigMaps and as many Secrets, beside the same process before they existed (its CRs settled).
//
// It asserts behaviour only: every workload settled, every unrelated object created and deleted again,
// every operator still running. The figures are published by `make bench`, never asserted.
func TestBenchResources(t *testing.T) {
	start := time.Now()
	ops := []*framework.ResOperator{
		{Family: "lease", Name: "lease-operator"},
		{Family: "rollout", Name: "rollout-operator"},
		{Family: "cluster", Name: "cluster-operator"},
		{Family: "extended", Name: "extended-operator"},
	}
	for _, o := range ops {
		framework.StartLocalOperator(t, o.Name)
		o.PID, o.MetricsPort = framework.ResProcess(t, o.Name)
		o.Namespace = framework.NewNamespace(t)
	}
	token := framework.ResMetricsToken(t, ops)
	fast := framework.ResFastClient(t)
	// Room for the workloads' pods: the local cluster's 3 kwok nodes take 110 pods each.
	framework.ScaleNodes(t, 2)

	// The workloads of every operator, created at once.
	var wg sync.WaitGroup
	errs := make([]error, len(ops))
	for i, o := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = framework.ResWorkloads[o.Family](t.Context(), fast, o.Namespace)
		}()
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...), "creating the workloads")
	for _, o := range ops {
		framework.ResWaitSettled(t, o)
	}
	t.Logf("%d CRs per operator settled after %s", framework.ResCRs, time.Since(start).Round(time.Second))

	windows, rssEmpty := framework.ResMinuteAtRest(t, ops, token)

	// The unrelated objects: half in namespaces of their own, half in the operators' own namespaces,
	// beside their CRs.
	unrelatedNS := []string{framework.NewNamespace(t), framework.NewNamespace(t)}
	crNS := make([]string, 0, len(ops))
	for _, o := range ops {
		crNS = append(crNS, o.Namespace)
	}
	t.Cleanup(func() { framework.ResDeleteUnrelated(t, unrelatedNS, crNS) })
	created := time.Now()
	counts := framework.ResCreateUnrelated(t, fast, unrelatedNS, crNS)
	t.Logf("created %d unrelated pods, %d ConfigMaps, %d Secrets in %s (load: %s)", counts[0], counts[1], counts[2],
		time.Since(created).Round(time.Second), framework.ResLoad())
	framework.ResWaitRSSSteady(t, ops)
	rssFull := <-framework.ResSampleRSSDuring(t, ops, framework.ResRSSSamples*time.Second, time.Second)

	for _, o := range ops {
		require.True(t, framework.ResAlive(o.PID), "%s is still running", o.Name)
		note := fmt.Sprintf("VmRSS of the local %s process (/proc/<pid>/status). With: %d samples 1 s apart, once RSS "+
			"stayed within 2%% for 5 s after %d unrelated pods (pause container, scheduling gate, so neither the scheduler "+
			"nor kwok touch them; 9 in 10 controlled by an owner object of their namespace as a ReplicaSet's pods are, "+
			"every 10th an orphan), %d ConfigMaps and %d Secrets (200 bytes of data each) were created, half in 2 "+
			"namespaces of their own and half in the 4 operators' CR namespaces beside their CRs (label bench=unrelated). "+
			"Baseline: the same process, same cluster, before they existed, with its %d CRs settled (%d samples 5 s apart "+
			"during the minute at rest). Load during the run: %s.",
			o.Name, framework.ResRSSSamples, framework.ResUnrelatedPods, framework.ResUnrelatedConfig, framework.ResUnrelatedConfig, framework.ResCRs, len(rssEmpty[o.Name]), framework.ResLoad())
		framework.RecordFigure(t, benchfmt.Figure{
			Operator: o.Family, Name: "resident memory with 10k unrelated pods (and 10k unrelated ConfigMaps+Secrets)",
			Unit: "MiB", Where: "kwok",
			Samples: rssFull[o.Name], Baseline: "same operator, cluster without the unrelated objects",
			BaselineSamples: rssEmpty[o.Name], Targets: []benchfmt.Target{benchfmt.AtMost("ratio", 1.2)},
			Note: note,
		})
	}
	framework.ResRecordWrites(t, ops, windows)
	t.Logf("TestBenchResources took %s", time.Since(start).Round(time.Second))
}
