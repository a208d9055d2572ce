#!/usr/bin/env bash
# What a program pays to reach one artifact of a large lock, for a kart and a baseline in
# one run: `Runtime::open` + select + read (and, with a GPU, load) of tiny[A=7,B=42] by
# crates/kart-runtime/examples/open_one.rs, and `kart path` of the same artifact, in
# projects of bench/scale.sh's `tiny<A, B>` (each holding at least its lock and that one
# blob). Runs are interleaved, new and base, so both see the same machine; medians of
# RUNS processes, in ms.
#
# Usage: bench/open_scale.sh PROJECT...
#   OPEN_ONE / OPEN_ONE_BASE   the example program, new and baseline (required)
#   KART / KART_BASE           kart binaries for `kart path` (the row is left out without)
#   GPU=1                      open_one --gpu: device 0 opened untimed, the load timed
#   RUNS                       processes per median (default 7)
set -euo pipefail
runs=${RUNS:-7}
: "${OPEN_ONE:?set OPEN_ONE to the open_one example to measure}"
: "${OPEN_ONE_BASE:?set OPEN_ONE_BASE to the baseline open_one}"
gpu=()
[[ ${GPU:-0} == 1 ]] && gpu=(--gpu)

ratio() { awk -v a="$1" -v b="$2" 'BEGIN {print (b > 0 ? a / b : 0)}'; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
wall_ms() {  # wall ms of one run of "$@" (its output discarded; fails loudly)
  local t0 t1
  t0=$(date +%s%N)
  "$@" >/dev/null 2>"$tmp/err" || { cat "$tmp/err" >&2; echo "failed: $*" >&2; exit 1; }
  t1=$(date +%s%N)
  echo "$(( (t1 - t0) / 1000 ))" | awk '{printf "%.3f\n", $1 / 1000}'
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "open_scale: tiny[A=7,B=42], cubin for 9.0; medians of $runs processes, ms (new / base)"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
if [[ ${#gpu[@]} -gt 0 ]]; then
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
fi
for project in "$@"; do
  n=$(grep -c '^\[\[artifact\]\]' "$project/kart.lock")
  echo
  echo "$n artifacts ($(du -h "$project/kart.lock" | cut -f1) lock)"
  : > "$tmp/new"; : > "$tmp/base"; : > "$tmp/pnew"; : > "$tmp/pbase"
  for _ in $(seq "$runs"); do
    # open_one prints its own split: open, select, read, total (with a GPU: open, load,
    # total), then peak KB.
    "$OPEN_ONE" "${gpu[@]}" "$project" tiny 9.0 A=7 B=42 >> "$tmp/new"
    "$OPEN_ONE_BASE" "${gpu[@]}" "$project" tiny 9.0 A=7 B=42 >> "$tmp/base"
    if [[ -n ${KART:-} && -n ${KART_BASE:-} ]]; then
      (cd "$project" && wall_ms "$KART" -q path tiny -p A=7 -p B=42 --target sm_90) >> "$tmp/pnew"
      (cd "$project" && wall_ms "$KART_BASE" -q path tiny -p A=7 -p B=42 --target sm_90) >> "$tmp/pbase"
    fi
  done
  names=(open select read total)
  [[ ${#gpu[@]} -gt 0 ]] && names=(open load total)
  for col in "${!names[@]}"; do
    nm=$(awk -v c=$((col + 1)) '{print $c}' "$tmp/new" | median)
    bm=$(awk -v c=$((col + 1)) '{print $c}' "$tmp/base" | median)
    printf '  open_one %-12s %9.2f / %9.2f   %6.2fx\n' "${names[$col]}" "$nm" "$bm" "$(ratio "$bm" "$nm")"
  done
  if [[ -s $tmp/pnew ]]; then
    nm=$(median < "$tmp/pnew"); bm=$(median < "$tmp/pbase")
    printf '  %-21s %9.2f / %9.2f   %6.2fx\n' "kart path" "$nm" "$bm" "$(ratio "$bm" "$nm")"
  fi
done
