#!/usr/bin/env bash
# Installs the Debian package on this machine and checks it as an admin would, then purges it:
#   - the file list (dpkg -L) is exactly packaging/install.sh's list; conffiles; modes and
#     owners of /etc/cordon/policies.d; the groups; the stripped binaries;
#   - systemd-analyze verify on the installed units; cordon policy check on the installed
#     policies; the man pages render; the bash completion loads;
#   - cordond started as the installed unit would start it (its ExecStart line, behind
#     systemd-socket-activate on the socket unit's ListenStream with its group and mode), and a
#     developer account (in group cordon, not an admin) using the starter tools through
#     `cordon mcp` with the official Python MCP SDK, without any policy edit;
#   - a reinstall (an upgrade) keeps an admin's edit to a policy; purge, and what is left.
# Prints a transcript ($ lines are the commands run). Needs root on a throwaway Debian/Ubuntu
# machine without cordon installed; without systemd as PID 1 nothing is started through
# systemctl. Restores the machine afterwards (the developer account, and the groups and
# directories the package left, when they did not exist before).
#
#   packaging/test-deb.sh [target/debian/cordon_*.deb]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
# The runbook's commands (docs/getting-started.md) are run as written (tests/suite/readme.rs checks it), from the checkout.
cd "$repo"
set -- target/debian/cordon_*.deb
[ "$#" = 1 ] && [ -f "$1" ] || { echo "test-deb.sh: need exactly one target/debian/cordon_*.deb: build it with packaging/build-deb.sh" >&2; exit 1; }
deb=$1
[ "$(id -u)" = 0 ] || { echo "test-deb.sh: needs root" >&2; exit 1; }
# What this run changes on the machine, and what was there before, is kept in a journal only
# root can write. A run that is cut off (killed, or the machine's session ends) leaves it behind,
# and the next run first undoes what that one left: the package installed, the developer account,
# the groups, a daemon, its cgroups, /run/cordon.
# shellcheck source=packaging/unit-daemon.sh
source "$repo/packaging/unit-daemon.sh"
journal=/var/lib/cordon-deb-test.journal
work=""
daemon_pid=""
had_group_cordon=no
had_group_admin=no
had_state=no
had_etc=no
local_installed=no
unit_cgroups=()

journal_write() {
  local tmp="$journal.tmp"
  (
    umask 077
    printf 'work=%s\nhad_group_cordon=%s\nhad_group_admin=%s\nhad_state=%s\nhad_etc=%s\nlocal_installed=%s\ndaemon_pid=%s\nunit_cgroups=%s\n' \
      "$work" "$had_group_cordon" "$had_group_admin" "$had_state" "$had_etc" "$local_installed" "$daemon_pid" \
      "${unit_cgroups[*]}" >"$tmp"
  )
  mv -f "$tmp" "$journal"
}

# Reads the journal as data (never sourced): each value is checked against what this script
# itself writes.
journal_read() {
  local key value
  while IFS='=' read -r key value; do
    case "$key" in
      work) [[ "$value" =~ ^/tmp/cordon-deb-test\.[A-Za-z0-9]+$ || -z "$value" ]] && work=$value ;;
      had_group_cordon | had_group_admin | had_state | had_etc | local_installed)
        [[ "$value" == yes || "$value" == no ]] && printf -v "$key" '%s' "$value" ;;
      daemon_pid) [[ "$value" =~ ^[0-9]*$ ]] && daemon_pid=$value ;;
      unit_cgroups)
        unit_cgroups=()
        for d in $value; do
          [[ "$d" =~ ^/sys/fs/cgroup(/[a-z]+)?/cordon-deb-test-[0-9]+\.service$ ]] && unit_cgroups+=("$d")
        done
        ;;
    esac
  done <"$journal"
}

# start_cordond_like_the_unit reports each cgroup and the daemon as it makes them.
unit_state_changed() { journal_write; }

cleanup() {
  set +e
  stop_cordond_like_the_unit
  if dpkg-query -W -f='${Status}' cordon 2>/dev/null | grep -q installed; then
    dpkg --purge cordon >/dev/null 2>&1
  fi
  [ "$local_installed" = yes ] && "$repo/packaging/install.sh" --uninstall >/dev/null 2>&1
  [ "$had_etc" = no ] && rm -rf /etc/cordon
  getent passwd "$dev" >/dev/null && userdel -r "$dev" 2>/dev/null
  [ "$had_group_cordon" = no ] && getent group cordon >/dev/null && groupdel cordon
  [ "$had_group_admin" = no ] && getent group cordon-admin >/dev/null && groupdel cordon-admin
  rm -rf /var/lib/cordon
  [ "$had_state" = yes ] && [ -n "$work" ] && mv "$work/var-lib-cordon.before" /var/lib/cordon
  rm -rf /run/cordon
  [ -n "$work" ] && rm -rf "$work"
  rm -f "$journal"
}

# The README's developer.
dev=alice
if [ -f "$journal" ]; then
  [ "$(stat -c '%u %a' "$journal")" = "0 600" ] || {
    echo "test-deb.sh: $journal is not root's own 0600 file: remove it after looking at it" >&2
    exit 1
  }
  echo "test-deb.sh: an earlier run was cut off before it restored this machine; undoing what it left ($journal):"
  sed 's/^/  /' "$journal"
  journal_read
  cleanup
  set -e
  work=""
  daemon_pid=""
  local_installed=no
  unit_cgroups=()
fi
if [ -e /run/cordon/cordon.sock ]; then
  echo "test-deb.sh: /run/cordon/cordon.sock exists (a cordond running as root?): stop it, or remove a stale socket" >&2
  exit 1
fi
if dpkg-query -W -f='${Status}' cordon 2>/dev/null | grep -q installed; then
  echo "test-deb.sh: cordon is already installed here; this test installs and purges it: run it on a throwaway machine" >&2
  exit 1
fi
if getent passwd "$dev" >/dev/null; then
  echo "test-deb.sh: the account $dev exists already; run this on a throwaway machine" >&2
  exit 1
fi

work=$(mktemp -d /tmp/cordon-deb-test.XXXXXX)
chmod 0755 "$work"
failures=0
had_group_cordon=$(getent group cordon >/dev/null && echo yes || echo no)
had_group_admin=$(getent group cordon-admin >/dev/null && echo yes || echo no)
had_state=$([ -e /var/lib/cordon ] && echo yes || echo no)
had_etc=$([ -e /etc/cordon ] && echo yes || echo no)
journal_write
trap cleanup EXIT
# A hand-started root cordond's audit log from before: set aside, restored afterwards (the
# package starts on a log of its own).
if [ "$had_state" = yes ]; then
  mv /var/lib/cordon "$work/var-lib-cordon.before"
fi

say() { printf '\n== %s\n' "$*"; }
run() {
  printf '$ %s\n' "$*"
  "$@"
}
check() { # check DESCRIPTION COMMAND...: one line, PASS or FAIL
  local what=$1
  shift
  if "$@" >/dev/null 2>&1; then
    echo "PASS $what"
  else
    echo "FAIL $what"
    failures=$((failures + 1))
  fi
}

unit_cgroup=cordon-deb-test-$$.service

say "install"
run dpkg -i target/debian/cordon_*.deb

say "what the package installed"
run dpkg -L cordon | grep -v '^/\.$' | sort | tee "$work/dpkg-L"
# The package holds exactly install.sh's list (the one list, Debian layout).
"$repo/packaging/install.sh" --list --no-build --prefix /usr --layout debian | awk '{print $2}' | sort >"$work/install-list"
dpkg-deb --fsys-tarfile "$deb" | tar -t | grep -v '/$' | sed 's|^\./|/|' | sort >"$work/deb-files"
check "the package's files are exactly packaging/install.sh --list" diff "$work/install-list" "$work/deb-files"
diff "$work/install-list" "$work/deb-files" || true
run dpkg-query -W -f='${Conffiles}\n' cordon
check "every starter policy is a conffile" \
  bash -c 'for f in /etc/cordon/policies.d/*.toml; do dpkg-query -W -f="\${Conffiles}" cordon | grep -q " $f " || exit 1; done'

say "policy directory: root-owned, not group/world-writable (cordond refuses otherwise)"
run stat -c '%A %U:%G %n' /etc/cordon /etc/cordon/policies.d /etc/cordon/policies.d/*.toml
check "/etc/cordon/policies.d is 755 root:root" test "$(stat -c '%a %U:%G' /etc/cordon/policies.d)" = "755 root:root"
check "every policy is 644 root:root" \
  bash -c 'for f in /etc/cordon/policies.d/*.toml; do [ "$(stat -c "%a %U:%G" "$f")" = "644 root:root" ] || exit 1; done'

say "groups and directories"
run getent group cordon cordon-admin
check "group cordon exists" getent group cordon
check "group cordon-admin exists" getent group cordon-admin
run stat -c '%A %U:%G %n' /var/lib/cordon /run/cordon
check "/var/lib/cordon is 700 root:root" test "$(stat -c '%a %U:%G' /var/lib/cordon)" = "700 root:root"
if command -v file >/dev/null; then
  run file /usr/bin/cordon /usr/bin/cordond
  check "the binaries are stripped" bash -c '! file /usr/bin/cordon /usr/bin/cordond | grep -q "not stripped"'
fi
run cordon --version

say "the installed units"
run cat /lib/systemd/system/cordond.socket
run systemd-analyze verify /lib/systemd/system/cordond.socket /lib/systemd/system/cordond.service
check "systemd-analyze verify accepts the installed units" \
  systemd-analyze verify /lib/systemd/system/cordond.socket /lib/systemd/system/cordond.service
check "cordond.socket is enabled" test -L /etc/systemd/system/sockets.target.wants/cordond.socket

say "the installed policies"
run cordon policy check /etc/cordon/policies.d
check "cordon policy check /etc/cordon/policies.d passes" cordon policy check /etc/cordon/policies.d

say "the documentation, readable offline (what cordon's messages cite)"
for page in README.md getting-started.md seccomp.md denials.md troubleshooting.md reference/cli.md; do
  check "/usr/share/doc/cordon/$page is installed" test -s "/usr/share/doc/cordon/$page"
done
check "the HTML book is installed (/usr/share/doc/cordon/html/index.html)" test -s /usr/share/doc/cordon/html/index.html
check "the installed README links to the pages beside it" grep -qF '](getting-started.md)' /usr/share/doc/cordon/README.md

say "man pages and completions"
if command -v man >/dev/null; then
  run bash -c 'MANPAGER=cat MANWIDTH=80 man cordond | head -n 12'
  check "man cordon renders (and names its subcommands' pages)" bash -c 'MANPAGER=cat man cordon | grep -q cordon-run'
  check "man 8 cordond renders" bash -c 'MANPAGER=cat man 8 cordond | grep -q -- "--policies"'
  check "man cordon-policy-check renders" bash -c 'MANPAGER=cat man cordon-policy-check | grep -q -- "--json"'
else
  echo "(man is not installed: skipped)"
fi
run bash -c 'source /usr/share/bash-completion/completions/cordon; complete -p cordon'
check "the bash completion loads" bash -c 'source /usr/share/bash-completion/completions/cordon && complete -p cordon'

say "cordond as the installed unit starts it (no systemd here: systemd-socket-activate)"
start_cordond_like_the_unit /lib/systemd/system "$work/cordond.log" "$unit_cgroup"
run cordon status
run cordon reload
run cat "/proc/$daemon_pid/cgroup"
check "cordond moved itself into its unit's leaf cgroup (delegated)" grep -q "/$unit_cgroup/daemon\$" "/proc/$daemon_pid/cgroup"

say "a developer account: in group cordon, not an admin"
run useradd --create-home --shell /bin/bash "$dev"
run usermod -aG cordon alice
run id "$dev"
check "$dev is not an admin" bash -c "! id -nG $dev | grep -qw cordon-admin"
run runuser -u "$dev" -- cordon tools
check "$dev sees the starter tools" bash -c "runuser -u $dev -- cordon tools --json | grep -q '\"git-changes\"'"
check "$dev may not read the audit log (admins only)" bash -c "! runuser -u $dev -- cordon audit tail -n 1"

say "the developer's agent host: the official Python MCP SDK runs cordon mcp"
cat >"$work/mcp.json" <<'EOF'
{ "mcpServers": { "cordon": { "command": "/usr/bin/cordon", "args": ["mcp"] } } }
EOF
run cat "$work/mcp.json"
venv=${CORDON_MCP_VENV:-/tmp/cordon-mcp-venv}
if ! runuser -u "$dev" -- "$venv/bin/python" -c 'import mcp' 2>/dev/null; then
  # The developer must be able to run it: a venv on the system's python, not one under /root.
  venv=$work/venv
  py=$(command -v /usr/bin/python3 || command -v python3)
  "$py" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$repo/tests/mcp-python/requirements.txt"
  chmod -R a+rX "$venv"
fi
cp "$repo/packaging/mcp-starter.py" "$work/"
chmod 0644 "$work/mcp-starter.py" "$work/mcp.json"
home=$(getent passwd "$dev" | cut -d: -f6)
if run runuser -u "$dev" -- env HOME="$home" "$venv/bin/python" "$work/mcp-starter.py" "$work/mcp.json" "$home/project"; then
  echo "PASS $dev used the starter tools through cordon mcp"
else
  echo "FAIL $dev used the starter tools through cordon mcp"
  failures=$((failures + 1))
fi

say "the first policy of docs/getting-started.md: check, install, reload, what the tool may touch"
# The policy is the page's own (its toml block under "## Write a first policy").
awk '/^## /{s=($0=="## Write a first policy")} s&&/^```toml$/{b=1;next} b&&/^```$/{exit} b' docs/getting-started.md >"$work/50-team.toml"
[ -s "$work/50-team.toml" ] || { echo "FAIL docs/getting-started.md has no toml block under '## Write a first policy'"; exit 1; }
cd "$work"
run cordon policy check 50-team.toml
run install -m 0644 50-team.toml /etc/cordon/policies.d/
run cordon reload
run cordon tool disk-usage
cd "$repo"
check "$dev may use the new tool" runuser -u "$dev" -- cordon run disk-usage --arg path="/home/$dev/project"

say "what the admin sees in the audit log"
run cordon audit tail -n 4
run cordon audit tail -n 20 --tool disk-usage --json
run cordon audit verify
check "the audit log records $dev's calls" bash -c "cordon audit tail -n 50 --json | grep -q 'git-changes'"
check "the audit log records the new tool's call" bash -c "cordon audit tail -n 20 --tool disk-usage --json | grep -q '\"finished\"'"
check "cordon audit verify passes" cordon audit verify

say "stop cordond (SIGTERM, as systemctl stop)"
run kill -TERM "$daemon_pid"
wait "$daemon_pid" || true
daemon_pid=""
run tail -n 3 "$work/cordond.log"

say "upgrade (the same package again): an admin's policy edit is kept"
run sed -i 's/^timeout = "10m"/timeout = "20m"/' /etc/cordon/policies.d/30-test.toml
run dpkg -i target/debian/cordon_*.deb
check "the admin's edit survived the upgrade" grep -q '^timeout = "20m"' /etc/cordon/policies.d/30-test.toml

say "purge"
run dpkg --purge cordon
check "the binaries are gone" test ! -e /usr/bin/cordon -a ! -e /usr/bin/cordond
check "the units are gone" test ! -e /lib/systemd/system/cordond.service -a ! -e /etc/systemd/system/sockets.target.wants/cordond.socket
check "the starter policies are gone (the conffiles, edited or not)" bash -c '! ls /etc/cordon/policies.d/[123]0-*.toml'
check "a policy the admin added stays (50-team.toml)" test -f /etc/cordon/policies.d/50-team.toml
run rm -rf /etc/cordon
check "/run/cordon is gone" test ! -e /run/cordon
echo "left on purpose:"
run ls -la /var/lib/cordon
run getent group cordon cordon-admin

say "without a package (Fedora and others): packaging/install.sh, then --uninstall"
# The README's commands as written, under /usr/local (here on Debian install.sh picks Debian's zsh
# completion directory; off Debian, share/zsh/site-functions). The build is already done: cargo
# finds nothing to do.
run cargo build --release --locked -p cordon-client -p cordon-daemon
check "install.sh: off Debian, zsh completions go to share/zsh/site-functions" \
  bash -c "packaging/install.sh --list --no-build --layout other | grep -q ' /usr/local/share/zsh/site-functions/_cordon\$'"
local_installed=yes
journal_write
run packaging/install.sh --no-build
run stat -c '%A %U:%G %n' /usr/local/bin/cordon /usr/local/bin/cordond /etc/cordon/policies.d/*.toml
run grep '^ExecStart=' /usr/local/lib/systemd/system/cordond.service
check "install.sh: the unit starts /usr/local/bin/cordond" grep -q '^ExecStart=/usr/local/bin/cordond ' /usr/local/lib/systemd/system/cordond.service
check "install.sh: systemd-analyze verify accepts its units" \
  systemd-analyze verify /usr/local/lib/systemd/system/cordond.socket /usr/local/lib/systemd/system/cordond.service
check "install.sh: the groups exist" getent group cordon cordon-admin
check "install.sh: the documentation is in /usr/local/share/doc/cordon" test -s /usr/local/share/doc/cordon/seccomp.md
check "install.sh: /var/lib/cordon is 700 root:root" test "$(stat -c '%a %U:%G' /var/lib/cordon)" = "700 root:root"
check "install.sh: cordon policy check /etc/cordon/policies.d passes" /usr/local/bin/cordon policy check /etc/cordon/policies.d
check "install.sh: every file of its list is installed" \
  bash -c "'$repo/packaging/install.sh' --list --no-build | while read -r mode path; do [ \"\$(stat -c %a \"\$path\")\" = \"\${mode#0}\" ] || exit 1; done"
say "install.sh again (an upgrade): an admin's policy edit is kept, the shipped version lands next to it"
run sed -i 's/^timeout = "10m"/timeout = "20m"/' /etc/cordon/policies.d/30-test.toml
run packaging/install.sh --no-build
check "install.sh: the admin's edit survived" grep -q '^timeout = "20m"' /etc/cordon/policies.d/30-test.toml
check "install.sh: the shipped version is 30-test.toml.new" cmp "$repo/packaging/policies.d/30-test.toml" /etc/cordon/policies.d/30-test.toml.new
check "install.sh: cordon policy check still passes (cordond reads only *.toml)" /usr/local/bin/cordon policy check /etc/cordon/policies.d
run packaging/install.sh --uninstall
local_installed=no
check "install.sh --uninstall: no file of the list is left but the policies" \
  bash -c "'$repo/packaging/install.sh' --list --no-build | while read -r mode path; do case \"\$path\" in /etc/cordon/*) continue;; esac; [ ! -e \"\$path\" ] || exit 1; done"
check "install.sh --uninstall: the policies are kept" test -f /etc/cordon/policies.d/10-code.toml
[ "$had_etc" = no ] && rm -rf /etc/cordon

echo
if [ "$failures" -gt 0 ]; then
  echo "test-deb.sh: $failures check(s) FAILED"
  exit 1
fi
echo "test-deb.sh: all checks passed"
