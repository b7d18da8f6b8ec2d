#!/usr/bin/env bash
# Installs cordon from this source tree: the one list of what goes where, used both for a
# host without a package (Fedora, Arch, ...) and to stage the Debian package
# (packaging/build-deb.sh stages with --destdir and cargo-deb packs the staged tree).
#
#   cargo build --release --locked -p cordon-client -p cordon-daemon     (as yourself)
#   sudo packaging/install.sh --no-build install under /usr/local, create the groups and
#                                        directories, enable cordond.socket
#   packaging/install.sh --uninstall     stop and disable cordond, remove the installed files
#                                        (keeps /etc/cordon and the audit log in /var/lib/cordon)
#
# Options:
#   --prefix DIR      where binaries, units, man pages and completions go (default /usr/local;
#                     the Debian package uses /usr). Policies always go to /etc/cordon/policies.d.
#   --destdir DIR     stage into DIR instead of the live system (no groups, no systemctl)
#   --layout debian   Debian's directories: units in /lib/systemd/system when the prefix is /usr,
#                     zsh completions in share/zsh/vendor-completions (default: auto-detected)
#   --no-build        use the binaries already in target/release (without it, install.sh runs
#                     cargo build --release first, which under sudo usually finds no cargo)
#   --list            print "MODE DESTINATION" for every file and exit (after building)
# The documentation (README.md, ARCHITECTURE.md, docs/*.md) goes to PREFIX/share/doc/cordon, and the
# HTML book to PREFIX/share/doc/cordon/html when target/book was built (mdbook build docs).
set -euo pipefail
shopt -s nullglob

repo=$(cd "$(dirname "$0")/.." && pwd)
prefix=/usr/local
destdir=""
layout=auto
build=1
action=install

while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix=${2:?--prefix needs a directory}; shift 2 ;;
    --destdir) destdir=${2:?--destdir needs a directory}; shift 2 ;;
    --layout) layout=${2:?--layout needs debian or other}; shift 2 ;;
    --no-build) build=0; shift ;;
    --uninstall) action=uninstall; shift ;;
    --list) action=list; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$prefix" in /*) ;; *) echo "install.sh: --prefix must be absolute" >&2; exit 2 ;; esac
if [ "$layout" = auto ]; then
  if [ -f /etc/debian_version ]; then layout=debian; else layout=other; fi
fi
case "$layout" in debian | other) ;; *) echo "install.sh: --layout is debian or other" >&2; exit 2 ;; esac

target=${CARGO_TARGET_DIR:-$repo/target}
bin_src=$target/release
gen=$target/packaging/gen

# Where things go.
bindir=$prefix/bin
if [ "$layout" = debian ] && [ "$prefix" = /usr ]; then
  unitdir=/lib/systemd/system # bookworm's dh_installsystemd location (usrmerge: same as /usr/lib)
else
  unitdir=$prefix/lib/systemd/system
fi
sysusersdir=$prefix/lib/sysusers.d
tmpfilesdir=$prefix/lib/tmpfiles.d
policydir=/etc/cordon/policies.d
mandir=$prefix/share/man
bashcompdir=$prefix/share/bash-completion/completions
if [ "$layout" = debian ]; then
  zshcompdir=$prefix/share/zsh/vendor-completions
else
  zshcompdir=$prefix/share/zsh/site-functions
fi
fishcompdir=$prefix/share/fish/vendor_completions.d
docdir=$prefix/share/doc/cordon

# Builds the binaries and generates what comes from them (completions, man pages) and the unit
# with this prefix's cordond path.
generate() {
  if [ "$build" = 1 ]; then
    command -v cargo >/dev/null 2>&1 || {
      echo "install.sh: cargo is not on PATH (sudo resets it): build as yourself with" >&2
      echo "  cargo build --release --locked -p cordon-client -p cordon-daemon" >&2
      echo "then run install.sh --no-build as root" >&2
      exit 1
    }
    (cd "$repo" && cargo build --release --locked -p cordon-client -p cordon-daemon)
  fi
  for b in cordon cordond; do
    [ -x "$bin_src/$b" ] || { echo "install.sh: $bin_src/$b is missing: build it first (without --no-build)" >&2; exit 1; }
  done
  rm -rf "$gen"
  mkdir -p "$gen/man" "$gen/completions" "$gen/units"
  "$bin_src/cordon" completions bash >"$gen/completions/cordon.bash"
  "$bin_src/cordon" completions zsh >"$gen/completions/_cordon"
  "$bin_src/cordon" completions fish >"$gen/completions/cordon.fish"
  "$bin_src/cordon" man --dir "$gen/man"
  "$bin_src/cordond" --man-dir "$gen/man"
  gzip -9n "$gen"/man/*.[18]
  sed "s|^ExecStart=/usr/bin/cordond |ExecStart=$bindir/cordond |" "$repo/daemon/systemd/cordond.service" >"$gen/units/cordond.service"
  grep -q "^ExecStart=$bindir/cordond " "$gen/units/cordond.service" || {
    echo "install.sh: daemon/systemd/cordond.service has no 'ExecStart=/usr/bin/cordond ' line to point at $bindir" >&2
    exit 1
  }
  cp "$repo/daemon/systemd/cordond.socket" "$gen/units/cordond.socket"
  # The documentation, readable offline: README.md, ARCHITECTURE.md and every page of the book
  # (docs/*.md) flat in the doc directory, the generated reference pages in reference/, with the
  # links between them rewritten for that layout (docs/X.md -> X.md, ../README.md -> README.md).
  mkdir -p "$gen/doc/reference"
  local f
  for f in "$repo/README.md" "$repo/ARCHITECTURE.md"; do
    sed 's|](docs/|](|g' "$f" >"$gen/doc/$(basename "$f")"
  done
  for f in "$repo"/docs/*.md; do
    sed 's|](\.\./README\.md|](README.md|g; s|](\.\./ARCHITECTURE\.md|](ARCHITECTURE.md|g
      s|^{{#include \.\./README\.md:quickstart}}$|[README.md](README.md#quick-start) has it.|' "$f" >"$gen/doc/$(basename "$f")"
  done
  cp "$repo"/docs/reference/*.md "$gen/doc/reference/"
}

# The one list: "MODE SOURCE DESTINATION", one file a line.
files() {
  echo "0755 $bin_src/cordon $bindir/cordon"
  echo "0755 $bin_src/cordond $bindir/cordond"
  echo "0644 $gen/units/cordond.service $unitdir/cordond.service"
  echo "0644 $gen/units/cordond.socket $unitdir/cordond.socket"
  echo "0644 $repo/packaging/sysusers.d/cordon.conf $sysusersdir/cordon.conf"
  echo "0644 $repo/packaging/tmpfiles.d/cordon.conf $tmpfilesdir/cordon.conf"
  local f
  for f in "$repo"/packaging/policies.d/*.toml; do
    echo "0644 $f $policydir/$(basename "$f")"
  done
  echo "0644 $gen/completions/cordon.bash $bashcompdir/cordon"
  echo "0644 $gen/completions/_cordon $zshcompdir/_cordon"
  echo "0644 $gen/completions/cordon.fish $fishcompdir/cordon.fish"
  for f in "$gen"/man/*.1.gz; do echo "0644 $f $mandir/man1/$(basename "$f")"; done
  for f in "$gen"/man/*.8.gz; do echo "0644 $f $mandir/man8/$(basename "$f")"; done
  echo "0644 $repo/packaging/copyright $docdir/copyright"
  for f in "$gen"/doc/*.md; do echo "0644 $f $docdir/$(basename "$f")"; done
  for f in "$gen"/doc/reference/*.md; do echo "0644 $f $docdir/reference/$(basename "$f")"; done
  # The HTML book, when it was built (mdbook build docs: tests/run, packaging/build-deb.sh).
  if [ -f "$target/book/index.html" ]; then
    (cd "$target/book" && find . -type f ! -name book.toml | sed 's|^\./||' | LC_ALL=C sort) |
      while read -r f; do echo "0644 $target/book/$f $docdir/html/$f"; done
  fi
}

# Creates the groups and directories (what the Debian package's postinst does).
setup_host() {
  if command -v systemd-sysusers >/dev/null 2>&1; then
    systemd-sysusers "$sysusersdir/cordon.conf"
  else
    for g in cordon cordon-admin; do
      getent group "$g" >/dev/null || groupadd --system "$g"
    done
  fi
  if command -v systemd-tmpfiles >/dev/null 2>&1; then
    systemd-tmpfiles --create "$tmpfilesdir/cordon.conf"
  else
    install -d -m 0700 -o root -g root /var/lib/cordon
    install -d -m 0755 -o root -g root /run/cordon
  fi
  if [ -d /run/systemd/system ]; then
    systemctl daemon-reload
    systemctl enable --now cordond.socket
    # An upgrade: a running cordond is restarted on the new binary.
    systemctl try-restart cordond.service
  else
    echo "install.sh: systemd is not running: start cordond by hand, e.g. $bindir/cordond --policies $policydir"
  fi
}

do_install() {
  generate
  local mode src dst
  while read -r mode src dst; do
    local to=$destdir$dst
    install -d -m 0755 "$(dirname "$to")"
    if [ "$(dirname "$dst")" = "$policydir" ] && [ -e "$to" ] && ! cmp -s "$src" "$to"; then
      # An admin's policy is never overwritten (like a conffile): the new version lands next to it
      # under a name cordond does not read.
      install -m "$mode" -o root -g root "$src" "$to.new"
      echo "install.sh: kept your $to; the shipped version is $to.new"
      continue
    fi
    if [ -n "$destdir" ]; then
      install -m "$mode" "$src" "$to"
    else
      install -m "$mode" -o root -g root "$src" "$to"
    fi
  done < <(files)
  if [ -z "$destdir" ]; then
    setup_host
  fi
}

do_uninstall() {
  if [ -z "$destdir" ] && [ -d /run/systemd/system ]; then
    systemctl disable --now cordond.socket cordond.service || true
  fi
  local mode src dst
  while read -r mode src dst; do
    case "$dst" in "$policydir"/*) continue ;; esac
    rm -f "$destdir$dst"
  done < <(files)
  # The documentation by directory: the book that was installed may have had other pages.
  rm -rf "$destdir$docdir/html" "$destdir$docdir/reference"
  rm -f "$destdir$docdir"/*.md
  # The man pages by name: one per subcommand of the build that was installed.
  rm -f "$destdir$mandir"/man1/cordon.1.gz "$destdir$mandir"/man1/cordon-*.1.gz "$destdir$mandir"/man8/cordond.8.gz
  # Directories left empty (the ones install created), up to the standard ones.
  local d
  while read -r mode src dst; do
    d=$(dirname "$dst")
    while true; do
      case "$d" in / | /etc | /lib | "$prefix" | "$bindir" | "$prefix/lib" | "$prefix/share" | "$mandir") break ;; esac
      rmdir "$destdir$d" 2>/dev/null || break
      d=$(dirname "$d")
    done
  done < <(files; echo "0644 - $mandir/man1/cordon.1.gz"; echo "0644 - $mandir/man8/cordond.8.gz")
  if [ -z "$destdir" ] && [ -d /run/systemd/system ]; then
    systemctl daemon-reload
  fi
  echo "install.sh: removed cordon; kept $policydir (your policies), /var/lib/cordon (the audit log) and the groups cordon, cordon-admin"
}

if [ "$action" != list ] && [ -z "$destdir" ] && [ "$(id -u)" != 0 ]; then
  echo "install.sh: installing on this system needs root (or --destdir DIR to stage)" >&2
  exit 1
fi
case "$action" in
  install) do_install ;;
  uninstall) do_uninstall ;;
  list) generate; files | while read -r mode _ dst; do echo "$mode $dst"; done ;;
esac
