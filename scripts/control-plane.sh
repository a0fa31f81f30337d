#!/usr/bin/env bash
# A real Kubernetes control plane on 127.0.0.1 from the user's own binaries: etcd and
# kube-apiserver, and when asked kube-controller-manager and kube-scheduler, each
# with generated certificates in a private state directory. The control-plane tests
# and switchyard-k8s-bench start one per test through this script.
#
#   scripts/control-plane.sh check [--with-controller-manager] [--with-scheduler]
#   scripts/control-plane.sh start [--with-controller-manager] [--with-scheduler]
#   eval "$(scripts/control-plane.sh env)"      # KUBECONFIG, K8S_APISERVER_URL
#   scripts/control-plane.sh restart etcd|kube-apiserver|kube-controller-manager|kube-scheduler SECONDS_DOWN
#   scripts/control-plane.sh stop
#
# Binaries are looked up in $SWITCHYARD_K8S_BIN, then in $KUBEBUILDER_ASSETS
# (controller-runtime envtest's convention: `setup-envtest use 1.36.x` prints it;
# envtest ships etcd, kube-apiserver and kubectl, not kube-controller-manager or
# kube-scheduler), then etcd alone on the PATH (Debian's etcd-server). Versions 1.26
# to 1.36 are supported.
#
# K8S_STATE_DIR     the control plane's directory (default target/k8s-dev): pki/
#                   (ca.crt, admin.token: a static system:masters bearer token),
#                   logs/<binary>.log, run/<binary>.pid, etcd/, kubeconfig (admin)
# K8S_PORT_BASE     kube-apiserver's port; etcd client and peer, controller-manager
#                   and scheduler take the next four (default 16443)
# K8S_STOP_TIMEOUT  seconds `stop` waits after SIGTERM before SIGKILL (0: SIGKILL)
#
# Exit status: 0 done, 1 failed, 3 a binary is missing (the message names it).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
state=${K8S_STATE_DIR:-$here/target/k8s-dev}
base=${K8S_PORT_BASE:-16443}
stop_timeout=${K8S_STOP_TIMEOUT:-10}
apiserver_port=$base
etcd_port=$((base + 1))
etcd_peer_port=$((base + 2))
cm_port=$((base + 3))
sched_port=$((base + 4))

die() { echo "control-plane.sh: $*" >&2; exit 1; }

# find NAME: the path of binary NAME, or exit 3 naming where it was looked for.
find_bin() {
  local name=$1 d
  for d in "${SWITCHYARD_K8S_BIN:-}" "${KUBEBUILDER_ASSETS:-}"; do
    if [[ -n $d && -x $d/$name ]]; then
      echo "$d/$name"
      return 0
    fi
  done
  if [[ $name == etcd ]] && command -v etcd >/dev/null 2>&1; then
    command -v etcd
    return 0
  fi
  echo "control-plane.sh: $name not found: set SWITCHYARD_K8S_BIN to a folder holding it, or KUBEBUILDER_ASSETS to envtest's assets (etcd, kube-apiserver; kube-controller-manager and kube-scheduler only from SWITCHYARD_K8S_BIN); looked in SWITCHYARD_K8S_BIN=${SWITCHYARD_K8S_BIN:-<unset>} KUBEBUILDER_ASSETS=${KUBEBUILDER_ASSETS:-<unset>}" >&2
  exit 3
}

with_cm=false
with_sched=false
parse_components() {
  local a
  for a in "$@"; do
    case $a in
      --with-controller-manager) with_cm=true ;;
      --with-scheduler) with_sched=true ;;
      *) die "unknown option $a" ;;
    esac
  done
}

# The binaries a start needs, as variables (exits 3 when one is missing).
resolve_bins() {
  etcd_bin=$(find_bin etcd)
  apiserver_bin=$(find_bin kube-apiserver)
  if $with_cm; then cm_bin=$(find_bin kube-controller-manager); fi
  if $with_sched; then sched_bin=$(find_bin kube-scheduler); fi
  command -v openssl >/dev/null 2>&1 || die "openssl is needed for the certificates (Debian package openssl)"
}

# cert NAME CN ORG EXT: a key and a certificate signed by the CA, with the extensions
# EXT (an openssl extension section body).
cert() {
  local name=$1 cn=$2 org=$3 ext=$4 subj
  subj="/CN=$cn"
  [[ -n $org ]] && subj="/O=$org$subj"
  openssl genrsa -out "$state/pki/$name.key" 2048 2>/dev/null
  openssl req -new -key "$state/pki/$name.key" -subj "$subj" -out "$state/pki/$name.csr" 2>/dev/null
  printf '%s\n' "$ext" >"$state/pki/$name.ext"
  openssl x509 -req -in "$state/pki/$name.csr" -CA "$state/pki/ca.crt" -CAkey "$state/pki/ca.key" \
    -CAcreateserial -days 3650 -sha256 -extfile "$state/pki/$name.ext" -out "$state/pki/$name.crt" 2>/dev/null
  rm -f "$state/pki/$name.csr" "$state/pki/$name.ext"
}

# kubeconfig FILE USER: a kubeconfig authenticating with USER's certificate.
kubeconfig() {
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:$apiserver_port
    certificate-authority: $state/pki/ca.crt
users:
- name: $2
  user:
    client-certificate: $state/pki/$2.crt
    client-key: $state/pki/$2.key
contexts:
- name: local
  context: {cluster: local, user: $2}
current-context: local
EOF
}

make_pki() {
  [[ -f $state/pki/ca.crt ]] && return 0
  mkdir -p "$state/pki"
  printf '[req]\ndistinguished_name=dn\n[dn]\n[v3]\nbasicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign,digitalSignature\nsubjectKeyIdentifier=hash\n' >"$state/pki/ca.cnf"
  openssl genrsa -out "$state/pki/ca.key" 2048 2>/dev/null
  openssl req -x509 -new -key "$state/pki/ca.key" -subj "/CN=switchyard-test-ca" -days 3650 -sha256 \
    -config "$state/pki/ca.cnf" -extensions v3 -out "$state/pki/ca.crt" 2>/dev/null
  local client='basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth'
  cert apiserver kube-apiserver "" 'basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local'
  cert admin admin system:masters "$client"
  cert kube-controller-manager system:kube-controller-manager "" "$client"
  cert kube-scheduler system:kube-scheduler "" "$client"
  openssl genrsa -out "$state/pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$state/pki/sa.key" -pubout -out "$state/pki/sa.pub" 2>/dev/null
  kubeconfig "$state/kubeconfig" admin
  kubeconfig "$state/kube-controller-manager.kubeconfig" kube-controller-manager
  kubeconfig "$state/kube-scheduler.kubeconfig" kube-scheduler
  openssl rand -hex 16 >"$state/pki/admin.token"
  echo "$(cat "$state/pki/admin.token"),admin-token,admin-token,system:masters" >"$state/pki/tokens.csv"
  # kube-scheduler's own client limits as high as the benchmarks need, no election.
  cat >"$state/kube-scheduler-config.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: "$state/kube-scheduler.kubeconfig", qps: 5000, burst: 5000}
leaderElection: {leaderElect: false}
enableProfiling: false
EOF
}

# The command line of a component, one argument per line (kept for restarts).
component_args() {
  case $1 in
    etcd)
      printf '%s\n' "$etcd_bin" --name default --data-dir "$state/etcd" \
        --listen-client-urls "http://127.0.0.1:$etcd_port" \
        --advertise-client-urls "http://127.0.0.1:$etcd_port" \
        --listen-peer-urls "http://127.0.0.1:$etcd_peer_port" \
        --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
        --initial-cluster "default=http://127.0.0.1:$etcd_peer_port"
      # Tests do not need durability (etcd 3.5+ has the flag; Debian's 3.4 does not).
      local help
      help=$("$etcd_bin" --help 2>&1 || true)
      if [[ $help == *--unsafe-no-fsync* ]]; then echo --unsafe-no-fsync; fi
      ;;
    kube-apiserver)
      printf '%s\n' "$apiserver_bin" \
        --etcd-servers "http://127.0.0.1:$etcd_port" \
        --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$apiserver_port" \
        --tls-cert-file "$state/pki/apiserver.crt" --tls-private-key-file "$state/pki/apiserver.key" \
        --client-ca-file "$state/pki/ca.crt" \
        --token-auth-file "$state/pki/tokens.csv" \
        --service-account-issuer https://kubernetes.default.svc.cluster.local \
        --service-account-key-file "$state/pki/sa.pub" \
        --service-account-signing-key-file "$state/pki/sa.key" \
        --service-cluster-ip-range 10.0.0.0/24 \
        --authorization-mode Node,RBAC \
        --allow-privileged=true \
        --disable-admission-plugins ServiceAccount \
        --profiling=false
      ;;
    kube-controller-manager)
      printf '%s\n' "$cm_bin" \
        --kubeconfig "$state/kube-controller-manager.kubeconfig" \
        --authentication-kubeconfig "$state/kube-controller-manager.kubeconfig" \
        --authorization-kubeconfig "$state/kube-controller-manager.kubeconfig" \
        --bind-address 127.0.0.1 --secure-port "$cm_port" \
        --leader-elect=false --use-service-account-credentials=true \
        --service-account-private-key-file "$state/pki/sa.key" \
        --root-ca-file "$state/pki/ca.crt" \
        --cluster-signing-cert-file "$state/pki/ca.crt" --cluster-signing-key-file "$state/pki/ca.key" \
        --controllers '*,-nodelifecycle' --profiling=false
      # No kubelets: node lifecycle would taint every node not-ready. ("nodelifecycle"
      # is an alias of node-lifecycle-controller from 1.28 on. From 1.29 NoExecute
      # eviction is taint-eviction-controller, still running; tests set no such taint.)
      ;;
    kube-scheduler)
      printf '%s\n' "$sched_bin" \
        --config "$state/kube-scheduler-config.yaml" \
        --authentication-kubeconfig "$state/kube-scheduler.kubeconfig" \
        --authorization-kubeconfig "$state/kube-scheduler.kubeconfig" \
        --bind-address 127.0.0.1 --secure-port "$sched_port"
      ;;
  esac
}

start_component() {
  local c=$1 args=()
  mapfile -t args <"$state/run/$c.args"
  mkdir -p "$state/logs"
  setsid "${args[@]}" >>"$state/logs/$c.log" 2>&1 </dev/null &
  echo $! >"$state/run/$c.pid"
}

alive() { [[ -f $state/run/$1.pid ]] && kill -0 "$(cat "$state/run/$1.pid")" 2>/dev/null; }

# wait_ready COMPONENT: until it answers (or died: exit 1 with its log's tail).
wait_ready() {
  local c=$1 i
  for ((i = 0; i < 1200; i++)); do
    alive "$c" || { echo "control-plane.sh: $c exited; the end of $state/logs/$c.log:" >&2; tail -n 30 "$state/logs/$c.log" >&2; exit 1; }
    case $c in
      etcd) (exec 3<>"/dev/tcp/127.0.0.1/$etcd_port") 2>/dev/null && return 0 ;;
      kube-apiserver)
        if command -v curl >/dev/null 2>&1; then
          [[ $(curl -s --max-time 2 --cacert "$state/pki/ca.crt" --cert "$state/pki/admin.crt" \
            --key "$state/pki/admin.key" "https://127.0.0.1:$apiserver_port/readyz" || true) == ok ]] && return 0
        else
          (exec 3<>"/dev/tcp/127.0.0.1/$apiserver_port") 2>/dev/null && return 0
        fi
        ;;
      kube-controller-manager) (exec 3<>"/dev/tcp/127.0.0.1/$cm_port") 2>/dev/null && return 0 ;;
      kube-scheduler) (exec 3<>"/dev/tcp/127.0.0.1/$sched_port") 2>/dev/null && return 0 ;;
    esac
    sleep 0.1
  done
  echo "control-plane.sh: $c not ready after 120 s; see $state/logs/$c.log" >&2
  exit 1
}

components() {
  local c
  for c in etcd kube-apiserver kube-controller-manager kube-scheduler; do
    [[ -f $state/run/$c.args ]] && echo "$c"
  done
}

kill_component() {
  local c=$1 sig=$2 pid i
  [[ -f $state/run/$c.pid ]] || return 0
  pid=$(cat "$state/run/$c.pid")
  kill "-$sig" "$pid" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  rm -f "$state/run/$c.pid"
}

cmd=${1:-}
shift || true
case $cmd in
  check)
    parse_components "$@"
    resolve_bins
    for b in "$etcd_bin" "$apiserver_bin" ${cm_bin:-} ${sched_bin:-}; do
      echo "$b: $("$b" --version 2>&1 | head -1)"
    done
    # kube-apiserver 1.31+ turns watch-progress requests off for older etcd
    # (storage/feature/feature_support_checker.go): consistent lists then go to
    # etcd, not the watch cache, and streaming lists fall back to plain lists.
    ev=$("$etcd_bin" --version 2>&1 | sed -n 's/^etcd Version: //p' | head -1)
    if [[ $ev =~ ^3\.4\.([0-9]+) && ${BASH_REMATCH[1]} -lt 31 ]] || [[ $ev =~ ^3\.5\.([0-9]+) && ${BASH_REMATCH[1]} -lt 13 ]]; then
      echo "control-plane.sh: note: etcd $ev is older than 3.4.31/3.5.13; kube-apiserver 1.31+ serves consistent lists from etcd with it (envtest's etcd is newer)" >&2
    fi
    ;;
  start)
    parse_components "$@"
    resolve_bins
    mkdir -p "$state/run" "$state/logs"
    make_pki
    cs=(etcd kube-apiserver)
    $with_cm && cs+=(kube-controller-manager)
    $with_sched && cs+=(kube-scheduler)
    for c in "${cs[@]}"; do
      component_args "$c" >"$state/run/$c.args"
      start_component "$c"
      wait_ready "$c"
    done
    echo "control plane up: https://127.0.0.1:$apiserver_port (KUBECONFIG=$state/kubeconfig)"
    ;;
  env)
    echo "export KUBECONFIG=$state/kubeconfig K8S_APISERVER_URL=https://127.0.0.1:$apiserver_port"
    ;;
  restart)
    c=${1:?restart needs a component: etcd, kube-apiserver, kube-controller-manager or kube-scheduler}
    [[ $c == etcd || $c == kube-* ]] || c=kube-$c
    down=${2:-0}
    [[ -f $state/run/$c.args ]] || die "$c is not part of the control plane in $state"
    kill_component "$c" KILL
    sleep "$down"
    start_component "$c"
    wait_ready "$c"
    ;;
  stop)
    [[ -d $state/run ]] || exit 0
    sig=TERM
    [[ $stop_timeout == 0 ]] && sig=KILL
    for c in $(components | tac); do kill_component "$c" "$sig"; done
    for c in $(components | tac); do kill_component "$c" KILL; done
    rm -rf "$state/run"
    ;;
  *)
    sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'
    [[ $cmd == -h || $cmd == --help || $cmd == help ]] || exit 1
    ;;
esac
