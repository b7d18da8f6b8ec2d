#!/usr/bin/env bash
# Builds the Debian package target/debian/cordon_VERSION-1_ARCH.deb: the release binaries,
# staged by packaging/install.sh (the one list of files) with Debian's layout, packed by
# cargo-deb (`cargo install cargo-deb --locked` once) with packaging/debian/'s maintainer scripts.
#   packaging/build-deb.sh [--no-build]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}
root=$target/packaging/root
command -v cargo-deb >/dev/null 2>&1 || { echo "build-deb.sh: cargo-deb is missing: cargo install cargo-deb --locked" >&2; exit 1; }
rm -rf "$root"
# The HTML book (share/doc/cordon/html, from docs/ by mdbook) where mdbook is installed; tests/run
# installs it in its phase "docs book (mdbook build)", before the package's.
if command -v mdbook >/dev/null 2>&1; then
  mdbook build "$repo/docs" --dest-dir "$target/book"
else
  echo "build-deb.sh: mdbook is not installed, so the package gets the documentation as markdown only" >&2
  echo "  (cargo install mdbook --locked --version 0.5.4 --no-default-features adds the HTML book)" >&2
fi
"$repo/packaging/install.sh" --prefix /usr --layout debian --destdir "$root" "$@"
cd "$repo"
cargo deb -p cordon-client --no-build --no-strip --output "$target/debian/"
