#!/usr/bin/env bash
# A newcomer's first five minutes, as a CI phase (docs/agents.md, README "Your agent running your
# project's tests"): on this machine, as root, with the package built (packaging/build-deb.sh):
#
#   1. a developer account with an empty home has a real project nobody here wrote (fasteners, a
#      PyPI sdist with its tests, from the corpus: tests/run fetches it) and its own virtualenv;
#   2. the clock starts: the admin installs the package and adds the developer to group cordon;
#   3. the developer runs `cordon init` in the project and `cordon policy check` on the file;
#   4. the admin installs that file unchanged and reloads;
#   5. the developer runs `cordon mcp config claude-code --write` in the project (Claude Code's
#      project file, .mcp.json);
#   6. a stock MCP client (the official Python MCP SDK) reads that file as the host would, starts
#      the server it names as the developer, and calls the project's test tool: green.
#
# Prints each step with its command and the seconds since the package install, and the total.
# Restores the machine afterwards (the package purged, the account, the groups and directories
# the package made). Needs root, no cordon installed, the .deb, the corpus and the MCP SDK venv.
#
#   tests/onboarding/run.sh [MCP_VENV]
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
# shellcheck source=packaging/unit-daemon.sh
source "$repo/packaging/unit-daemon.sh"

venv=${1:-/tmp/cordon-mcp-venv}
corpus=${CORDON_CORPUS:-/var/cache/cordon-corpus}
project_src=$corpus/src/fasteners-0.19
dev=cordon-newcomer
debs=(target/debian/cordon_*.deb)

[ "$(id -u)" = 0 ] || { echo "onboarding: needs root (it installs the package)" >&2; exit 1; }
[ "${#debs[@]}" = 1 ] && [ -f "${debs[0]}" ] || { echo "onboarding: need exactly one target/debian/cordon_*.deb (packaging/build-deb.sh)" >&2; exit 1; }
[ -d "$project_src" ] || { echo "onboarding: no $project_src: run .ci/corpus-fetch first" >&2; exit 1; }
[ -x "$venv/bin/python" ] || { echo "onboarding: no MCP SDK venv at $venv (tests/mcp-python/requirements.txt)" >&2; exit 1; }
if dpkg-query -W -f='${Status}' cordon 2>/dev/null | grep -q installed || [ -e /run/cordon/cordon.sock ]; then
  echo "onboarding: cordon is installed or running here; run this on a throwaway machine" >&2
  exit 1
fi
getent passwd "$dev" >/dev/null && { echo "onboarding: the account $dev exists already" >&2; exit 1; }

work=$(mktemp -d /tmp/cordon-onboarding.XXXXXX)
chmod 0755 "$work"
daemon_pid=""
unit_cgroups=()
had_group_cordon=$(getent group cordon >/dev/null && echo yes || echo no)
had_group_admin=$(getent group cordon-admin >/dev/null && echo yes || echo no)
had_state=$([ -e /var/lib/cordon ] && echo yes || echo no)
had_etc=$([ -e /etc/cordon ] && echo yes || echo no)
[ "$had_state" = yes ] && mv /var/lib/cordon "$work/var-lib-cordon.before"
cleanup() {
  set +e
  stop_cordond_like_the_unit
  dpkg-query -W -f='${Status}' cordon 2>/dev/null | grep -q installed && dpkg --purge cordon >/dev/null 2>&1
  [ "$had_etc" = no ] && rm -rf /etc/cordon
  getent passwd "$dev" >/dev/null && userdel -r "$dev" 2>/dev/null
  [ "$had_group_cordon" = no ] && getent group cordon >/dev/null && groupdel cordon
  [ "$had_group_admin" = no ] && getent group cordon-admin >/dev/null && groupdel cordon-admin
  rm -rf /var/lib/cordon /run/cordon
  [ "$had_state" = yes ] && mv "$work/var-lib-cordon.before" /var/lib/cordon
  rm -rf "$work"
}
trap cleanup EXIT

start=""
since() { # tenths of seconds since $start, as S.T
  local us=$((${EPOCHREALTIME/./} - start))
  printf '%d.%d' $((us / 1000000)) $((us / 100000 % 10))
}
step() {
  if [ -n "$start" ]; then
    printf '\n== [%ss] %s\n' "$(since)" "$*"
  else
    printf '\n== %s\n' "$*"
  fi
}
run() {
  printf '$ %s\n' "$*"
  "$@"
}
as_dev() { # as_dev DIR COMMAND...: the developer, logged in, in DIR
  local dir=$1
  shift
  printf '%s$ %s\n' "$dev" "$*"
  runuser -u "$dev" -- env -i HOME="$home" USER="$dev" LOGNAME="$dev" PATH=/usr/local/bin:/usr/bin:/bin \
    LANG=C.UTF-8 sh -c 'cd "$1" && shift && exec "$@"' sh "$dir" "$@"
}

step "before: a developer with an empty home, their project and its own virtualenv"
run useradd --create-home --skel /var/empty --shell /bin/bash "$dev"
home=$(getent passwd "$dev" | cut -d: -f6)
run ls -A "$home"
project=$home/src/fasteners
install -d -o "$dev" -g "$dev" "$home/src"
cp -r "$project_src" "$project"
chown -R "$dev:$dev" "$project"
# The developer's own set-up (offline, from the corpus's pinned wheels), as docs/corpus.md does it.
as_dev "$project" /usr/bin/python3 -m venv .venv
as_dev "$project" env PIP_CONFIG_FILE=/dev/null .venv/bin/pip install -q --disable-pip-version-check --no-index \
  --find-links "$corpus/wheels" -r "$corpus/python/fasteners.req"
as_dev "$project" env PIP_CONFIG_FILE=/dev/null .venv/bin/pip install -q --disable-pip-version-check --no-index \
  --find-links "$corpus/wheels" -e .
as_dev "$project" .venv/bin/pytest -q -p no:cacheprovider tests/test_process_lock.py | tail -n 1
# The host side of the agent: the MCP SDK where the developer can run it (not under /root).
if ! runuser -u "$dev" -- "$venv/bin/python" -c 'import mcp' 2>/dev/null; then
  /usr/bin/python3 -m venv "$work/venv"
  "$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check -r tests/mcp-python/requirements.txt
  chmod -R a+rX "$work/venv"
  venv=$work/venv
fi
install -m 0644 tests/onboarding/agent.py "$work/agent.py"

start=${EPOCHREALTIME/./}
step "the admin installs the package"
run dpkg -i "${debs[0]}"
if [ ! -S /run/cordon/cordon.sock ]; then
  # Not started by systemd (it is not PID 1 here): started as its units would.
  start_cordond_like_the_unit /lib/systemd/system "$work/cordond.log" "cordon-onboarding-$$.service"
fi
run cordon status
run usermod -aG cordon "$dev"

step "the developer: cordon init in the project"
as_dev "$project" cordon init
as_dev "$project" cordon policy check cordon-fasteners.toml

step "the admin installs the file unchanged and reloads"
run install -m 0644 "$project/cordon-fasteners.toml" /etc/cordon/policies.d/
run cordon reload

step "the developer: the agent host's configuration"
as_dev "$project" cordon mcp config claude-code --write
as_dev "$project" cat .mcp.json
tool=$(as_dev "$project" cordon tools --json 2>/dev/null | sed 1d |
  "$venv/bin/python" -c 'import json,sys; print(next(t["name"] for t in json.load(sys.stdin)["tools"] if t["name"].endswith("-pytest")))')
echo "the project's test tool: $tool"

step "the developer's agent runs the project's tests through cordon mcp"
as_dev "$project" "$venv/bin/python" "$work/agent.py" .mcp.json cordon "$tool" test=tests/test_process_lock.py

total=$(since)
step "green"
echo "onboarding: $total s from the package install to the project's tests green through an MCP client"
echo "$total" >"$repo/target/onboarding-seconds.txt"
