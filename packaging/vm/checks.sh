#!/bin/bash
# Runs inside the VM (as root, from cordon-vm-runner.service, after boot) with the payload disk's
# directory as $1: installs cordon the way a package would (binaries, units, groups, policies, a
# user `dev` in group cordon), then checks the units under the real systemd. Every line the host
# reads starts with "CORDON-VM: ": PASS/FAIL (a check), INFO (for the record), "|" (output).
# Exits non-zero when a check failed.
set -u
P=${1:?payload directory}
fails=0
T0=$(date +%s%N)

say() { echo "CORDON-VM: $*"; }
pass() { say "PASS $*"; }
fail() { say "FAIL $*"; fails=$((fails + 1)); }
info() { say "INFO $*"; }
show() { sed '/^$/d; s/^/CORDON-VM: | /'; } # a command's output, indented in the transcript
ok() { # NAME 'SHELL EXPRESSION': PASS when it succeeds (evaluated, so && and ! work)
    if eval "$2"; then pass "$1"; else fail "$1"; fi
}
as_dev() { runuser -u dev -- "$@"; }
prop() { systemctl show -P "$2" "$1"; } # UNIT PROPERTY
# systemd's own lines about the unit since the mark, in order (debug level: notifications).
journal_since() { journalctl --sync; journalctl -q -o cat --no-pager --since "@$1" "${@:2}"; }
now_s() { date +%s.%N | cut -c1-17; }
wait_for() { # SECONDS COMMAND...: polls until the command succeeds
    local n=$(($1 * 10))
    shift
    while [ $n -gt 0 ]; do
        "$@" && return 0
        sleep 0.1
        n=$((n - 1))
    done
    return 1
}
# Tool processes: the sleepers (their foreground sh and the background sleep 1000).
tool_pids() { pgrep -f '^/bin/sleep 1000$|^/bin/sh -c echo \$\$' || true; }
no_tool_pids() { [ -z "$(tool_pids)" ]; }
pidfile_full() { test "$(wc -l </tmp/sleeper.pid 2>/dev/null)" = 2; }
svc_active() { test "$(systemctl is-active cordond.service)" = active; }
cgroup_of() { sed -n 's/^0:://p' "/proc/$1/cgroup" 2>/dev/null; }

section() { say "== $* (t=$((($(date +%s%N) - T0) / 1000000))ms)"; }

section "install (what a package would do)"
info "kernel $(uname -r), $(systemctl --version | head -1), cordon commit $(cat "$P/commit"), up $(cut -d' ' -f1 /proc/uptime)s"
install -m 0755 "$P/bin/cordond" "$P/bin/cordon" /usr/bin/
install -m 0644 "$P/units/cordond.service" "$P/units/cordond.socket" /etc/systemd/system/
groupadd --system cordon
groupadd --system cordon-admin
useradd --create-home --shell /bin/bash --groups cordon dev
install -d -m 0755 /etc/cordon /etc/cordon/policies.d
install -m 0644 "$P"/policies/*.toml /etc/cordon/policies.d/
systemctl daemon-reload
# systemd's debug log carries every sd_notify message the unit sends ("Got notification message").
systemd-analyze log-level debug

section "units as the real systemd reads them"
out=$(systemd-analyze verify /etc/systemd/system/cordond.socket /etc/systemd/system/cordond.service 2>&1)
rc=$?
echo "$out" | show
ok "systemd-analyze verify accepts cordond.socket and cordond.service without a word" \
    'test $rc = 0 -a -z "$out"'
out=$(journal_since "$(date -d '-1 min' +%s)" -u cordond.service -u cordond.socket -p warning 2>&1)
[ -n "$out" ] && echo "$out" | show
ok "daemon-reload logged no warning about the units" 'test -z "$out"'

section "socket"
out=$(systemctl enable --now cordond.socket 2>&1)
rc=$?
echo "$out" | show
ok "systemctl enable --now cordond.socket" 'test $rc = 0'
ok "cordond.socket is active (listening)" 'test "$(systemctl is-active cordond.socket)" = active'
ok "cordond.service is not started yet (socket activation)" \
    'test "$(systemctl is-active cordond.service)" = inactive'
st=$(stat -c '%F %a %U %G' /run/cordon/cordon.sock 2>&1)
info "/run/cordon/cordon.sock: $st; /run/cordon: $(stat -c '%a %U %G' /run/cordon)"
ok "the socket is a socket, mode 0660, owner root, group cordon" 'test "$st" = "socket 660 root cordon"'
ok "/run/cordon is 0755 root root" 'test "$(stat -c "%a %U %G" /run/cordon)" = "755 root root"'
out=$(runuser -u nobody -- /usr/bin/cordon status 2>&1)
rc=$?
echo "$out" | show
ok "a user outside group cordon cannot connect (status exits non-zero)" 'test $rc != 0'
ok "... and that did not start cordond" 'test "$(systemctl is-active cordond.service)" = inactive'

section "socket activation and READY=1"
mark=$(now_s)
out=$(as_dev cordon status 2>&1)
rc=$?
echo "$out" | show
ok "dev's first 'cordon status' succeeds (cordond started by the socket)" 'test $rc = 0'
wait_for 10 svc_active
props=$(systemctl show -p ActiveState -p SubState -p MainPID -p Type -p NotifyAccess -p WatchdogUSec -p NRestarts cordond.service)
echo "$props" | show
ok "cordond.service: Type=notify, active" \
    'grep -qx "Type=notify" <<<"$props" && grep -qx "ActiveState=active" <<<"$props"'
pid=$(prop cordond.service MainPID)
ok "MainPID ($pid) is /usr/bin/cordond" 'test "$(readlink /proc/$pid/exe)" = /usr/bin/cordond'
ok "cordond got the socket from systemd (LISTEN_FDS=1 in its environment)" \
    'tr "\0" "\n" </proc/$pid/environ | grep -qx LISTEN_FDS=1'
lines=$(journal_since "$mark" _PID=1 | grep -e 'cordond.service: Got notification message' -e 'Started cordond.service')
echo "$lines" | head -4 | show
ready=$(grep -m1 -n 'READY=1' <<<"$lines" | cut -d: -f1)
started=$(grep -m1 -n 'Started cordond.service' <<<"$lines" | cut -d: -f1)
ok "systemd got READY=1 from cordond, and only then logged 'Started'" \
    'test -n "$ready" -a -n "$started" && test "$ready" -lt "$started"'

section "an agent user runs a tool"
out=$(as_dev cordon run echo --arg text='hello from dev' 2>&1)
rc=$?
echo "$out" | show
ok "dev runs echo: exit 0, output [hello from dev]" 'test $rc = 0 -a "$out" = "[hello from dev]"'
out=$(as_dev cordon tools 2>&1)
echo "$out" | show
ok "dev sees the test tools" 'grep -q memhog <<<"$out"'

section "reload (RELOADING=1 ... READY=1)"
printf '%s\n' 'version = 1' '[tools.added-by-reload]' \
    'description = "a tool that only exists after the reload"' 'reason = "vm test"' \
    'command = ["/bin/true"]' 'allow = { groups = ["cordon"] }' >/etc/cordon/policies.d/reloaded.toml
chmod 0644 /etc/cordon/policies.d/reloaded.toml
mark=$(now_s)
out=$(systemctl reload cordond.service 2>&1)
rc=$?
echo "$out" | show
ok "systemctl reload cordond exits 0" 'test $rc = 0'
ok "cordond stays active with the same MainPID after the reload" \
    'test "$(systemctl is-active cordond.service)" = active -a "$(prop cordond.service MainPID)" = "$pid"'
j=$(journal_since "$mark" _PID=1 | grep -e 'cordond.service' | grep -e 'Reload' -e 'notification')
echo "$j" | show
ok "systemd logged Reloading... then Reloaded" \
    'grep -q "Reloading cordond.service" <<<"$j" && grep -q "Reloaded cordond.service" <<<"$j"'
ok "cordond sent RELOADING=1 with MONOTONIC_USEC, then READY=1" \
    'grep "RELOADING=1" <<<"$j" | grep -q MONOTONIC_USEC= && grep -q "READY=1" <<<"$j"'
ok "the reload took effect: dev sees added-by-reload" 'grep -q added-by-reload <<<"$(as_dev cordon tools 2>&1)"'
out=$(SYSTEMD_COLORS=0 systemctl status --no-pager --lines=8 cordond.service 2>&1)
echo "$out" | show
ok "systemctl status shows it active (running)" 'grep -q "Active: active (running)" <<<"$out"'

section "a policy error on reload: the journal's priorities"
printf 'version = 1\n[tools.broken\n' >/etc/cordon/policies.d/broken.toml
chmod 0644 /etc/cordon/policies.d/broken.toml
mark=$(now_s)
systemctl reload cordond.service
sleep 1
ok "a failing reload keeps cordond active" 'test "$(systemctl is-active cordond.service)" = active'
# cordond's own lines (SYSLOG_IDENTIFIER=cordond; not systemd's about the unit), one entry a line.
entries() { # JSON lines -> "priority N: MESSAGE" (cut)
    local l
    while read -r l; do
        echo "priority $(sed -n 's/.*"PRIORITY":"\([0-9]\)".*/\1/p' <<<"$l"):" \
            "$(sed -n 's/.*"MESSAGE":"\([^"]\{0,110\}\).*/\1/p' <<<"$l")"
    done
}
all=$(journal_since "$mark" -t cordond -o json --output-fields=PRIORITY,MESSAGE | entries)
echo "$all" | show
warn=$(journal_since "$mark" -t cordond -p warning)
info "cordond's entries since the broken reload at priority warning or worse: $(grep -c . <<<"$warn")"
ok "cordond logged the failed reload" 'grep -q "reload rejected" <<<"$all"'
ok "the failed reload is logged at priority warning or worse (journalctl -p warning)" 'test -n "$warn"'
ok "the rejection and its reason are one journal entry (not one entry per line)" \
    'journal_since "$mark" -t cordond -o json | grep "reload rejected" | grep -q "invalid TOML"'
ok "no ANSI colour codes in the journal" '! grep -q $'"'"'\e\['"'"' <<<"$all"'
rm -f /etc/cordon/policies.d/broken.toml
systemctl reload cordond.service

section "state directory and audit log"
ok "/var/lib/cordon is 0700 root (StateDirectory=, StateDirectoryMode=)" \
    'test "$(stat -c "%a %U" /var/lib/cordon)" = "700 root"'
ok "the audit log records dev's invocation" 'grep -q "hello from dev" /var/lib/cordon/audit.jsonl'
info "audit log: $(stat -c '%a %U %s bytes' /var/lib/cordon/audit.jsonl)"

section "cgroup placement and stop"
rm -f /tmp/sleeper.pid
as_dev cordon run sleeper --arg pidfile=/tmp/sleeper.pid >/tmp/sleeper.out 2>&1 &
ok "the sleeper started (pidfile with two pids)" 'wait_for 20 pidfile_full'
svc_cg=$(prop cordond.service ControlGroup)
info "cordond.service ControlGroup=$svc_cg; cordond itself in $(cgroup_of "$(prop cordond.service MainPID)")"
inside=1
for tp in $(cat /tmp/sleeper.pid 2>/dev/null); do
    cg=$(cgroup_of "$tp")
    info "tool pid $tp: cgroup $cg"
    case $cg in "$svc_cg"/*) ;; *) inside=0 ;; esac
done
ok "every tool process is inside cordond.service's cgroup ($svc_cg/...)" 'test $inside = 1 -a -s /tmp/sleeper.pid'
info "cgroups under /sys/fs/cgroup/cordon: $(ls /sys/fs/cgroup/cordon 2>/dev/null | tr '\n' ' ')"
mark=$(now_s)
systemctl stop cordond.service
left=$(tool_pids)
[ -n "$left" ] && ps -o pid,user,cgroup:60,args -p "$(echo $left | tr ' ' ,)" | show
ok "systemctl stop cordond.service leaves no tool process behind" 'test -z "$left"'
ok "cordond sent STOPPING=1" 'journal_since "$mark" _PID=1 | grep cordond.service | grep -q STOPPING=1'
pkill -KILL -f '^/bin/sleep 1000$'
wait
ok "after the stop, the socket path is still there (systemd's socket, not removed by cordond)" \
    'test -S /run/cordon/cordon.sock'
out=$(as_dev cordon status 2>&1)
rc=$?
echo "$out" | head -3 | show
ok "the next connection starts cordond again through the socket" \
    'test $rc = 0 -a "$(systemctl is-active cordond.service)" = active'

section "cordond killed (-9): the unit's cgroup takes the tools with it"
rm -f /tmp/sleeper.pid
as_dev cordon run sleeper --arg pidfile=/tmp/sleeper.pid >/tmp/sleeper.out 2>&1 &
wait_for 20 pidfile_full
pid=$(prop cordond.service MainPID)
kill -KILL "$pid"
restarted() {
    local m
    m=$(prop cordond.service MainPID)
    test "$(systemctl is-active cordond.service)" = active -a "$m" != "$pid" -a "$m" != 0
}
ok "Restart=on-failure brought cordond back" 'wait_for 30 restarted'
wait_for 5 no_tool_pids
left=$(tool_pids)
[ -n "$left" ] && ps -o pid,user,cgroup:60,args -p "$(echo $left | tr ' ' ,)" | show
ok "no tool process survived cordond's SIGKILL" 'test -z "$left"'
pkill -KILL -f '^/bin/sleep 1000$'
wait
info "cgroups left under /sys/fs/cgroup/cordon: $(ls /sys/fs/cgroup/cordon 2>/dev/null | tr '\n' ' ')"

section "a tool killed by its own memory limit"
out=$(as_dev cordon run memhog-limited --arg bytes=200000000 2>&1)
rc=$?
echo "$out" | tail -3 | show
ok "memhog-limited (limits.memory 64MiB) does not get to hold 200 MB" '! grep -q "held 200000000" <<<"$out"'
sleep 1
ok "cordond stays active after a tool's own OOM kill (OOMPolicy)" \
    'test "$(systemctl is-active cordond.service)" = active'
systemctl is-active -q cordond.service || systemctl start cordond.service

section "drop-in: WatchdogSec=2s, MemoryMax=96M"
mkdir -p /etc/systemd/system/cordond.service.d
printf '[Service]\nWatchdogSec=2s\nMemoryMax=96M\nMemorySwapMax=0\n' >/etc/systemd/system/cordond.service.d/vm-test.conf
systemctl daemon-reload
mark=$(now_s)
systemctl restart cordond.service
pid=$(prop cordond.service MainPID)
info "WatchdogUSec=$(prop cordond.service WatchdogUSec) MemoryMax=$(prop cordond.service MemoryMax)"
sleep 8 # four watchdog periods
j=$(journal_since "$mark" _PID=1 | grep cordond.service)
pings=$(grep -c 'WATCHDOG=1' <<<"$j")
info "WATCHDOG=1 notifications in 8 s: $pings"
ok "the watchdog did not fire on a healthy cordond over 4 x WatchdogSec" \
    'test "$(systemctl is-active cordond.service)" = active -a "$(prop cordond.service MainPID)" = "$pid" && ! grep -qi "watchdog timeout" <<<"$j"'
ok "cordond pings the watchdog (WATCHDOG=1 seen)" 'test "$pings" -ge 2'
svc_cg=$(prop cordond.service ControlGroup)
before=$(sed -n 's/^oom_kill //p' "/sys/fs/cgroup$svc_cg/memory.events")
out=$(as_dev cordon run memhog --arg bytes=200000000 2>&1)
rc=$?
echo "$out" | tail -3 | show
after=$(sed -n 's/^oom_kill //p' "/sys/fs/cgroup$svc_cg/memory.events" 2>/dev/null)
info "memhog exit $rc; cordond.service memory.events oom_kill $before -> $after"
ok "MemoryMax=96M on the unit stops a tool holding 200 MB (tool killed, oom_kill counted in the unit)" \
    'test $rc != 0 && test "${after:-0}" -gt "${before:-0}" && ! grep -q "held 200000000" <<<"$out"'
sleep 1
ok "cordond survives the tool's OOM kill" 'test "$(systemctl is-active cordond.service)" = active'
rm -f /etc/systemd/system/cordond.service.d/vm-test.conf
systemctl daemon-reload
systemctl is-active -q cordond.service || systemctl start cordond.service

section "restart"
pid=$(prop cordond.service MainPID)
out=$(systemctl restart cordond.service 2>&1)
rc=$?
echo "$out" | show
new=$(prop cordond.service MainPID)
ok "systemctl restart: exit 0, active, new MainPID ($pid -> $new)" \
    'test $rc = 0 -a "$(systemctl is-active cordond.service)" = active -a "$new" != "$pid"'
ok "dev runs echo after the restart" 'test "$(as_dev cordon run echo --arg text=again 2>&1)" = "[again]"'

section "for the record"
sec=$(systemd-analyze security --no-pager cordond.service 2>&1)
grep -e '✗' <<<"$sec" | show
info "$(grep 'Overall exposure' <<<"$sec")"
out=$(cordon doctor 2>&1)
info "cordon doctor (root) exit $?"
echo "$out" | show
info "/sys/fs/cgroup as cordond sees it: $(grep ' /sys/fs/cgroup ' /proc/"$(prop cordond.service MainPID)"/mountinfo | cut -d' ' -f5,6)"
systemd-analyze log-level info
say "-- journalctl -t cordond (cordond's own lines, last 40)"
journalctl -q --no-pager -o short-monotonic -t cordond | tail -40 | show
systemctl stop cordond.service cordond.socket

section "done: $fails failed"
[ $fails = 0 ]
