# Sourced by the benchmark scripts: `median_ms N CMD...` runs CMD N times (output
# discarded) and prints the median wall time in milliseconds.
median_ms() {
  local n=$1; shift
  for _ in $(seq "$n"); do
    local t0 t1; t0=$(date +%s%N); "$@" >/dev/null 2>&1; t1=$(date +%s%N)
    echo $(( (t1 - t0) / 1000 ))
  done | sort -n | awk '{a[NR]=$1} END {printf "%.1f", a[int((NR+1)/2)] / 1000}'
}
