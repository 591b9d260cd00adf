#!/usr/bin/env bash
# The no-cluster demo: an API server + the example operators, driven with real kubectl.
#
#   scripts/demo.sh            start, apply the samples, show them converge, keep running (Ctrl-C stops)
#   scripts/demo.sh --check    same, but stop after the samples are Successful (exit 0) or failed (exit 1)
#   scripts/demo.sh --real     on the real control plane (`ansible-operator cluster up`: etcd, kube-apiserver,
#                              controller-manager, scheduler, kwok) instead of the embedded sandbox; the
#                              samples' Deployments and StatefulSets get pods that become Ready on kwok's
#                              fake node. Builds the binaries the first time (~10-30 min; KUBEBUILDER_ASSETS
#                              is used when set). DEMO_API=real does the same.
#
# Extra arguments are passed to `ansible-operator run` (e.g. --executor warm).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
CHECK=0
API=${DEMO_API:-sandbox}
while [ $# -gt 0 ]; do
  case "$1" in
    --check) CHECK=1; shift ;;
    --real) API=real; shift ;;
    --sandbox) API=sandbox; shift ;;
    *) break ;;
  esac
done

STATE=$(mktemp -d "${TMPDIR:-/tmp}/ansible-operator-demo.XXXXXX")
KUBECONFIG_PATH="$STATE/$API.kubeconfig"
LOG="$STATE/operator.log"
K="kubectl --kubeconfig $KUBECONFIG_PATH"

# The example roles use no Ansible facts: skip gathering them (~1 s per run), as the runner image does.
export ANSIBLE_GATHERING=${ANSIBLE_GATHERING:-explicit}
CP=
if [ "$API" = real ]; then
  "$VENV/bin/ansible-operator" cluster build
  "$VENV/bin/ansible-operator" cluster up --dir "$STATE/cluster" --kubeconfig "$KUBECONFIG_PATH" --crds crds \
    >"$STATE/cluster.log" 2>&1 &
  CP=$!
  for _ in $(seq 1 1200); do
    grep -q "^kubeconfig:" "$STATE/cluster.log" 2>/dev/null && break
    if ! kill -0 "$CP" 2>/dev/null; then echo "control plane exited:"; cat "$STATE/cluster.log"; exit 1; fi
    sleep 0.2
  done
  echo "==> real control plane up (etcd, kube-apiserver, controller-manager, scheduler, kwok; logs: $STATE/cluster/logs)"
  "$VENV/bin/ansible-operator" run --kubeconfig "$KUBECONFIG_PATH" \
    --watches-file watches.yaml --artifacts-dir "$STATE/runs" \
    --metrics-bind-address 127.0.0.1:0 --health-probe-bind-address 127.0.0.1:0 "$@" >"$LOG" 2>&1 &
else
  "$VENV/bin/ansible-operator" run --sandbox --sandbox-kubeconfig "$KUBECONFIG_PATH" \
    --watches-file watches.yaml --artifacts-dir "$STATE/runs" \
    --metrics-bind-address 127.0.0.1:0 --health-probe-bind-address 127.0.0.1:0 "$@" >"$LOG" 2>&1 &
fi
OP=$!
PROGRESS=
cleanup() {
  local rc=$?
  if [ -n "$PROGRESS" ]; then kill "$PROGRESS" 2>/dev/null || true; fi
  kill -TERM "$OP" 2>/dev/null || true; wait "$OP" 2>/dev/null || true
  if [ -n "$CP" ]; then kill -TERM "$CP" 2>/dev/null || true; wait "$CP" 2>/dev/null || true; fi
  # a passing --check leaves nothing behind; a failing one, or an interactive demo, keeps its logs
  if [ "$CHECK" = 1 ] && [ "$rc" = 0 ]; then rm -rf "$STATE"; fi
}
trap cleanup EXIT

# One line every 10 s while kubectl waits: which samples are Successful yet.
progress() {
  while sleep 10; do
    echo "    ... Successful: $($K get -n demo memcached,sampledb,etcdcluster -o jsonpath='{range .items[*]}{.kind}/{.metadata.name}={.status.conditions[?(@.type=="Successful")].status} {end}' 2>/dev/null | sed -e 's/= /=not-yet /g' -e 's/=$/=not-yet/')"
  done
}

echo "==> starting the operator (log: $LOG)"
for _ in $(seq 1 150); do
  [ -s "$KUBECONFIG_PATH" ] && grep -q "operator ready" "$LOG" && break
  if ! kill -0 "$OP" 2>/dev/null; then echo "operator exited:"; cat "$LOG"; exit 1; fi
  sleep 0.2
done
echo "==> $API API server and operator are up"
echo "==> kubeconfig: $KUBECONFIG_PATH"
echo
echo "\$ kubectl apply -k config/samples"
$K create namespace demo >/dev/null
$K apply -n demo -k config/samples
echo
echo "\$ kubectl wait --for=condition=Successful -n demo memcached,sampledb,etcdcluster --all --timeout=180s"
progress & PROGRESS=$!
if ! $K wait --for=condition=Successful -n demo memcached,sampledb,etcdcluster --all --timeout=180s; then
  echo "!! not all samples reached Successful; conditions:"
  $K get -n demo memcached,sampledb,etcdcluster -o yaml | grep -A6 "conditions:" || true
  tail -50 "$LOG"
  exit 1
fi
kill "$PROGRESS" 2>/dev/null || true; PROGRESS=
echo
echo "\$ kubectl get -n demo memcached,sampledb,etcdcluster,deployments,statefulsets,services,cronjobs"
$K get -n demo memcached,sampledb,etcdcluster,deployments,statefulsets,services,cronjobs
if [ "$API" = real ]; then
  # real controllers and kwok's node: the workloads the roles created really roll out
  echo
  echo "\$ kubectl wait --for=condition=Available -n demo deployments --all --timeout=180s"
  $K wait --for=condition=Available -n demo deployments --all --timeout=180s
  for sts in $($K get -n demo statefulsets -o name); do
    echo "\$ kubectl rollout status -n demo $sts --timeout=180s"
    $K rollout status -n demo "$sts" --timeout=180s
  done
  echo
  echo "\$ kubectl get -n demo pods,pvc -o wide"
  $K get -n demo pods,pvc -o wide
fi
echo
echo "\$ ansible-operator runs --namespace demo"
"$VENV/bin/ansible-operator" runs --namespace demo --artifacts-dir "$STATE/runs" || true
if [ "$CHECK" = 1 ]; then exit 0; fi
echo
echo "The operator keeps running. In another terminal:"
echo "  export KUBECONFIG=$KUBECONFIG_PATH"
echo "  kubectl patch -n demo memcached memcached-sample --type merge -p '{\"spec\":{\"size\":3}}'"
echo "  kubectl get -n demo deployments -w"
echo "Ctrl-C stops the operator and the $API API server."
wait "$OP"
