#!/usr/bin/env bash
# A throw-away single-node Ceph (one mon, one mgr, one BlueStore OSD on a
# sparse file) for the RBD tests and for developers. Everything — conf,
# keyrings, run dir, pid files, logs, crash dumps, daemon data — lives under
# DIR, so `stop` is "TERM the daemons by their pid files, rm -rf DIR".
#
#   hack/ceph-cluster.sh start DIR   start (DIR must be absent or empty)
#   hack/ceph-cluster.sh env DIR     print the KEY=VALUE lines again
#   hack/ceph-cluster.sh stop DIR    stop the daemons and remove DIR
#
# `start` and `env` print KEY=VALUE lines on stdout (progress goes to stderr):
# CEPH_CONF, CEPH_KEYRING (client.admin), BLOCKCSI_CEPH_USER and
# BLOCKCSI_CEPH_KEYRING (a user with the caps the driver needs: profile rbd
# plus `osd blocklist` to lift fences), RBD_POOL, CEPH_MON_HOST.
#
# The monitor listens on two random free ports on 127.0.0.1 (not 3300/6789)
# so that several test clusters and a developer's cluster can coexist; the
# mgr and OSD take ephemeral ports from Ceph's own range.
# CEPH_CLUSTER_ADDR=IP puts every daemon on that address instead (one the
# caller owns, e.g. in its own network namespace, for clients that are not on
# this machine's loopback: the VM tests' kernel RBD client). Needs root (Ceph
# daemons and apt-get). Facts behind the settings: /work/shared/CEPH.md.
set -euo pipefail

readonly MARKER=".blockcsi-ceph-cluster"
readonly POOL="rbd"
readonly OSD_BLOCK_BYTES=$((10 * 1024 * 1024 * 1024)) # sparse; tests write little
readonly READY_TIMEOUT_S="${CEPH_CLUSTER_READY_TIMEOUT:-180}"
readonly ADDR="${CEPH_CLUSTER_ADDR:-127.0.0.1}"
readonly PACKAGES=(ceph-mon ceph-mgr ceph-osd ceph-common librbd-dev librados-dev)

log() { echo "ceph-cluster: $*" >&2; }
die() {
  log "$*"
  exit 1
}

usage() {
  echo "usage: $0 start|stop|env DIR" >&2
  exit 2
}

ensure_packages() {
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
      missing+=("$p")
    fi
  done
  [ "${#missing[@]}" -eq 0 ] && return 0
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
}

# A TCP port nobody listens on right now. Another process may still take it
# before the mon binds; start_mon retries with fresh ports when that happens.
free_port() {
  local p _
  for _ in $(seq 1 200); do
    p=$((20000 + RANDOM % 30000))
    if [ -z "$(ss -Hltn "sport = :$p" 2>/dev/null)" ]; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

# A process counts as stopped when it is gone or a zombie: PID 1 on these
# machines reaps late, and a zombie holds no ports, files or locks.
alive() {
  local pid="$1" state
  [ -r "/proc/$pid/stat" ] || return 1
  state="$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || true)"
  [ -n "$state" ] && [ "$state" != "Z" ]
}

env_lines() {
  local dir="$1"
  cat <<EOF
CEPH_CONF=$dir/ceph.conf
CEPH_KEYRING=$dir/ceph.client.admin.keyring
CEPH_USER=admin
BLOCKCSI_CEPH_USER=blockcsi
BLOCKCSI_CEPH_KEYRING=$dir/ceph.client.blockcsi.keyring
RBD_POOL=$POOL
CEPH_MON_HOST=$(cat "$dir/mon_host")
EOF
}

write_conf() {
  local dir="$1" fsid="$2" mon_host="$3"
  # '$name', '$id' and '$cluster' are Ceph's own metavariables, not shell's.
  # shellcheck disable=SC2016
  {
    echo "[global]"
    echo "fsid = $fsid"
    echo "mon host = $mon_host"
    echo "mon initial members = a"
    if [ "$ADDR" = 127.0.0.1 ]; then
      echo "public network = 127.0.0.0/8"
    else
      # Daemons bind the one address of this network the host has.
      echo "public network = $ADDR/32"
    fi
    echo "ms bind ipv4 = true"
    echo "ms bind ipv6 = false"
    echo "auth cluster required = cephx"
    echo "auth service required = cephx"
    echo "auth client required = cephx"
    echo "auth allow insecure global id reclaim = false"
    echo "keyring = $dir/ceph.client.admin.keyring"
    echo "run dir = $dir/run"
    echo "pid file = $dir/run/\$name.pid"
    echo "log file = $dir/log/\$name.log"
    echo "crash dir = $dir/crash"
    echo "exporter sock dir = $dir/run"
    echo "osd pool default size = 1"
    echo "osd pool default min size = 1"
    echo "osd pool default pg autoscale mode = off"
    echo "osd crush chooseleaf type = 0"
    echo "mon allow pool size one = true"
    echo "mon allow pool delete = true"
    echo "mon warn on pool no redundancy = false"
    echo "mon data avail warn = 5"
    echo "mon data avail crit = 1"
    echo
    echo "[client]"
    # Clients (tests, the driver) get no admin socket: many short-lived
    # processes would otherwise litter run/ with sockets.
    echo "admin socket ="
    echo "log file = $dir/log/client.log"
    echo
    echo "[mon]"
    echo "mon data = $dir/mon/\$cluster-\$id"
    echo "admin socket = $dir/run/\$name.asok"
    echo
    echo "[mgr]"
    echo "mgr data = $dir/mgr/\$cluster-\$id"
    echo "keyring = $dir/mgr/\$cluster-\$id/keyring"
    echo "admin socket = $dir/run/\$name.asok"
    echo
    echo "[osd]"
    echo "osd data = $dir/osd/\$cluster-\$id"
    echo "keyring = $dir/osd/\$cluster-\$id/keyring"
    echo "admin socket = $dir/run/\$name.asok"
    echo "osd objectstore = bluestore"
    echo "bluestore block create = true"
    echo "bluestore block size = $OSD_BLOCK_BYTES"
    echo "osd memory target = 1073741824"
    echo "bluestore cache autotune = false"
    echo "bluestore cache size = 268435456"
    echo "osd op num shards = 2"
    echo "osd op num threads per shard = 1"
  } >"$dir/ceph.conf"
}

ceph_cmd() {
  local dir="$1"
  shift
  timeout 30 ceph --conf "$dir/ceph.conf" --name client.admin "$@"
}

start_mon() {
  local dir="$1" fsid attempt p1 p2 mon_host
  fsid="$(cat /proc/sys/kernel/random/uuid)"
  ceph-authtool --create-keyring "$dir/mon.keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
  ceph-authtool --create-keyring "$dir/ceph.client.admin.keyring" --gen-key -n client.admin \
    --cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' --cap mds 'allow *' >/dev/null
  ceph-authtool "$dir/mon.keyring" --import-keyring "$dir/ceph.client.admin.keyring" >/dev/null
  chmod 600 "$dir/mon.keyring" "$dir/ceph.client.admin.keyring"
  for attempt in 1 2 3; do
    p1="$(free_port)" || die "no free port"
    p2="$(free_port)" || die "no free port"
    [ "$p1" != "$p2" ] || continue
    mon_host="[v2:$ADDR:$p1,v1:$ADDR:$p2]"
    echo "$mon_host" >"$dir/mon_host"
    write_conf "$dir" "$fsid" "$mon_host"
    rm -rf "$dir/mon" "$dir/monmap"
    mkdir -p "$dir/mon/ceph-a"
    monmaptool --create --clobber --fsid "$fsid" --addv a "$mon_host" "$dir/monmap" >/dev/null
    ceph-mon --conf "$dir/ceph.conf" --mkfs -i a --monmap "$dir/monmap" --keyring "$dir/mon.keyring"
    if ceph-mon --conf "$dir/ceph.conf" -i a && ceph_cmd "$dir" mon stat >/dev/null 2>&1; then
      log "mon a on $mon_host"
      return 0
    fi
    log "mon did not come up on $mon_host (attempt $attempt); retrying with other ports"
    stop_daemons "$dir"
  done
  die "mon failed to start; see $dir/log/mon.a.log"
}

start_mgr() {
  local dir="$1"
  mkdir -p "$dir/mgr/ceph-x"
  ceph_cmd "$dir" auth get-or-create mgr.x mon 'allow profile mgr' osd 'allow *' mds 'allow *' \
    -o "$dir/mgr/ceph-x/keyring"
  ceph-mgr --conf "$dir/ceph.conf" -i x
}

start_osd() {
  local dir="$1" uuid secret id
  uuid="$(cat /proc/sys/kernel/random/uuid)"
  secret="$(ceph-authtool --gen-print-key)"
  # The key goes through a 0600 file, never through argv.
  (umask 077 && printf '{"cephx_secret": "%s"}\n' "$secret" >"$dir/osd-secret.json")
  id="$(ceph_cmd "$dir" osd new "$uuid" -i "$dir/osd-secret.json")"
  rm -f "$dir/osd-secret.json"
  mkdir -p "$dir/osd/ceph-$id"
  # From the mon rather than `ceph-authtool --add-key`, which would put the key in argv.
  ceph_cmd "$dir" auth get "osd.$id" -o "$dir/osd/ceph-$id/keyring" 2>/dev/null
  ceph-osd --conf "$dir/ceph.conf" -i "$id" --mkfs --osd-uuid "$uuid" >>"$dir/log/osd-mkfs.log" 2>&1 ||
    die "osd mkfs failed; see $dir/log/osd-mkfs.log and $dir/log/osd.$id.log"
  ceph-osd --conf "$dir/ceph.conf" -i "$id" 2>>"$dir/log/osd-start.log"
}

# The driver's own user, with the caps a production deployment would give it:
# `profile rbd` lets it manage images and blocklist clients (fencing), but
# only `osd blocklist add`: lifting a fence (`rm`) needs the extra command cap.
create_driver_user() {
  local dir="$1"
  ceph_cmd "$dir" auth get-or-create client.blockcsi \
    mon 'profile rbd, allow command "osd blocklist"' osd "profile rbd pool=$POOL" mgr "profile rbd pool=$POOL" \
    -o "$dir/ceph.client.blockcsi.keyring"
  chmod 600 "$dir/ceph.client.blockcsi.keyring"
}

wait_ready() {
  local dir="$1" deadline health pgs
  deadline=$((SECONDS + READY_TIMEOUT_S))
  while [ "$SECONDS" -lt "$deadline" ]; do
    health="$(ceph_cmd "$dir" health 2>/dev/null || true)"
    pgs="$(ceph_cmd "$dir" pg stat 2>/dev/null || true)"
    # "N pgs: N active+clean; ..." with every PG clean and the mgr's stats in.
    if [ "$health" = "HEALTH_OK" ] && [[ "$pgs" =~ ^([0-9]+)\ pgs:\ ([0-9]+)\ active\+clean\; ]] &&
      [ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[2]}" ] && [ "${BASH_REMATCH[1]}" != "0" ]; then
      return 0
    fi
    sleep 0.5
  done
  log "not ready after ${READY_TIMEOUT_S}s: health '$health', pgs '$pgs'"
  ceph_cmd "$dir" health detail >&2 || true
  return 1
}

cmd_start() {
  local dir="$1" t0=$SECONDS
  [ "$(id -u)" = 0 ] || die "needs root"
  if [ -e "$dir" ] && [ -n "$(ls -A "$dir")" ]; then
    die "$dir exists and is not empty"
  fi
  ensure_packages
  mkdir -p "$dir"/{run,log,crash}
  touch "$dir/$MARKER"
  # On any failure below (set -e exits from inside functions, where an ERR
  # trap would not fire), leave nothing running; DIR stays for its logs.
  trap 'log "start failed; stopping the daemons (logs in $dir/log)"; stop_daemons "$dir"' EXIT
  start_mon "$dir"
  log "+$((SECONDS - t0))s mon up"
  start_mgr "$dir"
  start_osd "$dir"
  log "+$((SECONDS - t0))s mgr and osd started"
  ceph_cmd "$dir" osd pool create "$POOL" 8 8 >/dev/null 2>&1
  timeout 60 rbd --conf "$dir/ceph.conf" --name client.admin pool init "$POOL"
  log "+$((SECONDS - t0))s pool $POOL ready"
  create_driver_user "$dir"
  wait_ready "$dir"
  trap - EXIT
  log "ready in $((SECONDS - t0))s"
  env_lines "$dir"
}

# TERM each daemon by its pid file (osd, mgr, then mon, so that nobody
# waits on a vanished mon), then KILL whatever outlives the grace period.
stop_daemons() {
  local dir="$1" f pid comm waited
  for f in "$dir"/run/osd.*.pid "$dir"/run/mgr.*.pid "$dir"/run/mon.*.pid; do
    [ -f "$f" ] || continue
    pid="$(cat "$f")"
    [[ "$pid" =~ ^[0-9]+$ ]] || continue
    # Never signal a recycled pid that is no longer a Ceph daemon.
    comm="$(cat "/proc/$pid/comm" 2>/dev/null || true)"
    [[ "$comm" == ceph-* ]] || continue
    kill -TERM "$pid" 2>/dev/null || true
    waited=0
    while alive "$pid" && [ "$waited" -lt 100 ]; do
      sleep 0.1
      waited=$((waited + 1))
    done
    if alive "$pid"; then
      log "$(basename "$f" .pid) ignored TERM; killing"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
}

cmd_stop() {
  local dir="$1"
  [ -e "$dir" ] || return 0
  # A typo must never turn this into `rm -rf` of something else.
  [ -f "$dir/$MARKER" ] || die "$dir is not a cluster directory of this script"
  stop_daemons "$dir"
  rm -rf "$dir"
}

cmd_env() {
  local dir="$1"
  if [ ! -f "$dir/$MARKER" ] || [ ! -f "$dir/mon_host" ]; then
    die "no cluster in $dir"
  fi
  env_lines "$dir"
}

[ "$#" -eq 2 ] || usage
case "$2" in
/*) dir="$2" ;;
*) dir="$(pwd)/$2" ;;
esac
dir="${dir%/}"
case "$1" in
start) cmd_start "$dir" ;;
stop) cmd_stop "$dir" ;;
env) cmd_env "$dir" ;;
*) usage ;;
esac
