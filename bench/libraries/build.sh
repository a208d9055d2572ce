#!/usr/bin/env bash
# Builds one public kernel library with kart, its sources copied unmodified.
#
#   bench/libraries/build.sh NAME SRC_DIR [KART_BUILD_ARGS...]
#
# NAME is a folder of bench/libraries (sgemm, llmc, deepgemm); SRC_DIR a checkout of the
# library at the commit its SOURCE file names. The script makes a temp project (kart.toml
# and kernel.toml files of bench/libraries/NAME, plus the upstream files SOURCE lists),
# runs `kart toolchain install` and `kart build` (nice -n 10), then exports every locked
# config to bench/libraries/out/NAME.py for gpu_check.py. Extra arguments go to
# `kart build` (a slice of a grid: -p BK=16). The temp project is kept and printed as
# `project: DIR` (remove it when done). KART: the kart binary (default
# target/release/kart of this repository).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
name=${1:?usage: build.sh NAME SRC_DIR [KART_BUILD_ARGS...]}
src=${2:?usage: build.sh NAME SRC_DIR [KART_BUILD_ARGS...]}
shift 2
kart=${KART:-$repo/target/release/kart}
lib="$here/$name"
[ -f "$lib/SOURCE" ] || { echo "error: $lib/SOURCE not found (NAME: sgemm, llmc, deepgemm)" >&2; exit 2; }
[ -d "$src" ] || { echo "error: $src is not a folder (a checkout of the library)" >&2; exit 2; }
want=$(awk '$1 == "commit" { print $2 }' "$lib/SOURCE")
if have=$(git -C "$src" rev-parse HEAD 2>/dev/null); then
  [ "$have" = "$want" ] || echo "warning: $src is at $have, SOURCE names $want" >&2
fi

W=$(mktemp -d "${TMPDIR:-/tmp}/kart-lib-$name.XXXXXX")
# The manifests: everything in bench/libraries/NAME but SOURCE.
(cd "$lib" && find . -type f ! -name SOURCE ! -path './artifacts/*' -print0 |
  while IFS= read -r -d '' f; do mkdir -p "$W/$(dirname "$f")"; cp "$f" "$W/$f"; done)
# The library's files, unmodified: `file UPSTREAM DEST` and `tree UPSTREAM_DIR DEST_DIR`.
while read -r kind from to; do
  case "$kind" in
    file) mkdir -p "$W/$(dirname "$to")"; cp "$src/$from" "$W/$to" ;;
    tree) mkdir -p "$W/$to"; cp -R "$src/$from/." "$W/$to/" ;;
    *) ;;
  esac
done < "$lib/SOURCE"
echo "project: $W"
echo "kart: $(git -C "$repo" rev-parse --short HEAD)"

cd "$W"
"$kart" toolchain install >/dev/null
problems=()
[ -f problems.toml ] && problems=(--problems problems.toml)
start=$(date +%s.%N)
set +e
env -u KART_NVCC nice -n 10 "$kart" build "${problems[@]}" "$@"
rc=$?
set -e
end=$(date +%s.%N)
echo "kart build: exit $rc, wall $(echo "$end - $start" | bc) s"
"$kart" ls --json > ls.json || true
if [ -s kart.lock ] && grep -q '^\[\[artifact\]\]' kart.lock; then
  mkdir -p "$here/out"
  kernels=$(sed -n 's/^name = "\(.*\)"$/\1/p' kernels/*/kernel.toml)
  # shellcheck disable=SC2086
  "$kart" export --python -o "$here/out/$name.py" $kernels --all-configs
  echo "exported: bench/libraries/out/$name.py ($(du -k "$here/out/$name.py" | cut -f1) KiB)"
fi
exit $rc
