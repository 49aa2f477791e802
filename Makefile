# statefulops — build, generate, test and run everything from one place. `make help` lists the targets.
#
# Everything the targets need is built or installed by them: the Kubernetes components and etcd are
# compiled from source through the Go module proxy, once, into $(CACHE); nothing is downloaded otherwise.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
.DEFAULT_GOAL := help

ROOT    := $(abspath .)
CACHE   ?= $(HOME)/.cache/statefulops
VERSION := v$(shell cat VERSION)
STATE   := $(ROOT)/.local

# Pinned versions of everything the Makefile builds or installs.
KUBE_VERSION           := v1.36.3
ETCD_VERSION           := v3.6.16
KWOK_VERSION           := v0.8.0
CONTROLLER_GEN_VERSION := v0.23.0
# The SBOM generator of `make images` (CycloneDX's, bin mode: the modules of each binary's build info).
CYCLONEDX_GOMOD_VERSION := v1.10.0

# Kubernetes components and etcd share one directory, which also serves as KUBEBUILDER_ASSETS.
KUBE_BIN       := $(CACHE)/kube-$(KUBE_VERSION)-etcd-$(ETCD_VERSION)
KWOK_BIN       := $(CACHE)/kwok-$(KWOK_VERSION)
CONTROLLER_GEN := $(CACHE)/tools/controller-gen-$(CONTROLLER_GEN_VERSION)
CYCLONEDX_GOMOD := $(CACHE)/tools/cyclonedx-gomod-$(CYCLONEDX_GOMOD_VERSION)
KUBECTL        := $(KUBE_BIN)/kubectl
KUBE_COMPONENTS := kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy

OPERATORS := singleton-operator cluster-operator lease-operator rollout-operator extended-operator
BINARIES  := $(OPERATORS) webhook-server
# The kubectl plugin is a module of its own, built by `make build` but never packaged as an image.
PLUGIN    := kubectl-statefulops
MODULES   := shared $(BINARIES) $(PLUGIN) e2e
# The binaries of `make build`, outside the checkout so a fresh clone stays clean.
BIN_DIR   ?= $(CACHE)/build/$(VERSION)

# API family → the operator module whose manifest carries that CRD. CRDs that embed whole Kubernetes
# types (pod templates) are slimmed by shared/hack/crdslim so a client-side `kubectl apply` takes them.
CRD_FAMILIES := singleton:singleton-operator cluster:cluster-operator lease:lease-operator rollout:rollout-operator extended:extended-operator

GO_LDFLAGS := -s -w -X github.com/statefulops/statefulops/shared/version.Version=$(VERSION)
KUBE_LDFLAGS := -s -w -X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=36 \
	-X k8s.io/client-go/pkg/version.gitVersion=$(KUBE_VERSION)

# What the tests and the local cluster need to find the binaries.
export KUBEBUILDER_ASSETS := $(KUBE_BIN)
export STATEFULOPS_KUBE_BIN := $(KUBE_BIN)
export STATEFULOPS_KWOK_BIN := $(KWOK_BIN)
export STATEFULOPS_BIN := $(BIN_DIR)
# e2e/cmd/images' SBOM test uses the same generator (it installs the pinned one itself when run alone).
export CYCLONEDX_GOMOD
export GOFLAGS := -buildvcs=false

# The local cluster's real node (a real kubelet with containerd) needs root on Linux. Elsewhere the
# real-node tests run only when asked (E2E_REAL_NODE=1); the e2e run says in its summary that they are off.
ifneq ($(shell id -u)-$(shell uname -s),0-Linux)
export E2E_REAL_NODE ?= 0
endif

##@ Main

.PHONY: run
run: tools images ## Start the local cluster with every operator running and the samples applied; leaves it running.
	cd e2e && go run ./cmd/run up -state-dir $(STATE)

.PHONY: down
down: ## Stop the local cluster and every operator started by `make run`; leaves nothing running.
	cd e2e && go run ./cmd/run down -state-dir $(STATE)

##@ Test

# The lines that say what failed (the full output is in $(CACHE)/*.log), for the e2e targets' filtered
# output: a testify failure's own lines (without them a failed assertion shows only its file and line)
# and a failed test's dump of its namespace (e2e/framework/dump.go).
FAILURE_LINES = ^\s+(Error|Messages|expected|actual)\s*:|^\s+dump\.go:

.PHONY: test
test: test-unit test-integration test-e2e ## Run every test: unit, integration (envtest) and e2e (local cluster).

.PHONY: test-unit
test-unit: ## Run the unit tests of every module (fast, no API server).
	for m in $(MODULES); do (cd $$m && go test -count=1 ./...); done

# The rollout-operator's envtests take longest (about 12 minutes, mostly waiting out check intervals,
# at about half a core): they run beside the other modules' envtests, which run one after another, and
# their output follows the others'.
SLOW_INTEGRATION := rollout-operator
.PHONY: test-integration
test-integration: kube-bin host-deps ## Run the integration tests against a real kube-apiserver and etcd (envtest).
	slow=$$(mktemp) && trap 'rm -f "$$slow"' EXIT; \
	  (cd $(SLOW_INTEGRATION) && go test -count=1 -tags integration -timeout 30m ./... >"$$slow" 2>&1) & lane=$$!; \
	  status=0; for m in $(filter-out $(SLOW_INTEGRATION),$(MODULES)); do (cd $$m && go test -count=1 -tags integration -timeout 30m ./...) || status=1; done; \
	  wait $$lane || status=1; cat "$$slow"; exit $$status

.PHONY: test-e2e
test-e2e: tools images images-next ## Run the e2e suites (e2e/<operator>, e2e/platform) one after another on one local cluster (real control plane + kwok nodes).
	cd e2e && status=0 && { E2E_SHARED_CLUSTER=1 go test -p 1 -count=1 -tags e2e -timeout 50m -v ./... 2>&1 | tee $(CACHE)/e2e.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic|e2e:|\s+\S+_test.go)|$(FAILURE_LINES)' || status=$${PIPESTATUS[0]}; }; \
	  go run ./cmd/e2edown || status=1; exit $$status

.PHONY: e2e-kind
e2e-kind: build $(KUBECTL) ## Run the e2e suites on a kind cluster instead (needs Docker, so not on CI); deletes it after.
	mkdir -p $(STATE)
	cd e2e && go run ./cmd/kindcluster up -kubeconfig $(STATE)/kind-kubeconfig
	cd e2e && E2E_REAL_NODE=0 E2E_KUBECONFIG=$(STATE)/kind-kubeconfig go test -p 1 -count=1 -tags e2e -timeout 40m -v -skip 'TestKwok' ./...; \
	  status=$$?; go run ./cmd/kindcluster down; exit $$status

##@ Measure

# Records of `make bench` and `make chaos` (benchfmt JSON lines), turned into BENCHMARKS.md by e2e/cmd/benchreport.
export BENCH_OUT ?= $(CACHE)/bench
# CHAOS_SCALE multiplies the size of every chaos campaign: the tests' default (0.3) is the short campaign
# `make test` runs; `make chaos` runs CHAOS_SCALE=5 (about 10 minutes). CHAOS_SEED replays a campaign.
CHAOS_SCALE ?= 5
FUZZTIME ?= 30s

.PHONY: bench
bench: tools images ## Measure every operator beside a baseline in the same run (local cluster); writes BENCHMARKS.md.
	rm -f $(BENCH_OUT)/figures.jsonl
	cd e2e && status=0 && { E2E_SHARED_CLUSTER=1 go test -p 1 -count=1 -tags e2e,bench -timeout 60m -v -run '^TestBench' ./... 2>&1 | tee $(CACHE)/bench.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic|e2e:)|bench:|$(FAILURE_LINES)' || status=$${PIPESTATUS[0]}; }; \
	  go run ./cmd/e2edown || status=1; exit $$status
	cd e2e && go run ./cmd/benchreport -file $(ROOT)/BENCHMARKS.md -section bench -command "make bench"

.PHONY: chaos
chaos: tools images images-next ## Randomized fault campaigns with the invariant checkers (CHAOS_SCALE, CHAOS_SEED); writes BENCHMARKS.md.
	rm -f $(BENCH_OUT)/chaos.jsonl
	cd e2e && status=0 && { CHAOS_SCALE=$(CHAOS_SCALE) E2E_SHARED_CLUSTER=1 go test -p 1 -parallel 12 -count=1 -tags e2e -timeout 0 -v -run '^TestChaos' ./... 2>&1 | tee $(CACHE)/chaos.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic|e2e:)|chaos:|$(FAILURE_LINES)' || status=$${PIPESTATUS[0]}; }; \
	  go run ./cmd/e2edown || status=1; exit $$status
	cd e2e && go run ./cmd/benchreport -file $(ROOT)/BENCHMARKS.md -section chaos -command "make chaos CHAOS_SCALE=$(CHAOS_SCALE)"

.PHONY: fuzz
fuzz: ## Run every Go fuzz target for FUZZTIME each (their seed corpora run in `make test`).
	for m in $(MODULES); do (cd $$m && for pkg in $$(go list ./...); do \
	  for f in $$(go test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "fuzz: $$pkg $$f ($(FUZZTIME))"; go test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 5s $$pkg || exit 1; \
	  done; done) || exit 1; done

##@ Build

# Every binary of the project: the operators, the webhook server, and the e2e test app and pod sandbox
# (pause) that the local cluster's real node runs, the local cluster's volume provisioner, and the singleton's in-pod start hold (wrapper, sidecar). The package's last element is the binary's name.
BUILD_PACKAGES := $(addprefix ./,$(BINARIES)) ./singleton-operator/cmd/singleton-wrapper \
	./singleton-operator/cmd/status-sidecar ./e2e/cmd/testapp ./e2e/cmd/pause \
	./e2e/cmd/local-provisioner ./$(PLUGIN)
BUILD_NAMES    := $(notdir $(BUILD_PACKAGES))
# local-provisioner runs as a process of the local cluster (kwokctl starts it), never in a container;
# the plugin runs on the user's machine.
IMAGE_NAMES    := $(filter-out local-provisioner $(PLUGIN),$(BUILD_NAMES))
# Image tarballs of `make images`: docker-save layout, tags statefulops/<name>:$(VERSION).
IMAGES_DIR ?= $(CACHE)/images/$(VERSION)
export STATEFULOPS_IMAGES := $(IMAGES_DIR)

.PHONY: build
build: ## Build every binary (static, version-stamped) into $(BIN_DIR).
	mkdir -p $(BIN_DIR)
	# go build rewrites its output every time; keep an unchanged binary so images built from it stay fresh.
	tmp=$$(mktemp -d $(BIN_DIR)/.build.XXXXXX) && trap 'rm -rf "$$tmp"' EXIT && \
	  CGO_ENABLED=0 go build -trimpath -ldflags "$(GO_LDFLAGS)" -o $$tmp/ $(BUILD_PACKAGES) && \
	  for n in $(BUILD_NAMES); do cmp -s $$tmp/$$n $(BIN_DIR)/$$n || mv $$tmp/$$n $(BIN_DIR)/$$n; done

.PHONY: images
images: build $(CYCLONEDX_GOMOD) ## Package every binary as an image tarball in $(IMAGES_DIR) (no Docker needed), each with its CycloneDX SBOM at /sbom.cdx.json.
	mkdir -p $(IMAGES_DIR)
	cd e2e && go run ./cmd/images -out $(IMAGES_DIR) -version $(VERSION) -sbom-generator $(CYCLONEDX_GOMOD) $(foreach n,$(IMAGE_NAMES),$(n)=$(BIN_DIR)/$(n))

# The second release the upgrade tests move each operator to: the same code stamped $(VERSION)-next,
# so a Deployment really rolls to a different image (e2e/framework/upgrade.go), and the chaos
# campaigns' operator-upgrade fault restarts the operator as the other release's binary.
NEXT_VERSION := $(VERSION)-next
export STATEFULOPS_IMAGES_NEXT := $(CACHE)/images/$(NEXT_VERSION)
export STATEFULOPS_BIN_NEXT := $(CACHE)/build/$(NEXT_VERSION)

.PHONY: images-next
images-next: ## Package every binary again, stamped $(VERSION)-next, into $(STATEFULOPS_IMAGES_NEXT) (for the upgrade tests).
	$(MAKE) images VERSION=$(NEXT_VERSION) BIN_DIR=$(STATEFULOPS_BIN_NEXT) IMAGES_DIR=$(STATEFULOPS_IMAGES_NEXT)

##@ Generate and verify

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Regenerate deepcopy, CRDs and RBAC from the API and RBAC markers.
	cd shared && $(CONTROLLER_GEN) object paths=./api/...
	for pair in $(CRD_FAMILIES); do fam=$${pair%%:*}; op=$${pair##*:}; \
	  rm -rf $$op/config/crd/bases; \
	  (cd shared && $(CONTROLLER_GEN) crd:generateEmbeddedObjectMeta=true paths=./api/$$fam/... output:crd:artifacts:config=../$$op/config/crd/bases); \
	  (cd $$op && $(CONTROLLER_GEN) rbac:roleName=manager-role paths=./... output:rbac:artifacts:config=config/rbac); \
	done
	cd webhook-server && $(CONTROLLER_GEN) rbac:roleName=webhook-server-role webhook paths=./... \
	  output:rbac:artifacts:config=config/rbac output:webhook:artifacts:config=config/webhook
	cd shared && go run ./hack/crdslim -field spec.template -field spec.volumeClaimTemplates \
	  ../cluster-operator/config/crd/bases/enge.me_statefulclusters.yaml
	cd shared && go run ./hack/crdslim -field spec.template.spec -field spec.upgradeJobs.pre -field spec.upgradeJobs.post \
	  ../extended-operator/config/crd/bases/fissile.cloudfoundry.org_extendedstatefulsets.yaml
	# label selector bounds and rules controller-gen cannot generate (shared/api/selectorschema)
	cd shared && go run ./api/selectorschema/cmd/boundselectors ../*-operator/config/crd/bases/*.yaml
	# bounds on the ExtendedStatefulSet's claim templates, for its storage transition rule's cost
	cd shared && go run ./api/extended/cmd/boundclaims ../extended-operator/config/crd/bases/fissile.cloudfoundry.org_extendedstatefulsets.yaml

.PHONY: manifests
manifests: generate $(KUBECTL) ## Render deploy/<operator>.yaml from each operator's kustomize config.
	for op in $(OPERATORS); do \
	  { echo "# Generated by 'make manifests' from $$op/config/default; do not edit."; $(KUBECTL) kustomize $$op/config/default; } > deploy/$$op.yaml; \
	done
	# deploy/ha/<operator>.yaml: the same with two manager replicas, a PDB and anti-affinity (shared/config/ha).
	mkdir -p deploy/ha
	for op in $(OPERATORS); do \
	  { echo "# Generated by 'make manifests' from $$op/config/ha; do not edit."; $(KUBECTL) kustomize $$op/config/ha; } > deploy/ha/$$op.yaml; \
	done
	# docs/permissions.md lists the rules and policies of deploy/ with their reasons (e2e/permdoc).
	cd e2e && go test -count=1 -run '^TestPermissionsDoc$$' ./permdoc -update

.PHONY: verify
verify: manifests ## Fail if anything generated is stale, a module is untidy, or code is unformatted or vetted badly.
	for m in $(MODULES); do (cd $$m && GOWORK=off go mod tidy); done
	go work sync
	test -z "$$(gofmt -l $(MODULES))" || { gofmt -l $(MODULES); echo "gofmt: the files above are not formatted"; exit 1; }
	for m in $(MODULES); do (cd $$m && go vet -tags integration,e2e,bench ./...); done
	git diff --exit-code -- . || { echo "generated files, go.mod/go.sum or go.work.sum are stale: run 'make verify' and commit the result"; exit 1; }
	test -z "$$(git status --porcelain --untracked-files=all -- deploy '*/config' '*/zz_generated.deepcopy.go' go.work.sum)" || { git status --porcelain -- deploy '*/config'; echo "untracked generated files: commit them"; exit 1; }

##@ Tools (built once into $(CACHE))

.PHONY: tools
tools: kube-bin clusterdns $(KWOK_BIN)/kwokctl $(CONTROLLER_GEN) $(CYCLONEDX_GOMOD) host-deps ## Build every tool the targets need.

# Debian packages the tests use: the local cluster's real node needs a container runtime and iptables,
# the PhasedRollout checks run against a real Prometheus server. Installed when missing on a machine
# where apt-get works (Linux, root); elsewhere the real node is off and the run says so.
HOST_PACKAGES := containerd runc containernetworking-plugins iptables conntrack prometheus
.PHONY: host-deps
host-deps: ## Install the Debian packages the tests use (containerd, runc, CNI plugins, iptables, prometheus) when missing.
	if [ "$$(id -u)" = 0 ] && [ "$$(uname -s)" = Linux ] && command -v apt-get >/dev/null; then \
	  missing=$$(for p in $(HOST_PACKAGES); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	  if [ -n "$$missing" ]; then \
	    echo "host-deps: installing" $$missing; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	  fi; \
	else \
	  echo "host-deps: not root on Debian-like Linux; the local cluster runs without its real node"; \
	fi

.PHONY: kube-bin
kube-bin: $(addprefix $(KUBE_BIN)/,$(KUBE_COMPONENTS) etcd)

$(addprefix $(KUBE_BIN)/,$(KUBE_COMPONENTS)): $(KUBE_BIN)/%:
	mkdir -p $(KUBE_BIN)
	cd e2e/tools/kube && GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags "$(KUBE_LDFLAGS)" -o $@.tmp k8s.io/kubernetes/cmd/$* && mv $@.tmp $@

# The local cluster's DNS (e2e/tools/clusterdns: CoreDNS, its version pinned in that module's go.mod,
# with only the kubernetes and errors plugins), beside the Kubernetes components, where the local
# cluster looks for it. Its main is this repository's, so it is built on every `make tools` rather than
# once per version: with the Go build cache that is a link when nothing changed. An unchanged binary
# is kept, so a running cluster's DNS is left alone.
.PHONY: clusterdns
clusterdns: ## Build the local cluster's DNS (CoreDNS with the kubernetes plugin) into the Kubernetes components' dir.
	mkdir -p $(KUBE_BIN)
	tmp=$$(mktemp -d $(KUBE_BIN)/.clusterdns.XXXXXX) && trap 'rm -rf "$$tmp"' EXIT && \
	  (cd e2e/tools/clusterdns && GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o $$tmp/clusterdns .) && \
	  { cmp -s $$tmp/clusterdns $(KUBE_BIN)/clusterdns || mv $$tmp/clusterdns $(KUBE_BIN)/clusterdns; }

$(KUBE_BIN)/etcd:
	mkdir -p $(KUBE_BIN)
	cd e2e/tools/etcd && GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o $@.tmp go.etcd.io/etcd/server/v3 && mv $@.tmp $@

$(KWOK_BIN)/kwokctl:
	mkdir -p $(KWOK_BIN)
	GOBIN=$(KWOK_BIN) CGO_ENABLED=0 GOWORK=off go install sigs.k8s.io/kwok/cmd/kwok@$(KWOK_VERSION) sigs.k8s.io/kwok/cmd/kwokctl@$(KWOK_VERSION)

$(CONTROLLER_GEN):
	mkdir -p $(dir $@)
	tmp=$$(mktemp -d) && GOBIN=$$tmp CGO_ENABLED=0 GOWORK=off go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION) && mv $$tmp/controller-gen $@ && rm -rf $$tmp

$(CYCLONEDX_GOMOD):
	mkdir -p $(dir $@)
	tmp=$$(mktemp -d) && GOBIN=$$tmp CGO_ENABLED=0 GOWORK=off go install github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@$(CYCLONEDX_GOMOD_VERSION) && mv $$tmp/cyclonedx-gomod $@ && rm -rf $$tmp

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  %-18s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)
