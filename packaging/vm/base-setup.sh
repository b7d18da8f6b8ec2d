#!/bin/sh
# Runs inside the freshly debootstrapped root (chroot) once, when vm-test.sh builds the cached base
# image. Everything cordon-specific is NOT here: it comes with each run on the payload disk, so the
# base only changes with this file, cordon-vm-runner{,.service} or the package list.
set -eu
echo cordon-vm > /etc/hostname
printf '127.0.0.1 localhost\n127.0.1.1 cordon-vm\n' > /etc/hosts
printf '/dev/vda / ext4 rw,errors=remount-ro 0 1\n' > /etc/fstab
# No login prompts on the consoles (the serial console carries the transcript), no timers that
# could start apt or fstrim in the middle of a run.
for u in serial-getty@ttyS0.service getty@tty1.service console-getty.service \
    apt-daily.timer apt-daily-upgrade.timer fstrim.timer e2scrub_all.timer e2scrub_reap.service \
    systemd-timesyncd.service; do
    ln -sf /dev/null "/etc/systemd/system/$u"
done
# The journal in memory only: every boot is a fresh snapshot anyway.
mkdir -p /etc/systemd/journald.conf.d
printf '[Journal]\nStorage=volatile\nRateLimitBurst=0\n' > /etc/systemd/journald.conf.d/cordon-vm.conf
install -m 0755 /tmp/cordon-vm-runner /usr/local/sbin/cordon-vm-runner
install -m 0644 /tmp/cordon-vm-runner.service /etc/systemd/system/cordon-vm-runner.service
mkdir -p /etc/systemd/system/multi-user.target.wants
ln -sf /etc/systemd/system/cordon-vm-runner.service \
    /etc/systemd/system/multi-user.target.wants/cordon-vm-runner.service
rm -f /tmp/cordon-vm-runner /tmp/cordon-vm-runner.service
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
