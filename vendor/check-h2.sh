#!/usr/bin/env bash
# Checks that vendor/h2 is crates.io's h2 0.4.20 with vendor/h2.patch applied and nothing else
# (see vendor/README.md): cargo fetches the published .crate, its SHA-256 is checked against the
# registry index's (through a lock file) and the value pinned here, the patch is applied to it,
# and the result must equal vendor/h2 file for file. Needs crates.io (or the .crate in cargo's
# cache); takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

version=0.4.20
# The checksum crates.io's index gives for h2 0.4.20 (the `checksum` of its Cargo.lock entry).
sha256=7d29020232d6aa3fb1daca64c1127cf662cf97f254ae16c18c05b8ab635fc118

work=$(mktemp -d /tmp/cordon-h2.XXXXXX)
trap 'rm -rf "$work"' EXIT

# A throwaway package that depends on exactly this h2 (unpatched): cargo downloads the .crate
# into its cache and writes the index's checksum into the lock file.
mkdir -p "$work/fetch/src"
: >"$work/fetch/src/lib.rs"
cat >"$work/fetch/Cargo.toml" <<TOML
[package]
name = "h2-fetch"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
h2 = "=$version"

[workspace]
TOML
cargo fetch --quiet --manifest-path "$work/fetch/Cargo.toml"
locked=$(grep -A3 '^name = "h2"$' "$work/fetch/Cargo.lock" | sed -n 's/^checksum = "\(.*\)"$/\1/p')
if [ "$locked" != "$sha256" ]; then
  echo "h2 $version: the index's checksum is $locked, not the pinned $sha256" >&2
  exit 1
fi
crate=$(find "${CARGO_HOME:-$HOME/.cargo}/registry/cache" -name "h2-$version.crate" | head -n 1)
[ -n "$crate" ] || { echo "cargo fetch left no h2-$version.crate in its cache" >&2; exit 1; }
echo "$sha256  $crate" | sha256sum --check --quiet

tar -xzf "$crate" -C "$work"
published="$work/h2-$version"
# What vendor/h2 leaves out of the published crate: its VCS note, its CI files, its lock file.
rm -rf "$published/.cargo_vcs_info.json" "$published/.github" "$published/Cargo.lock"
patch --quiet --no-backup-if-mismatch -d "$published" -p1 <vendor/h2.patch
if ! diff -r "$published" vendor/h2; then
  echo "vendor/h2 is not crates.io's h2 $version with vendor/h2.patch applied (the differences above)" >&2
  exit 1
fi
echo "vendor/h2 = crates.io h2 $version (sha256 $sha256) + vendor/h2.patch ($(grep -c '^[-+][^-+]' vendor/h2.patch) changed lines)"
