// Package controller is the StatefulSingleton controller of singleton-operator: of the pods a
// StatefulSingleton selects, it lets at most one run its main process, releasing a held pod only once
// every other pod of the singleton is gone from the API or terminal (a pod being deleted whose app
// processes all reported their exit counts as terminal).
//
// Safety rules, in the order Reconcile applies them:
//
//   - A pod is held (admitted by the webhook with a Wrapper or SchedulingGate hold), released (it carries
//     the epoch annotation), ungated (it matches but carries no hold: it may run) or terminal. Released
//     and ungated pods that are not terminal block every release; pods being deleted still block.
//   - Exit report: a pod being deleted (deletionTimestamp set) whose annotation
//     apps.statefulsingleton.com/exited names every container but the status-sidecar counts as terminal
//     (exitReported), in the caches and in the live list before a release alike, so the next pod is
//     released without waiting for the kubelet to remove the pod. The operator writes it only in its
//     grant server, on the report of the pod's own status-sidecar (pod-bound token), after the wrappers
//     saw every app process and its descendants gone and no app can start again (internal/grant,
//     ExitPath); the pod-writes policy lets the operator add it only to a pod being deleted. Anything
//     missing — no report, an annotation that leaves out a container, one on a pod not being deleted —
//     falls back to the rule above.
//   - Of several held pods only one is a candidate: the newest revision (Deployment: the ReplicaSet's
//     deployment.kubernetes.io/revision; StatefulSet: the update revision), then the newest pod, then
//     the smallest name.
//   - RollingUpdate handover: a Deployment's new pod is held while the old one is healthy, and the
//     Deployment waits for the new pod to be Ready — a deadlock. When the candidate is of a newer revision
//     than a blocking pod, the operator deletes that pod (graceful delete with a UID precondition) and
//     releases the candidate once the kubelet confirmed the stop. A Wrapper candidate must run first
//     (every container started, the wrapper waiting), so the gap is the old pod's stop, not also the new
//     pod's start. The old ReplicaSet may create a replacement, which is admitted held and never chosen
//     over the newer revision.
//   - Fencing: when the pod recorded in status.activePodUID vanished while its node (status.activePodNode)
//     is NotReady or Unknown, its stop was never confirmed: nothing is released until the node is Ready
//     again or carries node.kubernetes.io/out-of-service (condition FencingRequired, Event).
//   - Adoption: an ungated pod that runs and is the only pod of the singleton that is not terminal (none
//     held, none released) becomes the active pod: confirmed with a live list, it gets a reserved epoch
//     and the adopted annotation, and is then a released pod in every respect (Event Adopted). With two
//     or more ungated pods nothing is adopted (UngatedPod reason SeveralPodsWithoutHold, Event).
//   - An ungated pod that is not adopted is reported (condition UngatedPod, Event) and deleted while
//     another pod is active.
//   - Every waiting state (Ready=False, by reason) is recorded as an Event when it begins.
//   - Before releasing, the pods are listed again from the API server (not the cache), so a stale cache
//     never releases a second pod. The epoch is reserved in status (optimistic lock) before the pod is
//     patched, so it only grows and is never reused, also across restarts.
//   - Past maxTransitionTime the transition is reported (phase Failed, TransitionTimedOut, Event
//     TransitionTimeout); nothing is released to meet a deadline.
//   - The finalizer is there only while a pod is held: it is added before the operator acts on a held
//     pod (before any release, or deletion of a blocking pod, of a handover) and removed by the first
//     reconcile that sees no held pod. Nothing is acted on until the finalizer write succeeded. Deleting
//     a StatefulSingleton that has it waits until no pod is held: a transition in progress finishes
//     first, and the status says what deletion waits for (Event DeletionWaiting). One at rest (one
//     running pod, none held) has none, so deleting it, or uninstalling the operator with it present,
//     completes at once; its pods keep running.
//   - Orphaned held pods: a held pod that no StatefulSingleton selects (listed live) — its
//     StatefulSingleton was deleted while the operator was stopped, or in the instant before the
//     finalizer was added — is released (Event OrphanReleased on the pod) only once every other pod of
//     its workload is gone from the API or terminal, and only the workload's first held pod in candidate
//     order (newest Deployment revision, newest pod, smallest name). Its workload is its controller, a
//     ReplicaSet's Deployment instead of the ReplicaSet, together with every pod carrying the same
//     singleton label (the webhook puts it on every pod it admits); a pod with neither waits for every
//     managed or released pod of the namespace. While it waits: Warning Event OrphanHeld on the pod,
//     looked at again every 5 s (the workload's other pods may be outside the operator's caches). Its
//     epoch is one above the epochs of the workload's pods still in the API (no status records the
//     high-water mark any more). A StatefulSingleton created at the very moment of such a release is
//     the one window this rule does not close (it would have to be created and release another pod
//     between the orphan's live lists and its release patch).
//   - Overlapping selectors: the older StatefulSingleton (then the smaller name) manages the pods; the
//     other reports SelectorConflict and does nothing.
//   - A selector that does not parse (an object created before the CRD refused such selectors) is
//     reported (Stalled and Ready=False, reason InvalidSelector, the parser's message, Warning Event); no
//     pod is observed or touched, and deleting the StatefulSingleton completes at once.
//   - terminationGracePeriod > maxTransitionTime (the original project's manifests) is accepted and acted
//     on as written: maxTransitionTime only reports, so the new pod still waits for the old one; the
//     concern is reported (SpecWarning, reason GracePeriodExceedsTransitionTime, Warning Event).
//   - Every waiting state has an Event: Ready=False with a new reason (reportWaiting), TransitionTimeout,
//     FencingRequired, UngatedPod, DeletionWaiting, OrphanHeld, SpecWarning.
//   - kstatus: Stalled=True while only the user can unblock it (InvalidSelector, SelectorOverlap,
//     SeveralPodsWithoutHold), Reconciling=True while a handover is in progress (kstatus.go).
package controller
