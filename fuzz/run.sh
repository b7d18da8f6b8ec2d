#!/usr/bin/env bash
# Builds the fuzz targets with cargo-afl and runs each for a bounded time, failing on any crash or
# hang (docs/fuzzing.md).
#
#   fuzz/run.sh SECONDS [TARGET...]     every target (or the ones named) for SECONDS each
#   fuzz/run.sh --build-only            install and build only (CI builds while the tests run)
#
# Installs what it needs, pinned and idempotent: cargo-afl (whose install builds AFL++ from the
# source the crate ships: nothing but crates.io). The seeds are fuzz/corpus/TARGET/; a run's
# findings go to fuzz/out/TARGET/ (not committed). A crash or hang is printed (base64) with the
# command that replays it; it then becomes a regression test in the normal suite and, minimised,
# a seed.
set -euo pipefail
cd "$(dirname "$0")"

AFL_VERSION=0.18.2
TARGETS=(proxy_http proxy_socks request_rules tls_hello terminated_request chunked_body mcp_lines mcp_http policy arguments tokens identities server_tool_list server_call_result)

seconds=${1:-}
build_only=no
if [ "$seconds" = --build-only ]; then
  build_only=yes
  seconds=1
fi
if ! [[ "$seconds" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: fuzz/run.sh SECONDS [TARGET...]  (targets: ${TARGETS[*]})" >&2
  exit 2
fi
shift
if [ $# -gt 0 ]; then
  for t in "$@"; do
    [[ " ${TARGETS[*]} " == *" $t "* ]] || { echo "fuzz/run.sh: no target $t (targets: ${TARGETS[*]})" >&2; exit 2; }
  done
  TARGETS=("$@")
fi

start=$SECONDS

# cargo-afl, pinned with the afl crate in fuzz/Cargo.toml. Its install builds the AFL++ runtime
# for the rustc that installs it; a toolchain changed since needs `cargo afl config --build`.
if ! cargo afl --version 2>/dev/null | grep -qw "$AFL_VERSION"; then
  cargo install cargo-afl --locked --version "$AFL_VERSION"
fi
rustc_release=$(rustc -vV | sed -n 's/^release: //p')
afl_data="${XDG_DATA_HOME:-$HOME/.local/share}/afl.rs"
if ! compgen -G "$afl_data/rustc-$rustc_release-*/afl.rs-$AFL_VERSION/afl-llvm/afl-compiler-rt.o" >/dev/null; then
  cargo afl config --build --force
fi
echo "-- cargo-afl ready: $((SECONDS - start))s"

# Without `--cfg fuzzing`: dependencies change under it (h2 adds a module that does not build),
# and what is fuzzed must be the code that ships. A short run's time is mostly the build, so by
# default it is -O0 with 16 codegen units (cargo-afl asks for one; a later -C wins): measured on
# the 2-core CI machine, 296 s of CPU for the whole build against 719 s at -O1 with one unit,
# for 2.5-6x fewer executions a second. For long runs: AFL_OPT_LEVEL=3 AFL_CODEGEN_UNITS=1.
# An explicit --target: the instrumentation and optimisation flags then apply to the targets'
# code only, not to build scripts and proc macros (protox, syn, serde_derive...), which are a
# good part of the build.
export AFL_NO_CFG_FUZZING=1 AFL_OPT_LEVEL=${AFL_OPT_LEVEL:-0}
export RUSTFLAGS="${RUSTFLAGS:-} -C codegen-units=${AFL_CODEGEN_UNITS:-16}"
triple=$(rustc -vV | sed -n 's/^host: //p')
cargo afl build --release --locked --target "$triple"
bin="target/$triple/release"
echo "-- targets built: $((SECONDS - start))s"
[ "$build_only" = no ] || exit 0

# afl-fuzz on a CI machine: no UI, no demand on the CPU governor or on where cores are dumped
# (the targets' panics abort, which afl-fuzz sees whatever core_pattern says), no failure when
# no core is free to bind to.
export AFL_NO_UI=1 AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_TRY_AFFINITY=1
dicts="$afl_data/AFLplusplus/dictionaries"
dictionary() {
  case "$1" in
    proxy_http | mcp_http | terminated_request) echo http.dict ;;
    mcp_lines | arguments | tokens | server_tool_list | server_call_result) echo json.dict ;;
    policy | identities) echo toml.dict ;;
  esac
}

failed=()
for t in "${TARGETS[@]}"; do
  out="out/$t"
  rm -rf "$out"
  mkdir -p "$out"
  args=(-i "corpus/$t" -o "$out" -V "$seconds" -t 5000)
  d=$(dictionary "$t")
  if [ -n "$d" ] && [ -f "$dicts/$d" ]; then
    args+=(-x "$dicts/$d")
  fi
  t0=$SECONDS
  if ! cargo afl fuzz "${args[@]}" -- "$bin/$t" >"$out/log" 2>&1; then
    echo "!! $t: afl-fuzz failed (a seed crashes or hangs?); the end of its log:" >&2
    tail -n 30 "$out/log" >&2
    failed+=("$t")
    continue
  fi
  stats="$out/default/fuzzer_stats"
  stat() { sed -n "s/^$1 *: //p" "$stats"; }
  printf '%-12s %4ss  %9s execs  %8s execs/s  corpus %4s  edges %-8s  crashes %s  hangs %s\n' \
    "$t" "$((SECONDS - t0))" "$(stat execs_done)" "$(stat execs_per_sec)" "$(stat corpus_count)" \
    "$(stat bitmap_cvg)" "$(stat saved_crashes)" "$(stat saved_hangs)"
  found=0
  for kind in crashes hangs; do
    for f in "$out/default/$kind"/id:*; do
      [ -e "$f" ] || continue
      found=1
      echo "!! $t: $kind: $f (replay: cargo afl build --release && fuzz/$bin/$t < $f)" >&2
      base64 -w 0 "$f" >&2
      echo >&2
    done
  done
  [ "$found" = 0 ] || failed+=("$t")
done

echo "-- fuzzing done: $((SECONDS - start))s in all"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz/run.sh: findings in: ${failed[*]}" >&2
  exit 1
fi
