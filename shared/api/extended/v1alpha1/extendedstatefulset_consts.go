package v1alpha1

// Condition types of an ExtendedStatefulSet (status.conditions[].type).
const (
	// ConditionReady is the summary: one version runs, all its pods Ready in every zone, no upgrade or
	// restart under way. `kubectl wait --for=condition=Ready` waits for it.
	ConditionReady = "Ready"
	// ConditionProgressing is True while an upgrade (canaries, remaining pods, zone by zone) or a
	// configuration restart is under way.
	ConditionProgressing = "Progressing"
	// ConditionStale is True when the newest version failed (canary not Ready after retryCount retries,
	// or a failed pre upgrade Job) and its StatefulSet was annotated fissile.cloudfoundry.org/stale=true;
	// the previous version keeps serving.
	ConditionStale = "Stale"
	// ConditionUpgradeBlocked is True when the pre upgrade Job of the newest version failed, so the
	// upgrade did not start; the message names the Job.
	ConditionUpgradeBlocked = "UpgradeBlocked"
	// ConditionPostUpgradeFailed is True when the post upgrade Job of the newest version failed; the
	// message names the Job and says whether the upgrade was rolled back.
	ConditionPostUpgradeFailed = "PostUpgradeFailed"
	// ConditionZonesAvailable (with zones) is False when some zone of spec.az.zones has no Ready node
	// (every node labelled with it NotReady, or none labelled): reason ZoneOutage, the message names the
	// zones. Pods there cannot run; upgrades are not held back by it.
	ConditionZonesAvailable = "ZonesAvailable"
	// ConditionMissingReference is True when a ConfigMap or Secret referenced by the template does not
	// exist (and is not optional); the message names it. Pods are not rolled into a broken state.
	ConditionMissingReference = "MissingReference"
	// ConditionStalled (kstatus, sigs.k8s.io/cli-utils/pkg/kstatus: Failed) is True when the operator
	// cannot make progress without a change by the user: a referenced ConfigMap or Secret is missing
	// (ReferenceNotFound), the newest version is stale (CanaryFailed, UpdateFailed, JobFailed for a
	// failed pre upgrade Job, RolledBack), or the API server refuses the StatefulSet or upgrade Job built
	// from the spec (InvalidTemplate). Its reason and message say which; what serves keeps serving, and
	// the blocked step is tried again only once the spec (or the missing object) changes.
	ConditionStalled = "Stalled"
	// ConditionReconciling (kstatus: InProgress) is True while the operator works towards Ready: a new
	// version's pre Job, canaries or remaining pods, a configuration roll, zones waiting their turn, the
	// cleanup of lower versions, pods not Ready yet, or an API error it retries. Its reason and message are
	// the Ready condition's. At most one of Stalled and Reconciling is True.
	ConditionReconciling = "Reconciling"
	// ConditionRestartPending (with spec.updateStrategy.restartWindows) is True while a configuration
	// change waits for a restart window: reason OutsideRestartWindow, the message names when the next
	// window opens; or reason InvalidRestartWindow when a window cannot be read (the change waits until
	// it is fixed). The pods that run keep running, so it alone does not make Ready False.
	ConditionRestartPending = "RestartPending"
	// ConditionClaimsResized (with volumeClaimTemplates) says whether every existing claim of the
	// templates has the storage the template requests: True (reason Reconciled); False with reason
	// ResizeInProgress while claims were asked to grow and their volumes are not that large yet (the
	// message counts and names them), or ExpansionNotAllowed when a claim's StorageClass does not allow
	// volume expansion (the message names the class; those claims are left as they are). The pods keep
	// running either way, so it alone does not make Ready False.
	ConditionClaimsResized = "ClaimsResized"
)

// Condition reasons of an ExtendedStatefulSet.
const (
	// ReasonReconciled: the observed state matches the spec.
	ReasonReconciled = "Reconciled"
	// ReasonCanaryRollout: canary pods of the newest version are starting.
	ReasonCanaryRollout = "CanaryRollout"
	// ReasonRollout: the remaining pods of the newest version are starting.
	ReasonRollout = "Rollout"
	// ReasonCleanup: a newer version runs and lower versions are being deleted.
	ReasonCleanup = "Cleanup"
	// ReasonConfigChanged: referenced configuration data changed and pods are restarting.
	ReasonConfigChanged = "ConfigChanged"
	// ReasonPreUpgradeJobRunning: the pre upgrade Job of the newest version is running.
	ReasonPreUpgradeJobRunning = "PreUpgradeJobRunning"
	// ReasonPostUpgradeJobRunning: the post upgrade Job of the newest version is running.
	ReasonPostUpgradeJobRunning = "PostUpgradeJobRunning"
	// ReasonCanaryFailed: a canary did not become Ready within canaryWatchTime after retryCount retries.
	ReasonCanaryFailed = "CanaryFailed"
	// ReasonUpdateFailed: a non-canary pod did not become Ready within updateWatchTime.
	ReasonUpdateFailed = "UpdateFailed"
	// ReasonJobFailed: an upgrade Job failed.
	ReasonJobFailed = "JobFailed"
	// ReasonRolledBack: the previous version was restored after a failed post upgrade Job.
	ReasonRolledBack = "RolledBack"
	// ReasonReferenceNotFound: a referenced ConfigMap or Secret does not exist.
	ReasonReferenceNotFound = "ReferenceNotFound"
	// ReasonReloadKeysUnused (Event): spec.reloadKeys names a ConfigMap or Secret the pod template does
	// not reference, so the entry narrows nothing.
	ReasonReloadKeysUnused = "ReloadKeysUnused"
	// ReasonPodsNotReady: some pods are not Ready (yet).
	ReasonPodsNotReady = "PodsNotReady"
	// ReasonZoneOutage: a zone has no Ready node.
	ReasonZoneOutage = "ZoneOutage"
	// ReasonZoneUpgrade: zones upgrade (and roll on configuration changes) one at a time; the message
	// names the zone that waits and the zone it waits for.
	ReasonZoneUpgrade = "ZoneUpgrade"
	// ReasonInvalidTemplate: the API server refused an object built from the spec, a version's
	// StatefulSet (spec.template) or an upgrade Job (spec.upgradeJobs); the message is its answer. The
	// operator tries again only once the spec changes.
	ReasonInvalidTemplate = "InvalidTemplate"
	// ReasonOutsideRestartWindow: a configuration change waits for the next restart window
	// (spec.updateStrategy.restartWindows).
	ReasonOutsideRestartWindow = "OutsideRestartWindow"
	// ReasonInvalidRestartWindow: a restart window's schedule or time zone cannot be read (a range that
	// ends below its start, a date that never comes, an unknown time zone); configuration restarts wait
	// until it is fixed. Stalled says so.
	ReasonInvalidRestartWindow = "InvalidRestartWindow"
	// ReasonImmutableInPlace: with spec.updateStrategy.type InPlace the template changed a field the
	// StatefulSet fixes at creation (a claim template other than its storage request; selector,
	// serviceName or podManagementPolicy of an object stored before the CRD refused that). Nothing is
	// applied until it is reverted; a new ExtendedStatefulSet with type Versioned can take it. Stalled says so.
	ReasonImmutableInPlace = "ImmutableInPlace"
	// ReasonNoPhasedRollout: with spec.updateStrategy.restartVia PhasedRollout an in-place update is
	// written into the StatefulSet, but no PhasedRollout manages it (its annotation sts.plus/phasedRollout
	// is missing), so no pod is rolled; create a PhasedRollout whose targetRef names the StatefulSet.
	// Reconciling says so, with a Warning Event.
	ReasonNoPhasedRollout = "NoPhasedRollout"
	// ReasonPartitionConflict: an in-place StatefulSet is managed by a PhasedRollout while
	// spec.updateStrategy.restartVia is not PhasedRollout; both would own its partition, so this operator
	// leaves it alone until one of them goes: set restartVia PhasedRollout, or delete the PhasedRollout.
	// Stalled says so.
	ReasonPartitionConflict = "PartitionConflict"
	// ReasonResizeInProgress: claims were asked to grow to their template's storage request and their
	// volumes are not that large yet (the resize controller, or the node's file system resize, works on
	// them).
	ReasonResizeInProgress = "ResizeInProgress"
	// ReasonExpansionNotAllowed: a claim is smaller than its template requests and its StorageClass does
	// not set allowVolumeExpansion: true (or it has none), so it is left as it is; also a Warning Event.
	ReasonExpansionNotAllowed = "ExpansionNotAllowed"
	// ReasonReconcileError: an API call failed; the operator retries with backoff.
	ReasonReconcileError = "ReconcileError"
)
