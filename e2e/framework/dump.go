//go:build e2e

package framework

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// What a failed test's namespace held, in the test's own output. CI shows only the filtered output of
// `make test-e2e` (the lines of *_test.go and of this file, see the Makefile's test-e2e), not the
// cluster: a failed wait says what it waited for, not what the operator did instead. Each line is its
// own t.Logf, so that the filter keeps every one.

// dumpLimit bounds each section (events, operator log lines): the end of the story matters most.
const dumpLimit = 40

// dumpOnFailure registers a cleanup that, if t failed, logs what ns holds: the operators' objects as
// `kubectl statefulops status` shows them, the pods with their annotations, the namespace's latest
// Events, and the in-cluster operators' latest log lines about ns. Cleanups registered after it (a
// test's own) run first, so the objects may show the state after them; the Events and logs keep
// what happened before.
func dumpOnFailure(t *testing.T, ns string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		section := func(title string, lines []string, err error) {
			t.Logf("DUMP %s: %s", ns, title)
			for _, l := range lines {
				t.Logf("DUMP   %s", l)
			}
			if err != nil {
				t.Logf("DUMP   (%v)", err)
			}
		}
		out, err := Plugin(ctx, "status", "-n", ns)
		section("kubectl statefulops status", nonEmptyLines(out), err)
		pods, err := dumpPods(ctx, ns)
		section("pods", pods, err)
		events, err := dumpEvents(ctx, ns)
		section("events (latest last)", events, err)
		for _, op := range []string{"singleton", "cluster", "lease", "rollout", "extended"} {
			lines, err := dumpOperatorLog(ctx, op, ns)
			if len(lines) > 0 || err != nil {
				section(op+"-operator log lines naming the namespace", lines, err)
			}
		}
	})
}

// dumpPods is one line per pod of ns: name, node, phase, deletion, and every annotation but kubectl's
// last applied configuration.
func dumpPods(ctx context.Context, ns string) ([]string, error) {
	pods, err := Clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var lines []string
	for _, p := range pods.Items {
		line := fmt.Sprintf("%s uid=%s node=%s phase=%s", p.Name, p.UID, p.Spec.NodeName, p.Status.Phase)
		if p.DeletionTimestamp != nil {
			line += " deleting since " + p.DeletionTimestamp.UTC().Format(time.RFC3339)
		}
		if len(p.Spec.SchedulingGates) > 0 {
			line += fmt.Sprintf(" gates=%v", p.Spec.SchedulingGates)
		}
		for _, k := range slices.Sorted(maps.Keys(p.Annotations)) {
			if k != corev1.LastAppliedConfigAnnotation {
				line += fmt.Sprintf(" %s=%s", k, p.Annotations[k])
			}
		}
		lines = append(lines, line)
	}
	return lines, nil
}

// dumpEvents is the latest dumpLimit Events of ns, oldest first.
func dumpEvents(ctx context.Context, ns string) ([]string, error) {
	events, err := Clientset.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	when := func(e corev1.Event) time.Time {
		for _, t := range []time.Time{e.LastTimestamp.Time, e.EventTime.Time, e.CreationTimestamp.Time} {
			if !t.IsZero() {
				return t
			}
		}
		return time.Time{}
	}
	items := events.Items
	sort.SliceStable(items, func(i, j int) bool { return when(items[i]).Before(when(items[j])) })
	var lines []string
	for _, e := range items[max(0, len(items)-dumpLimit):] {
		lines = append(lines, fmt.Sprintf("%s %s %s %s/%s (x%d): %s", when(e).UTC().Format("15:04:05"), e.Type, e.Reason,
			e.InvolvedObject.Kind, e.InvolvedObject.Name, max(e.Count, 1), e.Message))
	}
	return lines, nil
}

// dumpOperatorLog is the latest dumpLimit log lines of the in-cluster operator op (installed from
// deploy/) that name ns; nothing when it is not installed.
func dumpOperatorLog(ctx context.Context, op, ns string) ([]string, error) {
	system := op + "-operator-system"
	if _, err := Clientset.CoreV1().Namespaces().Get(ctx, system, metav1.GetOptions{}); err != nil {
		return nil, nil
	}
	out, err := Kubectl().Run(ctx, "logs", "-n", system, "deployment/"+op+"-operator-controller-manager", "--since=10m")
	if err != nil {
		return nil, err
	}
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, ns) {
			lines = append(lines, l)
		}
	}
	return lines[max(0, len(lines)-dumpLimit):], nil
}

func nonEmptyLines(s string) []string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	return lines
}
