package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/statefulops/statefulops/e2e/operators"
)

// demoBudget is how long `make run` waits for the demo to settle: every demo custom resource
// Ready=True and no demo pod Pending.
const demoBudget = 4 * time.Minute

// object is the part of a Kubernetes object verify reads from `kubectl get -o json`.
type object struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Status struct {
		Phase      string `json:"phase"`
		Conditions []struct {
			Type    string `json:"type"`
			Status  string `json:"status"`
			Reason  string `json:"reason"`
			Message string `json:"message"`
		} `json:"conditions"`
		ContainerStatuses []struct {
			Name         string `json:"name"`
			RestartCount int    `json:"restartCount"`
		} `json:"containerStatuses"`
	} `json:"status"`
}

func (o object) ref() string {
	return strings.ToLower(o.Kind) + "/" + o.Metadata.Name + " -n " + o.Metadata.Namespace
}

func (o object) condition(t string) string {
	for _, c := range o.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

// conditions renders every condition in one line each: type=status reason: message.
func (o object) conditions() string {
	var b strings.Builder
	for _, c := range o.Status.Conditions {
		fmt.Fprintf(&b, "      %s=%s %s: %s\n", c.Type, c.Status, c.Reason, c.Message)
	}
	if b.Len() == 0 {
		b.WriteString("      (no conditions)\n")
	}
	return b.String()
}

func list(ctx context.Context, k operators.Kubectl, args ...string) ([]object, error) {
	out, err := k.Run(ctx, append([]string{"get", "-o", "json"}, args...)...)
	if err != nil {
		return nil, err
	}
	var l struct {
		Items []object `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		return nil, fmt.Errorf("kubectl get %s: %w", strings.Join(args, " "), err)
	}
	return l.Items, nil
}

// restarts returns the restart count of every container of the pods of the namespaces, by
// "<namespace>/<pod>/<container>".
func restarts(ctx context.Context, k operators.Kubectl, namespaces []string) (map[string]int, error) {
	out := map[string]int{}
	for _, ns := range namespaces {
		pods, err := list(ctx, k, "pods", "-n", ns)
		if err != nil {
			return nil, err
		}
		for _, pod := range pods {
			for _, c := range pod.Status.ContainerStatuses {
				out[ns+"/"+pod.Metadata.Name+"/"+c.Name] = c.RestartCount
			}
		}
	}
	return out, nil
}

// verifyDemo proves the demo `make run` leaves: it waits (demoBudget) until every custom resource of
// the project (the category "statefulops") is Ready=True and no pod of their namespaces or of
// extraNamespaces is Pending, and checks that no container of an operator's namespace restarted
// since restartsBefore (taken before the install). It fails naming each resource and pod that is not
// so, with its conditions and last Events, or the restarted container's last log lines.
func verifyDemo(ctx context.Context, k operators.Kubectl, operatorNamespaces, extraNamespaces []string, restartsBefore map[string]int) error {
	deadline := time.Now().Add(demoBudget)
	crs, err := list(ctx, k, "statefulops", "-A")
	if err != nil {
		return err
	}
	if len(crs) == 0 {
		return fmt.Errorf("no demo custom resource found (kubectl get statefulops -A)")
	}
	namespaces := slices.Clone(extraNamespaces)
	for _, cr := range crs {
		if !slices.Contains(namespaces, cr.Metadata.Namespace) {
			namespaces = append(namespaces, cr.Metadata.Namespace)
		}
		// kubectl wait returns as soon as the condition holds; what is left of the budget bounds each.
		left := max(time.Until(deadline), time.Second).Round(time.Second)
		_, _ = k.Run(ctx, "wait", "--for=condition=Ready", "--timeout="+left.String(), "-n", cr.Metadata.Namespace,
			strings.ToLower(cr.Kind)+"/"+cr.Metadata.Name)
	}
	var pending []object
	for {
		pending = nil
		for _, ns := range namespaces {
			pods, err := list(ctx, k, "pods", "-n", ns, "--field-selector=status.phase=Pending")
			if err != nil {
				return err
			}
			pending = append(pending, pods...)
		}
		if len(pending) == 0 || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}

	var problems []string
	if crs, err = list(ctx, k, "statefulops", "-A"); err != nil {
		return err
	}
	for _, cr := range crs {
		if cr.condition("Ready") != "True" {
			problems = append(problems, fmt.Sprintf("  %s is not Ready:\n%s%s", cr.ref(), cr.conditions(), events(ctx, k, cr)))
		}
	}
	for _, pod := range pending {
		problems = append(problems, fmt.Sprintf("  %s is Pending:\n%s%s", pod.ref(), pod.conditions(), events(ctx, k, pod)))
	}
	after, err := restarts(ctx, k, operatorNamespaces)
	if err != nil {
		return err
	}
	for _, key := range slices.Sorted(maps.Keys(after)) {
		if n := after[key] - restartsBefore[key]; n > 0 {
			ns, rest, _ := strings.Cut(key, "/")
			pod, container, _ := strings.Cut(rest, "/")
			prev, _ := k.Run(ctx, "logs", "--previous", "--tail=5", "-n", ns, pod, "-c", container)
			problems = append(problems, fmt.Sprintf("  pod/%s -n %s: container %s restarted during the install (%d more restarts); its last lines before:\n%s",
				pod, ns, container, n, indent(prev)))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("the demo is not healthy after %s:\n%s", demoBudget, strings.Join(problems, ""))
	}
	fmt.Printf("run: every demo custom resource is Ready (%d), no demo pod is Pending, no operator container restarted\n", len(crs))
	return nil
}

// events returns the last Events of the object, indented.
func events(ctx context.Context, k operators.Kubectl, o object) string {
	out, err := k.Run(ctx, "get", "events", "-n", o.Metadata.Namespace, "--sort-by=.lastTimestamp",
		"--field-selector=involvedObject.kind="+o.Kind+",involvedObject.name="+o.Metadata.Name,
		"-o=custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message", "--no-headers")
	if err != nil {
		return "      (events: " + err.Error() + ")\n"
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) == 1 && lines[0] == "" {
		return "      (no Events)\n"
	}
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return indent(strings.Join(lines, "\n"))
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	return "      " + strings.ReplaceAll(s, "\n", "\n      ") + "\n"
}
