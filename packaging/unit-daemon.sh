# shellcheck shell=bash
# Sourced by packaging/test-deb.sh and tests/onboarding/run.sh: starts the installed cordond the
# way its systemd units would, on a machine where systemd is not PID 1 (CI): the service's
# ExecStart behind systemd-socket-activate on the socket unit's ListenStream, with its
# SocketGroup and SocketMode, in a delegated cgroup of its own (the unit's Delegate=), with a
# service's environment. Needs root.
#
#   start_cordond_like_the_unit UNIT_DIR LOG CGROUP_NAME
#
# UNIT_DIR holds cordond.service and cordond.socket (/lib/systemd/system for the package). Sets
# `daemon_pid` and appends the cgroups it made to `unit_cgroups` (the caller removes them: see
# `stop_cordond_like_the_unit`); calls `unit_state_changed` (if the caller defines it) after each,
# so that a caller can journal them. Returns once the socket exists, non-zero if it never does.
start_cordond_like_the_unit() {
  local units=$1 log=$2 cgroup=$3 exec_start listen sock_group sock_mode h
  exec_start=$(sed -n 's/^ExecStart=//p' "$units/cordond.service")
  listen=$(sed -n 's/^ListenStream=//p' "$units/cordond.socket")
  sock_group=$(sed -n 's/^SocketGroup=//p' "$units/cordond.socket")
  sock_mode=$(sed -n 's/^SocketMode=//p' "$units/cordond.socket")
  echo "ExecStart=$exec_start; ListenStream=$listen (group $sock_group, mode $sock_mode)"
  # Every hierarchy cordond uses (pure v2: /sys/fs/cgroup; hybrid: the v2 one at unified/ and the
  # v1 memory and pids ones).
  for h in /sys/fs/cgroup /sys/fs/cgroup/unified /sys/fs/cgroup/memory /sys/fs/cgroup/pids; do
    [ -e "$h/cgroup.procs" ] || continue
    unit_cgroups+=("$h/$cgroup")
    declare -F unit_state_changed >/dev/null && unit_state_changed
    mkdir "$h/$cgroup"
  done
  echo "the unit's cgroups: ${unit_cgroups[*]}"
  # A service's environment under systemd: no inherited variables, systemd's PATH.
  # shellcheck disable=SC2086
  env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin \
    sh -c 'for d in '"${unit_cgroups[*]}"'; do echo $$ > "$d/cgroup.procs"; done; exec "$@"' sh \
    systemd-socket-activate -l "$listen" -- $exec_start >"$log" 2>&1 &
  daemon_pid=$!
  declare -F unit_state_changed >/dev/null && unit_state_changed
  for _ in $(seq 100); do [ -S "$listen" ] && break; sleep 0.1; done
  [ -S "$listen" ] || { echo "cordond's socket $listen never appeared:" >&2; cat "$log" >&2; return 1; }
  # What systemd does for SocketGroup= and SocketMode= after binding.
  chgrp "$sock_group" "$listen"
  chmod "$sock_mode" "$listen"
  stat -c '%A %U:%G %n' "$listen"
}

# Stops what start_cordond_like_the_unit started (SIGTERM, as `systemctl stop`) and removes its
# cgroups. Safe to call twice, or after a cut-off run with the values it journaled.
stop_cordond_like_the_unit() {
  local d
  if [ -n "${daemon_pid:-}" ] && kill -0 "$daemon_pid" 2>/dev/null \
    && grep -qE '^(systemd-socket-|cordond)' "/proc/$daemon_pid/comm" 2>/dev/null; then
    kill -TERM "$daemon_pid"
    # Not a child when an earlier run's daemon is stopped: wait for it by its pid.
    for _ in $(seq 50); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.1; done
    wait "$daemon_pid" 2>/dev/null
  fi
  daemon_pid=""
  for d in "${unit_cgroups[@]}"; do find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null; done
  return 0
}
