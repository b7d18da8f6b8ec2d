#!/bin/bash
# Tests cordond's systemd units under a real systemd (PID 1) in a throw-away Debian bookworm VM.
#
#   packaging/vm-test.sh [--bin-dir DIR] [--unit-dir DIR] [--rebuild]
#
# Phases (each timed): host tools (apt-get, only what is missing), the base image (debootstrap +
# mkfs.ext4 -d, built once and cached under $CORDON_VM_CACHE keyed by the package list and the
# files under packaging/vm/ that go into it), the payload disk (cordon binaries, units, test
# policies, the checks), the boot (qemu + KVM, root disk opened with snapshot=on so the cache
# stays pristine). The checks run inside the VM as a oneshot unit after boot and write
# "CORDON-VM: PASS|FAIL|INFO ..." lines to the serial console; this script prints them, and exits
# 1 on any FAIL, on a missing END line or on timeout; 0 with "SKIPPED" when there is no /dev/kvm
# (or, with CORDON_VM_ACCEL=kvm, when a KVM guest does not run; auto falls back to TCG).
#
# Environment: CORDON_BIN_DIR (cordond + cordon; default target/release if both are there, else
# target/debug), CORDON_UNIT_DIR (cordond.service + cordond.socket; default daemon/systemd),
# CORDON_VM_CACHE (/var/tmp/cordon-vm), CORDON_VM_TIMEOUT (seconds for the boot and
# the checks, 600), CORDON_VM_MEM (MiB, 1024), CORDON_VM_MIRROR (http://deb.debian.org/debian),
# CORDON_VM_ACCEL (auto: KVM when a guest really runs, else TCG; kvm: skip without it; tcg),
# CORDON_VM_LOG (where to keep the whole serial log; default a temporary file, kept on failure).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
vmdir=$here/vm
cache=${CORDON_VM_CACHE:-/var/tmp/cordon-vm}
timeout_s=${CORDON_VM_TIMEOUT:-600}
mem=${CORDON_VM_MEM:-1024}
mirror=${CORDON_VM_MIRROR:-http://deb.debian.org/debian}
suite=bookworm
bin_dir=${CORDON_BIN_DIR:-}
unit_dir=${CORDON_UNIT_DIR:-$repo/daemon/systemd}
rebuild=0
while [ $# -gt 0 ]; do
    case $1 in
    --bin-dir) bin_dir=$2; shift 2 ;;
    --bin-dir=*) bin_dir=${1#*=}; shift ;;
    --unit-dir) unit_dir=$2; shift 2 ;;
    --unit-dir=*) unit_dir=${1#*=}; shift ;;
    --rebuild) rebuild=1; shift ;;
    -h | --help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "vm-test: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done

# What the base image holds. systemd + udev + dbus (systemd-analyze security talks to the bus),
# procps (/bin/kill: the unit's ExecReload), passwd (groupadd/useradd), the kernel and its initrd.
packages=systemd,systemd-sysv,udev,dbus,procps,passwd,kmod,initramfs-tools,linux-image-amd64

t_start=$(date +%s)
phase_start=$t_start
phase() { # NAME: prints how long the previous phase took, starts NAME
    local now
    now=$(date +%s)
    [ -n "${phase_name:-}" ] && echo "vm-test: phase '$phase_name' took $((now - phase_start))s"
    phase_name=$1
    phase_start=$now
    [ -n "$1" ] && echo "vm-test: phase '$1'..."
    return 0
}
die() { echo "vm-test: error: $*" >&2; exit 1; }
skip() { echo "vm-test: SKIPPED: $*"; exit 0; }

[ "$(id -u)" = 0 ] || die "run as root (debootstrap, and the image's files must be owned by root)"

# --- KVM -----------------------------------------------------------------------------------
[ -e /dev/kvm ] || skip "/dev/kvm does not exist (no hardware virtualization here)"
[ -r /dev/kvm ] && [ -w /dev/kvm ] || skip "/dev/kvm is not usable by $(id -un)"
accel=${CORDON_VM_ACCEL:-auto}
case $accel in auto | kvm | tcg) ;; *) die "CORDON_VM_ACCEL must be auto, kvm or tcg" ;; esac

# --- host tools ----------------------------------------------------------------------------
phase "host tools"
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v mkfs.ext4 >/dev/null || need+=(e2fsprogs)
command -v flock >/dev/null || need+=(util-linux)
if [ ${#need[@]} -gt 0 ]; then
    command -v apt-get >/dev/null || die "missing ${need[*]} and no apt-get to install them"
    echo "vm-test: installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# --- binaries ------------------------------------------------------------------------------
if [ -z "$bin_dir" ]; then
    if [ -x "$repo/target/release/cordond" ] && [ -x "$repo/target/release/cordon" ]; then
        bin_dir=$repo/target/release
    else
        bin_dir=$repo/target/debug
    fi
fi
for b in cordond cordon; do
    [ -x "$bin_dir/$b" ] || die "$bin_dir/$b is missing: cargo build -p cordon-daemon -p cordon-client (or --bin-dir)"
done

# --- base image (cached) -------------------------------------------------------------------
phase "base image"
key=$( (echo "$suite $packages"; cat "$vmdir/base-setup.sh" "$vmdir/cordon-vm-runner" \
    "$vmdir/cordon-vm-runner.service") | sha256sum | cut -c1-16)
base=$cache/base-$suite-$key
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ "$rebuild" = 1 ]; then rm -rf "$base"; fi
if [ -f "$base/rootfs.img" ] && [ -f "$base/vmlinuz" ] && [ -f "$base/initrd.img" ]; then
    echo "vm-test: cached base image $base"
else
    echo "vm-test: building the base image $base (debootstrap $suite; a few minutes)"
    tmp=$cache/.build-$key
    rm -rf "$tmp"
    mkdir -p "$tmp"
    debootstrap --variant=minbase --include="$packages" "$suite" "$tmp/root" "$mirror" \
        >"$tmp/debootstrap.log" 2>&1 || { tail -20 "$tmp/debootstrap.log"; die "debootstrap failed (log: $tmp/debootstrap.log)"; }
    cp "$vmdir/cordon-vm-runner" "$vmdir/cordon-vm-runner.service" "$tmp/root/tmp/"
    cp "$vmdir/base-setup.sh" "$tmp/root/tmp/base-setup.sh"
    chroot "$tmp/root" /bin/sh /tmp/base-setup.sh
    rm -f "$tmp/root/tmp/base-setup.sh"
    vmlinuz=$(ls "$tmp"/root/boot/vmlinuz-* | sort -V | tail -1)
    initrd=$(ls "$tmp"/root/boot/initrd.img-* | sort -V | tail -1)
    [ -f "$vmlinuz" ] && [ -f "$initrd" ] || die "no kernel or initrd in the debootstrapped root"
    cp "$vmlinuz" "$tmp/vmlinuz"
    cp "$initrd" "$tmp/initrd.img"
    used=$(du -sm "$tmp/root" | cut -f1)
    # Room for the journal, the tools' /tmp files and a debug cordond's state.
    mkfs.ext4 -q -F -L cordon-vm -d "$tmp/root" "$tmp/rootfs.img" "$((used + 512))M" >/dev/null
    echo "$packages" | tr , '\n' >"$tmp/packages.txt"
    rm -rf "$tmp/root"
    rm -rf "$base"
    mv "$tmp" "$base"
    echo "vm-test: base image built: $(du -sh "$base" | cut -f1) in $base"
fi
flock -u 9

# --- accelerator ---------------------------------------------------------------------------
# /dev/kvm can exist and open while no guest runs (nested virtualization that the outer
# hypervisor does not really offer, e.g. inside a Firecracker VM): boot the kernel alone (it
# panics at once, no root) and look for its banner. auto falls back to TCG (emulation: several
# times slower, same results); kvm skips instead.
phase "accelerator"
if [ "$accel" != tcg ]; then
    probe_log=$(mktemp)
    timeout 15 qemu-system-x86_64 -accel kvm -m 256 -nographic -nodefaults -no-reboot \
        -serial "file:$probe_log" -monitor none -kernel "$base/vmlinuz" \
        -append "console=ttyS0 panic=-1 loglevel=4" >/dev/null 2>&1 || true
    if grep -q 'Linux version' "$probe_log"; then
        accel=kvm
    elif [ "$accel" = kvm ]; then
        rm -f "$probe_log"
        skip "/dev/kvm opens but a KVM guest does not run here (no kernel output in 15 s)"
    else
        echo "vm-test: warning: /dev/kvm opens but a KVM guest does not run here (nested virtualization?): using TCG emulation, much slower"
        accel=tcg
    fi
    rm -f "$probe_log"
fi
if [ "$accel" = tcg ]; then
    timeout_s=${CORDON_VM_TIMEOUT:-1200}
    cpu=(-accel tcg,thread=multi -cpu max)
else
    cpu=(-accel kvm -cpu host)
fi
echo "vm-test: accelerator $accel"

# --- payload disk --------------------------------------------------------------------------
phase "payload"
work=$(mktemp -d /var/tmp/cordon-vm-run.XXXXXX)
log=${CORDON_VM_LOG:-$work/serial.log}
keep_log=0
cleanup() {
    if [ -n "${qemu_pid:-}" ] && kill -0 "$qemu_pid" 2>/dev/null; then
        kill "$qemu_pid" 2>/dev/null || true
    fi
    if [ "$keep_log" = 1 ] && [ "$log" = "$work/serial.log" ]; then
        mv "$log" "$cache/last-serial.log" 2>/dev/null && echo "vm-test: serial log kept in $cache/last-serial.log"
    fi
    rm -rf "$work"
}
trap cleanup EXIT
p=$work/payload
mkdir -p "$p/bin" "$p/units" "$p/policies"
install -m 0755 "$vmdir/checks.sh" "$p/run"
install -m 0755 "$bin_dir/cordond" "$bin_dir/cordon" "$p/bin/"
install -m 0644 "$unit_dir/cordond.service" "$unit_dir/cordond.socket" "$p/units/"
install -m 0644 "$vmdir"/policies/*.toml "$p/policies/"
(cd "$repo" && git rev-parse --short HEAD 2>/dev/null || echo unknown) >"$p/commit"
echo "vm-test: binaries from $bin_dir ($("$bin_dir/cordond" --version 2>/dev/null | head -1))"
size=$(du -sm "$p" | cut -f1)
mkfs.ext4 -q -F -L payload -d "$p" "$work/payload.img" "$((size + size / 4 + 32))M" >/dev/null

# --- boot and checks -----------------------------------------------------------------------
phase "boot and checks"
qemu-system-x86_64 "${cpu[@]}" -smp 2 -m "$mem" -nographic -nodefaults -no-reboot \
    -serial "file:$log" -monitor none \
    -kernel "$base/vmlinuz" -initrd "$base/initrd.img" \
    -append "root=/dev/vda rw console=ttyS0 panic=-1 systemd.show_status=false" \
    -drive "file=$base/rootfs.img,format=raw,if=virtio,snapshot=on" \
    -drive "file=$work/payload.img,format=raw,if=virtio,readonly=on" \
    -nic none &
qemu_pid=$!
status=running
deadline=$(($(date +%s) + timeout_s))
shown=0
while kill -0 "$qemu_pid" 2>/dev/null; do
    # Print the transcript as it comes.
    if [ -f "$log" ]; then
        n=$(grep -c '^CORDON-VM: ' <(tr -d '\r' <"$log") || true)
        if [ "$n" -gt "$shown" ]; then
            tr -d '\r' <"$log" | grep '^CORDON-VM: ' | sed -n "$((shown + 1)),${n}p"
            shown=$n
        fi
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
        status=timeout
        kill "$qemu_pid" 2>/dev/null || true
        break
    fi
    sleep 1
done
wait "$qemu_pid" 2>/dev/null || true
qemu_pid=
n=$(tr -d '\r' <"$log" | grep -c '^CORDON-VM: ' || true)
[ "$n" -gt "$shown" ] && tr -d '\r' <"$log" | grep '^CORDON-VM: ' | sed -n "$((shown + 1)),${n}p"
phase ""

passes=$(tr -d '\r' <"$log" | grep -c '^CORDON-VM: PASS' || true)
fails=$(tr -d '\r' <"$log" | grep -c '^CORDON-VM: FAIL' || true)
ended=$(tr -d '\r' <"$log" | grep -c '^CORDON-VM: END' || true)
total=$(($(date +%s) - t_start))
echo "vm-test: $passes passed, $fails failed; total runtime ${total}s"
if [ "$status" = timeout ]; then
    keep_log=1
    tr -d '\r' <"$log" | tail -40
    echo "vm-test: FAILED: timeout after ${timeout_s}s"
    exit 1
fi
if [ "$ended" = 0 ]; then
    keep_log=1
    tr -d '\r' <"$log" | tail -40
    echo "vm-test: FAILED: the VM stopped before the checks ended"
    exit 1
fi
if [ "$fails" != 0 ]; then
    keep_log=1
    echo "vm-test: FAILED"
    exit 1
fi
echo "vm-test: OK"
