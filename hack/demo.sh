#!/usr/bin/env bash
# hack/demo.sh: one volume's whole lifecycle on this machine, step by step,
# with each step's time. A private tgtd on its own ports, then
#   blockcsi --mode all --backend local --connector userspace
# driven over its CSI socket by csi-call:
#   CreateVolume -> ControllerPublish -> NodeStage -> NodePublish -> write and
#   read a file -> NodeUnpublish -> NodeUnstage -> ControllerUnpublish -> DeleteVolume
# Cleans up after itself (mounts, loop devices, FUSE bridges, processes by
# pid, the work directory), also when a step fails. Run as root on Debian 12.
#   SKIP_BUILD=1 BIN_DIR=/path/to/bin hack/demo.sh   reuse an existing build
#   KEEP_LOG=/tmp/plugin.log hack/demo.sh             keep the plugin's log
#   PLUGIN_WRAPPER="valgrind --tool=callgrind" hack/demo.sh
#                          run the plugin under a tool (words split on spaces;
#                          hack/profile-text-layout.sh profiles it this way)
#   hack/demo.sh --rbd     the same lifecycle on Ceph RBD: a throw-away
#                          single-node Ceph (hack/ceph-cluster.sh) under the
#                          work dir instead of tgtd, and
#                          blockcsi --backend rbd ... --connector userspace;
#                          NodeStage gets the cephx user and key as node-stage
#                          secrets (userID/userKey, the key read from the
#                          cluster's BLOCKCSI_CEPH_KEYRING, never on argv).
set -euo pipefail
cd "$(dirname "$0")/.."

rbd=0
for arg in "$@"; do
  case "$arg" in
    --rbd) rbd=1 ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "$0" | sed '$d'
      exit 0
      ;;
    *)
      echo "demo.sh: unknown argument $arg (want --rbd or nothing)" >&2
      exit 2
      ;;
  esac
done

if [ "$(id -u)" -ne 0 ]; then
  echo "demo.sh: run as root (tgtd, loop devices, FUSE and mount need it)" >&2
  exit 1
fi

if [ "${SKIP_BUILD:-0}" != "1" ]; then
  hack/install-deps.sh
  # Only the two programs this demo runs (the bridge is blockcsi itself).
  BUILD_TARGETS="blockcsi csi-call" hack/build.sh
fi
bin="${BIN_DIR:-$PWD/build/bin}"
for program in blockcsi csi-call; do
  if [ ! -x "$bin/$program" ]; then
    echo "demo.sh: $bin/$program is missing (build first, or set BIN_DIR)" >&2
    exit 1
  fi
done

work="$(mktemp -d /tmp/blockcsi-demo.XXXXXX)"
socket="$work/csi.sock"
endpoint="unix://$socket"
tgtd_pid=""
plugin_pid=""
ceph_dir="$work/ceph"
ceph_started=0

# ---- cleanup: everything this run made, found by path or pid, never by name.
cleanup() {
  local status=$?
  set +e
  trap - EXIT INT TERM
  echo "== cleanup"
  if [ -n "$plugin_pid" ] && kill -0 "$plugin_pid" 2>/dev/null; then
    kill -TERM "$plugin_pid"
    for _ in $(seq 50); do kill -0 "$plugin_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$plugin_pid" 2>/dev/null
    wait "$plugin_pid" 2>/dev/null
  fi
  # Mounts under the work dir, deepest (last mounted) first; FUSE bridge
  # mounts are among them.
  local targets
  mapfile -t targets < <(awk -v w="$work" 'index($5, w) == 1 { print $5 }' /proc/self/mountinfo | tac)
  for t in "${targets[@]}"; do
    umount "$t" 2>/dev/null || umount -l "$t" 2>/dev/null
  done
  # Loop devices backed by files under the work dir (the FUSE bridge files).
  local loops
  mapfile -t loops < <(losetup -l -n -O NAME,BACK-FILE 2>/dev/null | awk -v w="$work" 'index($2, w) == 1 { print $1 }')
  for l in "${loops[@]}"; do
    losetup -d "$l" 2>/dev/null
  done
  # Bridge processes started by our plugin: their command line names our
  # state dir. Killed by pid.
  local pid parts
  for cmdline in /proc/[0-9]*/cmdline; do
    pid="${cmdline#/proc/}"
    pid="${pid%/cmdline}"
    [ "$pid" = "$$" ] && continue
    parts=()
    mapfile -d '' parts 2>/dev/null <"$cmdline" || continue
    # The Ceph daemons are stopped by hack/ceph-cluster.sh below.
    if [[ "${parts[*]}" == *"$work/"* && "${parts[*]}" != *"$ceph_dir/"* ]]; then
      kill -KILL "$pid" 2>/dev/null
    fi
  done
  mapfile -t targets < <(awk -v w="$work" 'index($5, w) == 1 { print $5 }' /proc/self/mountinfo | tac)
  for t in "${targets[@]}"; do
    for _ in 1 2 3 4 5; do
      fusermount3 -u "$t" 2>/dev/null || umount "$t" 2>/dev/null || umount -l "$t" 2>/dev/null && break
      sleep 0.2
    done
  done
  if [ "$ceph_started" = 1 ]; then
    hack/ceph-cluster.sh stop "$ceph_dir" >"$work/ceph-stop.log" 2>&1 || cat "$work/ceph-stop.log" >&2
  fi
  if [ -n "$tgtd_pid" ] && kill -0 "$tgtd_pid" 2>/dev/null; then
    # tgtd ignores SIGTERM; its configuration is in memory only.
    kill -KILL "$tgtd_pid"
    wait "$tgtd_pid" 2>/dev/null
  fi
  if [ -n "${KEEP_LOG:-}" ] && [ -f "$work/plugin.log" ]; then
    cp "$work/plugin.log" "$KEEP_LOG" && echo "plugin log kept at $KEEP_LOG"
  fi
  rm -rf "$work"
  if [ "$status" -eq 0 ]; then
    echo "demo: done, cleaned up"
  else
    echo "demo: FAILED (exit $status), cleaned up; logs were printed above" >&2
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

step_no=0
# step <title> <command...>: runs the command, prints its output and time.
step() {
  local title="$1"
  shift
  step_no=$((step_no + 1))
  local start end
  start="$(now_ms)"
  if ! "$@" >"$work/step.out" 2>"$work/step.err"; then
    end="$(now_ms)"
    printf '[%2d] %-22s FAILED after %d ms\n' "$step_no" "$title" "$((end - start))"
    cat "$work/step.out" "$work/step.err" >&2
    if [ -n "$plugin_pid" ]; then
      echo "---- plugin log (last 40 lines)" >&2
      tail -n 40 "$work/plugin.log" >&2
    fi
    return 1
  fi
  end="$(now_ms)"
  printf '[%2d] %-22s %6d ms\n' "$step_no" "$title" "$((end - start))"
  if [ -s "$work/step.out" ]; then sed 's/^/       /' "$work/step.out"; fi
}

csi() { "$bin/csi-call" --endpoint "$endpoint" "$@"; }

# json_get <json> <python expression on d>: strings raw, anything else as JSON.
json_get() {
  python3 - "$1" "$2" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
v = eval(sys.argv[2])
print(v if isinstance(v, str) else json.dumps(v))
PY
}

wait_for() {  # wait_for <seconds> <command...>
  local deadline=$(( $(date +%s) + $1 ))
  shift
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then return 1; fi
    sleep 0.1
  done
}

mkdir -p "$work/pool" "$work/state" "$work/staging" "$work/pod"

if [ "$rbd" = 1 ]; then
  echo "== blockcsi demo on Ceph RBD in $work"
  start_ceph() {
    ceph_started=1
    hack/ceph-cluster.sh start "$ceph_dir" >"$work/ceph.env" 2>"$work/ceph-start.log" || {
      tail -n 20 "$work/ceph-start.log"
      return 1
    }
    grep -E '^(RBD_POOL|CEPH_MON_HOST|BLOCKCSI_CEPH_USER)=' "$work/ceph.env"
  }
  step "start ceph" start_ceph
  ceph_env() { sed -n "s/^$1=//p" "$work/ceph.env"; }
  ceph_conf="$(ceph_env CEPH_CONF)"
  ceph_user="$(ceph_env BLOCKCSI_CEPH_USER)"
  ceph_keyring="$(ceph_env BLOCKCSI_CEPH_KEYRING)"
  rbd_pool="$(ceph_env RBD_POOL)"
  backend_flags=(--backend rbd --ceph-conf "$ceph_conf" --ceph-user "$ceph_user"
    --ceph-keyring "$ceph_keyring" --rbd-pool "$rbd_pool")
  # The node logs in with node-stage secrets, as kubelet would pass them;
  # csi-call reads them from its environment (--secret-env), not argv.
  DEMO_CEPH_USER="$ceph_user"
  DEMO_CEPH_KEY="$(awk '$1 == "key" { print $3 }' "$ceph_keyring")"
  export DEMO_CEPH_USER DEMO_CEPH_KEY
  stage_secrets=(--secret-env userID=DEMO_CEPH_USER --secret-env userKey=DEMO_CEPH_KEY)
else
  iscsi_port="$(free_port)"
  # tgtd's control "port" names an abstract unix socket (and must stay below
  # 32768): pick one nobody answers on.
  control_port=$((1000 + RANDOM % 30000))
  while tgtadm -C "$control_port" --lld iscsi --op show --mode sys >/dev/null 2>&1; do
    control_port=$((1000 + RANDOM % 30000))
  done
  echo "== blockcsi demo in $work (iSCSI 127.0.0.1:$iscsi_port, tgtd control port $control_port)"

  # I/O threads per LUN as the storage host's unit runs tgtd: the value lives
  # in deploy/target-host/target.env only (the tests' tgtd reads it too).
  io_threads="$(sed -n 's/^TGT_IO_THREADS=//p' deploy/target-host/target.env)"
  start_tgtd() {
    tgtd -f -C "$control_port" -t "$io_threads" --iscsi "portal=127.0.0.1:$iscsi_port" >"$work/tgtd.log" 2>&1 &
    tgtd_pid=$!
    wait_for 10 tgtadm -C "$control_port" --lld iscsi --op show --mode target
  }
  step "start tgtd" start_tgtd
  backend_flags=(--backend local --pool "$work/pool" --tgt-control-port "$control_port"
    --portal "127.0.0.1:$iscsi_port")
  stage_secrets=()
fi

# Word-split on purpose: a tool and its flags.
read -r -a plugin_wrapper <<<"${PLUGIN_WRAPPER:-}"
start_plugin() {
  "${plugin_wrapper[@]}" "$bin/blockcsi" --mode all "${backend_flags[@]}" --connector userspace \
    --endpoint "$endpoint" --node-id demo-node --state-dir "$work/state" \
    >"$work/plugin.log" 2>&1 &
  plugin_pid=$!
  wait_for $(( ${#plugin_wrapper[@]} > 0 ? 120 : 20 )) csi Probe && csi Probe | grep -q '"ready":true' && csi GetPluginInfo
}
step "start blockcsi" start_plugin

step "NodeGetInfo" csi NodeGetInfo
node_id="$(json_get "$(cat "$work/step.out")" 'd["node_id"]')"

capability='{"mount":{"fs_type":"ext4"},"access_mode":{"mode":"SINGLE_NODE_WRITER"}}'
step "CreateVolume" csi CreateVolume \
  "{\"name\":\"demo-vol\",\"capacity_range\":{\"required_bytes\":1073741824},\"volume_capabilities\":[$capability]}"
volume="$(cat "$work/step.out")"
volume_id="$(json_get "$volume" 'd["volume"]["volume_id"]')"
volume_context="$(json_get "$volume" 'd["volume"].get("volume_context", {})')"

step "ControllerPublish" csi ControllerPublishVolume \
  "{\"volume_id\":\"$volume_id\",\"node_id\":\"$node_id\",\"volume_capability\":$capability,\"readonly\":false}"
publish_context="$(json_get "$(cat "$work/step.out")" 'd.get("publish_context", {})')"

staging="$work/staging/$volume_id"
target="$work/pod/mount"
step "NodeStage" csi "${stage_secrets[@]}" NodeStageVolume \
  "{\"volume_id\":\"$volume_id\",\"publish_context\":$publish_context,\"staging_target_path\":\"$staging\",\"volume_capability\":$capability,\"volume_context\":$volume_context}"
step "NodePublish" csi NodePublishVolume \
  "{\"volume_id\":\"$volume_id\",\"publish_context\":$publish_context,\"staging_target_path\":\"$staging\",\"target_path\":\"$target\",\"volume_capability\":$capability,\"readonly\":false}"

write_and_read() {
  local text
  text="hello from blockcsi at $(date -u +%FT%TZ)"
  echo "$text" >"$target/hello.txt"
  sync "$target/hello.txt"
  [ "$(cat "$target/hello.txt")" = "$text" ] && echo "read back: $text"
  # mountinfo: fields after the lone "-" are fstype, source, superblock options.
  awk -v t="$target" '$5 == t { for (i = 7; $i != "-"; i++) {} print "mounted: " $5 " <- " $(i + 2) " (" $(i + 1) ", " $6 ")" }' /proc/self/mountinfo
}
step "write and read a file" write_and_read

step "NodeGetVolumeStats" csi NodeGetVolumeStats "{\"volume_id\":\"$volume_id\",\"volume_path\":\"$target\"}"
step "NodeUnpublish" csi NodeUnpublishVolume "{\"volume_id\":\"$volume_id\",\"target_path\":\"$target\"}"
step "NodeUnstage" csi NodeUnstageVolume "{\"volume_id\":\"$volume_id\",\"staging_target_path\":\"$staging\"}"
step "ControllerUnpublish" csi ControllerUnpublishVolume "{\"volume_id\":\"$volume_id\",\"node_id\":\"$node_id\"}"
step "DeleteVolume" csi DeleteVolume "{\"volume_id\":\"$volume_id\"}"
echo "== the volume went through its whole lifecycle"
