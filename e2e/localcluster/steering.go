package localcluster

import (
	"context"
	"fmt"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/statefulops/statefulops/e2e/realnode"
)

// RealNodeNamespaces are the namespaces whose pods the local cluster runs on its real node: the
// operators' namespaces of deploy/*.yaml, so that `kubectl apply -f deploy/X.yaml` runs the operator
// (and singleton-operator's webhook server) as real containers. The one list of them.
var RealNodeNamespaces = []string{
	"singleton-operator-system",
	"cluster-operator-system",
	"lease-operator-system",
	"rollout-operator-system",
	"extended-operator-system",
}

// realNodePolicy names the MutatingAdmissionPolicy and its binding that steer RealNodeNamespaces.
const realNodePolicy = "statefulops-real-node"

// Steering is part of the cluster, not of an install: a MutatingAdmissionPolicy bound to the
// namespaces by NAME (the kubernetes.io/metadata.name label the API server sets on every namespace)
// gives each pod created there the real node's nodeSelector and the toleration of its taint. A
// namespace deleted and recreated by `kubectl delete -f deploy/X.yaml; kubectl apply -f deploy/X.yaml`
// is therefore steered again, with nothing added to it.
//
// Why not the PodNodeSelector admission plugin's configuration file (which also maps namespaces by
// name): it sets the node selector only. The toleration of the real node's NoSchedule taint would
// have to come from PodTolerationRestriction, whose file has one cluster-wide default (every pod
// of every namespace would tolerate the real node) or per-namespace annotations again, which are
// what a recreated namespace loses. The policy does both per namespace, and is created and removed
// with the real node through the API rather than through API server flags.
func realNodeSteering() (*admissionv1.MutatingAdmissionPolicy, *admissionv1.MutatingAdmissionPolicyBinding) {
	policy := &admissionv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: realNodePolicy},
		Spec: admissionv1.MutatingAdmissionPolicySpec{
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create},
					Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
				},
			}}},
			// A pod must not land on a kwok node unnoticed because the policy could not run.
			FailurePolicy:      ptr.To(admissionv1.Fail),
			ReinvocationPolicy: admissionv1.NeverReinvocationPolicy,
			Variables: []admissionv1.Variable{
				{Name: "key", Expression: fmt.Sprintf("%q", realnode.LabelKey)},
				{Name: "value", Expression: fmt.Sprintf("%q", realnode.LabelValue)},
				{Name: "taint", Expression: fmt.Sprintf("%q", realnode.TaintKey)},
			},
			// JSON patches: tolerations is an atomic list, which an apply configuration would replace
			// (dropping the pod's own tolerations) instead of extending.
			Mutations: []admissionv1.Mutation{
				{PatchType: admissionv1.PatchTypeJSONPatch, JSONPatch: &admissionv1.JSONPatch{Expression: `
has(object.spec.nodeSelector) ?
  [JSONPatch{op: "add", path: "/spec/nodeSelector/" + jsonpatch.escapeKey(variables.key), value: variables.value}] :
  [JSONPatch{op: "add", path: "/spec/nodeSelector", value: {variables.key: variables.value}}]`}},
				{PatchType: admissionv1.PatchTypeJSONPatch, JSONPatch: &admissionv1.JSONPatch{Expression: `
!has(object.spec.tolerations) ?
  [JSONPatch{op: "add", path: "/spec/tolerations", value: [Object.spec.tolerations{key: variables.taint, operator: "Equal", value: variables.value, effect: "NoSchedule"}]}] :
object.spec.tolerations.exists(t, has(t.key) && t.key == variables.taint) ? [] :
  [JSONPatch{op: "add", path: "/spec/tolerations/-", value: Object.spec.tolerations{key: variables.taint, operator: "Equal", value: variables.value, effect: "NoSchedule"}}]`}},
			},
		},
	}
	binding := &admissionv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: realNodePolicy},
		Spec: admissionv1.MutatingAdmissionPolicyBindingSpec{
			PolicyName: realNodePolicy,
			MatchResources: &admissionv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchExpressions: []metav1.LabelSelectorRequirement{{
					Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: RealNodeNamespaces,
				}},
			}},
		},
	}
	return policy, binding
}

// ensureRealNodeSteering creates or updates the policy and binding when the cluster has its real
// node, and deletes them when it has none (the pods would wait for a node that is not there).
func (c *Cluster) ensureRealNodeSteering(ctx context.Context) error {
	api := c.client.AdmissionregistrationV1()
	policy, binding := realNodeSteering()
	if !c.realNode {
		for _, err := range []error{
			api.MutatingAdmissionPolicyBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{}),
			api.MutatingAdmissionPolicies().Delete(ctx, policy.Name, metav1.DeleteOptions{}),
		} {
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("remove the real node's steering: %w", err)
			}
		}
		return nil
	}
	if have, err := api.MutatingAdmissionPolicies().Get(ctx, policy.Name, metav1.GetOptions{}); err == nil {
		policy.ResourceVersion = have.ResourceVersion
		_, err = api.MutatingAdmissionPolicies().Update(ctx, policy, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("update MutatingAdmissionPolicy %s: %w", policy.Name, err)
		}
	} else if _, err := api.MutatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create MutatingAdmissionPolicy %s: %w", policy.Name, err)
	}
	if have, err := api.MutatingAdmissionPolicyBindings().Get(ctx, binding.Name, metav1.GetOptions{}); err == nil {
		binding.ResourceVersion = have.ResourceVersion
		_, err = api.MutatingAdmissionPolicyBindings().Update(ctx, binding, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("update MutatingAdmissionPolicyBinding %s: %w", binding.Name, err)
		}
	} else if _, err := api.MutatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create MutatingAdmissionPolicyBinding %s: %w", binding.Name, err)
	}
	return nil
}
