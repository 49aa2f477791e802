package api_test

// The second half of docs/bad-input.md: bad inputs the API server accepts (CEL cannot express them,
// they depend on other objects, or they were stored before a rule refused them) and the operator
// reports at once. TestBadInputDoc renders these tables; TestReportedInputsNameTheirTests fails when a
// row names a test that does not exist or does not mention the row's reason, so no row outlives its test.

// reportedInput is one bad input an operator reports instead of acting on it.
type reportedInput struct {
	Case      string // what is wrong, in words
	Condition string // what status.conditions say: type=status/reason
	Event     string // the Event kubectl describe shows (type and reason)
	Kstatus   string // what cli-utils' kstatus (Flux, kpt, kubectl-based deploy tools) reads: Failed, InProgress or Current
	// Reason is the name of the constant of the kind's API package (shared/api/<family>/<version>)
	// that the row is about; its value must appear in Condition or Event, and every test in Tests must
	// mention the constant or its value.
	Reason string
	// Tests prove the row: "<module dir>/<package path>.<TestName>", optionally "/<subtest>" (the
	// subtest's name must appear in the test's body as a string literal).
	Tests []string
}

// Operator test packages, as the rows name them.
const (
	rolloutPkg   = "rollout-operator/internal/controller."
	singletonPkg = "singleton-operator/internal/controller."
	leasePkg     = "lease-operator/internal/controller."
	clusterPkg   = "cluster-operator/internal/controller."
	extendedPkg  = "extended-operator/internal/controller."
)

// reportedInputKinds are the kinds' tables, in the order of the doc, with the directory of the kind's
// API package (relative to shared/api) whose constants the rows name.
var reportedInputKinds = []struct {
	kind   string
	apiDir string
	rows   []reportedInput
}{
	{"StatefulSingleton", "singleton/v1", singletonReported},
	{"StatefulCluster", "cluster/v1alpha1", clusterReported},
	{"StatefulSetLock", "lease/v1", lockReported},
	{"PhasedRollout", "rollout/v1alpha1", rolloutReported},
	{"ExtendedStatefulSet", "extended/v1alpha1", extendedReported},
}

var singletonReported = []reportedInput{
	{
		Case:      "selector that does not parse (unknown operator, invalid label value), stored before the CRD refused it",
		Condition: "Stalled=True/InvalidSelector, Ready=False/InvalidSelector",
		Event:     "Warning InvalidSelector (the parser's message)",
		Kstatus:   "Failed",
		Reason:    "ReasonInvalidSelector",
		Tests:     []string{singletonPkg + "TestInvalidSelectorPhase"},
	},
	{
		Case:      "selector overlapping an older StatefulSingleton's (the older one manages the pods)",
		Condition: "Stalled=True/SelectorOverlap, SelectorConflict=True",
		Event:     "Warning SelectorOverlap",
		Kstatus:   "Failed (the older one: Current)",
		Reason:    "ReasonSelectorOverlap",
		Tests:     []string{singletonPkg + "TestSelectorOverlapReadsFailed"},
	},
	{
		Case:      "several selected pods without a start hold and none active (nothing is adopted)",
		Condition: "Stalled=True/SeveralPodsWithoutHold, UngatedPod=True",
		Event:     "Warning SeveralPodsWithoutHold (names the pods)",
		Kstatus:   "Failed",
		Reason:    "ReasonSeveralPodsWithoutHold",
		Tests:     []string{singletonPkg + "TestSeveralPodsWithoutHoldAreNotAdopted", singletonPkg + "TestKstatusCompute"},
	},
	{
		Case:      "terminationGracePeriod greater than maxTransitionTime (the original project's e2e manifest: accepted and works)",
		Condition: "SpecWarning=True/GracePeriodExceedsTransitionTime",
		Event:     "Warning GracePeriodExceedsTransitionTime",
		Kstatus:   "Current once a pod runs",
		Reason:    "ReasonGracePeriodExceedsTransitionTime",
		Tests:     []string{singletonPkg + "TestGracePeriodExceedsTransitionTimeWarnsAndWorks", singletonPkg + "TestSpecConcernGracePeriod"},
	},
	{
		Case:      "a selected pod without a start hold (created past the admission webhook) while another pod is active",
		Condition: "UngatedPod=True (the pod is never released, and deleted)",
		Event:     "Warning UngatedPod (names the pod)",
		Kstatus:   "Current (the active pod keeps running)",
		Reason:    "ConditionUngatedPod",
		Tests:     []string{singletonPkg + "TestUngatedPodReportedAndDeleted"},
	},
	{
		Case:      "selector that matches no pod",
		Condition: "Ready=False/NoPods",
		Event:     "Normal NoPods",
		Kstatus:   "InProgress",
		Reason:    "ReasonNoPods",
		Tests:     []string{singletonPkg + "TestWaitingStatesAreEvents"},
	},
	{
		Case:      "maxTransitionTime shorter than the old pod takes to stop",
		Condition: "TransitionTimedOut=True, Reconciling=True/Handover (the new pod stays held)",
		Event:     "Warning TransitionTimeout",
		Kstatus:   "InProgress",
		Reason:    "ReasonTransitionTimeout",
		Tests:     []string{singletonPkg + "TestTransitionTimeoutKeepsHolding"},
	},
}

var clusterReported = []reportedInput{
	{
		Case:      "selector that does not parse, stored before the CRD refused it",
		Condition: "Stalled=True/InvalidSelector, Ready=False/InvalidSelector",
		Event:     "Warning InvalidSelector",
		Kstatus:   "Failed",
		Reason:    "ReasonInvalidSelector",
		Tests:     []string{clusterPkg + "TestLegacyInvalidSelectorStalls/invalid"},
	},
	{
		Case:      "selector that does not select the template's pods, stored before the CRD refused it",
		Condition: "Stalled=True/SelectorMismatch, Ready=False/SelectorMismatch",
		Event:     "Warning SelectorMismatch",
		Kstatus:   "Failed",
		Reason:    "ReasonSelectorMismatch",
		Tests:     []string{clusterPkg + "TestLegacyInvalidSelectorStalls/mismatch"},
	},
	{
		Case:      "claim template that cannot bind (no StorageClass or provisioner): the pod stays Pending",
		Condition: "Stalled=True/ClaimPending, Ready=False/ClaimPending (the pod is kept, not replaced)",
		Event:     "Warning ClaimPending",
		Kstatus:   "Failed",
		Reason:    "ReasonClaimPending",
		Tests:     []string{clusterPkg + "TestStuckPodsAreReportedNotReplaced/claim-cannot-bind"},
	},
	{
		Case:      "template no node can take (resources, affinity, taints): the pod stays Pending",
		Condition: "Stalled=True/Unschedulable (the pod is kept, not replaced)",
		Event:     "Warning Unschedulable",
		Kstatus:   "Failed",
		Reason:    "ReasonUnschedulable",
		Tests:     []string{clusterPkg + "TestStuckPodsAreReportedNotReplaced/unschedulable"},
	},
	{
		Case:      "pod template the API server refuses (a container name that is no DNS label)",
		Condition: "Stalled=True/InvalidTemplate, Ready=False/InvalidTemplate (no pod, no identity spent)",
		Event:     "Warning InvalidTemplate (the API server's answer)",
		Kstatus:   "Failed",
		Reason:    "ReasonInvalidTemplate",
		Tests:     []string{clusterPkg + "TestKstatusOracle/broken"},
	},
	{
		Case:      "membership hook (failurePolicy Fail) naming a port no pod has",
		Condition: "Stalled=True/HookPortNotFound (the replacement it guards is held back)",
		Event:     "Warning HookPortNotFound",
		Kstatus:   "Failed",
		Reason:    "ReasonHookPortNotFound",
		Tests:     []string{clusterPkg + "TestHookNoPodCanAnswerStalls"},
	},
}

var lockReported = []reportedInput{
	{
		Case:      "statefulSetName naming no StatefulSet",
		Condition: "Stalled=True/StatefulSetNotFound, Error=True, Ready=False",
		Event:     "Warning StatefulSetNotFound",
		Kstatus:   "Failed",
		Reason:    "ReasonStatefulSetNotFound",
		Tests:     []string{leasePkg + "TestWaitingStatesHaveEvents", leasePkg + "TestStatefulSetMissing"},
	},
	{
		Case:      "a second lock on a StatefulSet an older lock manages (the younger one writes nothing, its deletion leaves the older one untouched, and it takes over once the older one is deleted)",
		Condition: "Stalled=True/StatefulSetConflict, Ready=False",
		Event:     "Warning StatefulSetConflict",
		Kstatus:   "Failed",
		Reason:    "ReasonStatefulSetConflict",
		Tests: []string{leasePkg + "TestConflictAndErrorStatesHaveEvents", leasePkg + "TestSecondLockOnAStatefulSetIsStalledUntilTheFirstGoes",
			leasePkg + "TestDeletingTheStalledLockLeavesTheFirstAlone"},
	},
	{
		Case:      "leaseName naming a Lease this lock does not own",
		Condition: "Stalled=True/LeaseConflict, Error=True, Ready=False (the Lease is left alone)",
		Event:     "Warning LeaseConflict",
		Kstatus:   "Failed",
		Reason:    "ReasonLeaseConflict",
		Tests:     []string{leasePkg + "TestForeignLeaseIsLeftAlone"},
	},
	{
		Case:      "two locks (on two StatefulSets) with the same leaseName",
		Condition: "Stalled=True/LeaseConflict on the lock that does not own the Lease",
		Event:     "Warning LeaseConflict",
		Kstatus:   "Failed",
		Reason:    "ReasonLeaseConflict",
		Tests:     []string{leasePkg + "TestTwoLocksSharingALeaseNeverHaveTwoWriters"},
	},
	{
		Case:      "StatefulSet without a Ready pod (e.g. scaled to zero): no writer, no Lease",
		Condition: "Reconciling=True/NoReadyPods, Ready=False",
		Event:     "Normal NoReadyPods",
		Kstatus:   "InProgress",
		Reason:    "ReasonNoReadyPods",
		Tests:     []string{leasePkg + "TestWaitingStatesHaveEvents", leasePkg + "TestNoLeaseBeforeTheFirstWriter"},
	},
	{
		Case:      "switchover annotation naming a pod that cannot take the writer role (not Ready)",
		Condition: "Reconciling=True/SwitchoverPending (the writer stays)",
		Event:     "Normal SwitchoverPending",
		Kstatus:   "InProgress",
		Reason:    "ReasonSwitchoverPending",
		Tests:     []string{leasePkg + "TestSwitchoverPendingIsReportedOnce"},
	},
}

var rolloutReported = []reportedInput{
	{
		Case:      "successCondition that does not compile as CEL (`result <`), in spec.check or a spec.checks element",
		Condition: "Stalled=True/InvalidSuccessCondition, Ready=False/InvalidSuccessCondition (the compiler's message; the StatefulSet untouched)",
		Event:     "Warning InvalidSuccessCondition",
		Kstatus:   "Failed",
		Reason:    "ReasonInvalidSuccessCondition",
		Tests:     []string{rolloutPkg + "TestInvalidSuccessConditionStallsAtOnce", rolloutPkg + "TestSuccessConditionCompileErrorsStall"},
	},
	{
		Case:      "check.query.expr that is not PromQL (`invalid_promql{`)",
		Condition: "Stalled=True/InvalidQuery, Ready=False/InvalidQuery (the parser's message; the StatefulSet untouched)",
		Event:     "Warning InvalidQuery",
		Kstatus:   "Failed",
		Reason:    "ReasonInvalidQuery",
		Tests:     []string{rolloutPkg + "TestInvalidQueryStallsAtOnce"},
	},
	{
		Case:      "check.query.expr made invalid during a rollout",
		Condition: "Stalled=True/InvalidQuery (the partition stays where it is)",
		Event:     "Warning InvalidQuery",
		Kstatus:   "Failed",
		Reason:    "ReasonInvalidQuery",
		Tests:     []string{rolloutPkg + "TestInvalidQueryMidRolloutFreezesThePartition"},
	},
	{
		Case:      "check.query.url without a host (`http://`), stored before the CRD refused it",
		Condition: "Stalled=True/InvalidURL, Ready=False/InvalidURL",
		Event:     "Warning InvalidURL",
		Kstatus:   "Failed",
		Reason:    "ReasonInvalidURL",
		Tests:     []string{rolloutPkg + "TestCheckSpecReportsAURLWithoutHost"},
	},
	{
		Case:      "targetRef naming no StatefulSet",
		Condition: "Stalled=True/ErrorSTSNotFound, Ready=False, phase ErrorSTSNotFound",
		Event:     "Warning ErrorSTSNotFound",
		Kstatus:   "Failed",
		Reason:    "PhaseErrorSTSNotFound",
		Tests:     []string{rolloutPkg + "TestWaitingStatesHaveEvents", rolloutPkg + "TestKstatus"},
	},
	{
		Case:      "target StatefulSet with updateStrategy OnDelete",
		Condition: "Stalled=True/ErrorCannotManage, Degraded=True, phase ErrorCannotManage",
		Event:     "Warning CannotManage",
		Kstatus:   "Failed",
		Reason:    "PhaseErrorCannotManage",
		Tests:     []string{rolloutPkg + "TestEveryWaitingStateHasOneEvent", rolloutPkg + "TestKstatus"},
	},
	{
		Case:      "target StatefulSet managed by another PhasedRollout that exists and targets it",
		Condition: "Stalled=True/ErrorCannotManage (message: managed by PhasedRollout, naming it)",
		Event:     "Warning CannotManage",
		Kstatus:   "Failed",
		Reason:    "EventCannotManage",
		Tests:     []string{rolloutPkg + "TestStaleOwnershipIsTakenOver/owner exists and targets it"},
	},
	{
		Case:      "target's ownership annotation naming a PhasedRollout that no longer exists (stale): taken over",
		Condition: "Ready=True/Updated",
		Event:     "Normal OwnershipTakenOver (or PartitionReleased on the StatefulSet, when released first)",
		Kstatus:   "Current",
		Reason:    "EventOwnershipTakenOver",
		Tests:     []string{rolloutPkg + "TestStaleOwnershipIsTakenOver/owner does not exist"},
	},
	{
		Case:      "target's ownership annotation naming a PhasedRollout that targets another StatefulSet (stale): taken over",
		Condition: "Ready=True/Updated",
		Event:     "Normal OwnershipTakenOver",
		Kstatus:   "Current",
		Reason:    "EventOwnershipTakenOver",
		Tests:     []string{rolloutPkg + "TestStaleOwnershipIsTakenOver/owner targets another StatefulSet"},
	},
	{
		Case:      "a check that never passes: check.maxTries used up",
		Condition: "Stalled=True/Failed, Degraded=True, phase Failed (check.onFailure applied)",
		Event:     "Warning RolloutFailed",
		Kstatus:   "Failed",
		Reason:    "EventRolloutFailed",
		Tests:     []string{rolloutPkg + "TestFailingChecksStopTheRollout", rolloutPkg + "TestEveryWaitingStateHasOneEvent"},
	},
	{
		Case:      "check.query.url where the query cannot be evaluated (no Prometheus answers): never a pass",
		Condition: "Reconciling=True/Rolling, rollingPodStatus.status PrometheusError (the partition does not move)",
		Event:     "Warning PrometheusError (once, not per check)",
		Kstatus:   "InProgress",
		Reason:    "StepPrometheusError",
		Tests:     []string{rolloutPkg + "TestWaitingStatesHaveEvents", rolloutPkg + "TestPrometheusErrorsNeverPass"},
	},
}

var extendedReported = []reportedInput{
	{
		Case:      "template referencing a ConfigMap or Secret that does not exist (not optional)",
		Condition: "Stalled=True/ReferenceNotFound, MissingReference=True (names the object)",
		Event:     "Warning ReferenceNotFound",
		Kstatus:   "Failed",
		Reason:    "ReasonReferenceNotFound",
		Tests:     []string{extendedPkg + "TestKstatusMissingReference", extendedPkg + "TestMissingReference", extendedPkg + "TestWaitingStatesHaveEvents"},
	},
	{
		Case:      "referenced ConfigMap deleted while an upgrade is under way",
		Condition: "MissingReference=True/ReferenceNotFound (the upgrade is not stalled by it)",
		Event:     "Warning ReferenceNotFound (names the ConfigMap, once)",
		Kstatus:   "InProgress",
		Reason:    "ReasonReferenceNotFound",
		Tests:     []string{extendedPkg + "TestMissingReferenceDuringUpgradeHasAnEvent"},
	},
	{
		Case:      "template the API server refuses as a StatefulSet (a container name that is no DNS label)",
		Condition: "Stalled=True/InvalidTemplate (the API server's answer; not retried until the spec changes)",
		Event:     "Warning InvalidTemplate",
		Kstatus:   "Failed",
		Reason:    "ReasonInvalidTemplate",
		Tests:     []string{extendedPkg + "TestKstatusInvalidStatefulSet"},
	},
	{
		Case:      "updateStrategy.type InPlace: a template change of what the StatefulSet fixes at creation (a claim template other than its storage request; selector, serviceName or podManagementPolicy of an object stored before the CRD refused that)",
		Condition: "Stalled=True/ImmutableInPlace, Ready=False/ImmutableInPlace (names the fields; nothing of the change is applied until it is reverted)",
		Event:     "Warning ImmutableInPlace",
		Kstatus:   "Failed",
		Reason:    "ReasonImmutableInPlace",
		Tests:     []string{extendedPkg + "TestInPlaceImmutableFieldIsStalled"},
	},
	{
		Case:      "updateStrategy.type InPlace without restartVia PhasedRollout, while a PhasedRollout manages the StatefulSet (two owners of one partition)",
		Condition: "Stalled=True/PartitionConflict, Ready=False/PartitionConflict (names the PhasedRollout; the partition is left alone until restartVia is PhasedRollout or the PhasedRollout is gone)",
		Event:     "Warning PartitionConflict",
		Kstatus:   "Failed",
		Reason:    "ReasonPartitionConflict",
		Tests:     []string{extendedPkg + "TestInPlacePartitionConflictWithAPhasedRollout"},
	},
	{
		Case:      "updateStrategy.restartVia PhasedRollout, an update written but no PhasedRollout manages the StatefulSet",
		Condition: "Reconciling=True/NoPhasedRollout, Ready=False/NoPhasedRollout (names the StatefulSet to target; no pod is rolled)",
		Event:     "Warning NoPhasedRollout",
		Kstatus:   "InProgress",
		Reason:    "ReasonNoPhasedRollout",
		Tests:     []string{extendedPkg + "TestRestartViaPhasedRollout"},
	},
	{
		Case:      "new version whose canary never gets Ready (retryCount used up)",
		Condition: "Stalled=True/CanaryFailed, Stale=True (the previous version keeps serving)",
		Event:     "Warning CanaryFailed",
		Kstatus:   "Failed",
		Reason:    "ReasonCanaryFailed",
		Tests:     []string{extendedPkg + "TestStaleMarking"},
	},
	{
		Case:      "zone whose canary fails (later zones are not upgraded)",
		Condition: "Stale=True/CanaryFailed (names the zone; the zone's previous version keeps serving)",
		Event:     "Warning CanaryFailed",
		Kstatus:   "Failed",
		Reason:    "ReasonCanaryFailed",
		Tests:     []string{extendedPkg + "TestZoneStaleStopsLaterZones"},
	},
	{
		Case:      "pre upgrade Job that fails (the upgrade does not start)",
		Condition: "UpgradeBlocked=True/JobFailed, Stale=True/JobFailed, Stalled=True/JobFailed",
		Event:     "Warning JobFailed (names the Job)",
		Kstatus:   "Failed",
		Reason:    "ReasonJobFailed",
		Tests:     []string{extendedPkg + "TestPreJobFailure", extendedPkg + "TestKstatus"},
	},
	{
		Case:      "post upgrade Job that fails, with rollback",
		Condition: "PostUpgradeFailed=True/RolledBack, Stale=True/RolledBack, Stalled=True/RolledBack",
		Event:     "Warning JobFailed (names the Job)",
		Kstatus:   "Failed",
		Reason:    "ReasonRolledBack",
		Tests:     []string{extendedPkg + "TestPostJob/failure with rollback"},
	},
	{
		Case:      "spec.az.zones naming a zone without a Ready node",
		Condition: "ZonesAvailable=False/ZoneOutage (names the zones)",
		Event:     "Warning ZoneOutage (names the zone)",
		Kstatus:   "as the other conditions say (a zone outage does not hold upgrades back)",
		Reason:    "ReasonZoneOutage",
		Tests:     []string{extendedPkg + "TestZoneOutage"},
	},
	{
		Case:      "spec.reloadKeys naming a ConfigMap or Secret the pod template does not reference (a typo: the entry narrows nothing)",
		Condition: "none (nothing waits on it)",
		Event:     "Warning ReloadKeysUnused (names the entries)",
		Kstatus:   "Current",
		Reason:    "ReasonReloadKeysUnused",
		Tests:     []string{extendedPkg + "TestReloadKeys"},
	},
	{
		Case:      "spec.updateStrategy.restartWindows with a schedule the CRD's rule lets through but that does not parse (a range whose end is below its start) or never opens (30 February), or a time zone the operator does not know",
		Condition: "Stalled=True/InvalidRestartWindow, Ready=False/InvalidRestartWindow (names the window); with a configuration change waiting, RestartPending=True/InvalidRestartWindow (the pods do not restart outside the windows meant)",
		Event:     "Warning InvalidRestartWindow (names the window)",
		Kstatus:   "Failed",
		Reason:    "ReasonInvalidRestartWindow",
		Tests:     []string{extendedPkg + "TestRestartWindowInvalid", extendedPkg + "TestRestartWindowTimes"},
	},
}
