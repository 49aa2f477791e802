package v1alpha1

// WebhookPayloadAPIVersion is the apiVersion of the JSON body a webhook gate is POSTed
// (WebhookPayload): a receiver may rely on its fields; a change that removes or renames one gets a
// new version.
const WebhookPayloadAPIVersion = "rollout.sts.plus/v1"

// WebhookCheck is a webhook gate, as Flagger has: each check POSTs a JSON description of the step
// (WebhookPayload) to url; an answer with a 2xx status passes the check, any other status (a redirect
// included: redirects are not followed), a timeout or no answer at all fails it.
type WebhookCheck struct {
	// url is the http or https URL the check POSTs to, e.g.
	// "http://backup-guard.ops:8080/rollout-gate". Redirects are not followed: an answer with a 3xx
	// status fails the check.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.startsWith('http://') || self.startsWith('https://')",message="webhook.url must use the http or https scheme"
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getHostname() != ''",message="webhook.url must be a URL with a host, e.g. http://gate.ops:8080/check"
	URL string `json:"url"`

	// timeoutSeconds bounds one call, in seconds, from connecting to reading the answer's status and
	// first bytes; a call that takes longer fails the check. Defaults to 10; 1 to 300.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=300
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`

	// secretRef is the name of a Secret, in the PhasedRollout's namespace, holding the webhook's
	// credentials, the same contract as check.query.secretRef: key "token" for a bearer
	// Authorization header, or keys "username" and "password" for basic authentication. Optional.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	SecretRef string `json:"secretRef,omitempty"`

	// insecureSkipVerify, when true, skips verification of the webhook's TLS certificate. Defaults
	// to false.
	// +optional
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`
}

// WebhookPayload is the JSON body POSTed to a webhook gate (Content-Type application/json). It is a
// stable contract, versioned by apiVersion (WebhookPayloadAPIVersion).
type WebhookPayload struct {
	// APIVersion is WebhookPayloadAPIVersion.
	APIVersion string `json:"apiVersion"`
	// Name and Namespace are the PhasedRollout's; PhasedRollout repeats Name.
	Name          string `json:"name"`
	Namespace     string `json:"namespace"`
	PhasedRollout string `json:"phasedRollout"`
	// TargetRef is the StatefulSet being rolled (in Namespace).
	TargetRef string `json:"targetRef"`
	// Pod is the pod the check judges: the one the step rolled.
	Pod string `json:"pod"`
	// Partition is the StatefulSet's partition during the step.
	Partition int32 `json:"partition"`
	// CurrentRevision and UpdateRevision are the StatefulSet's revisions (rolled from, rolled to).
	CurrentRevision string `json:"currentRevision"`
	UpdateRevision  string `json:"updateRevision"`
	// CheckName names the check ("check" for spec.check).
	CheckName string `json:"checkName"`
	// Attempt is the number of this check in the step, from 1.
	Attempt int32 `json:"attempt"`
}

// EventWebhookConfigError is recorded when a webhook gate's Secret (check.webhook.secretRef) cannot
// be read.
const EventWebhookConfigError = "WebhookConfigError"
