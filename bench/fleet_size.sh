#!/usr/bin/env bash
# Bundle sizes against the whole store for the repository's kernels: for a fleet of one
# H100, of an A100 and an H100 (drivers that take nvcc 13's cubins), and of an A100
# whose driver (CUDA 12.4) does not; with each bundle's contents and the coverage table.
# Usage, after `kart build`: bench/fleet_size.sh
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
kart=$PWD/target/release/kart
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "commit $(git rev-parse --short HEAD)"
h100='[[fleet]]
name = "NVIDIA H100 80GB HBM3"
capability = "9.0"
driver = "580.65.06"
'
a100='[[fleet]]
name = "NVIDIA A100-SXM4-80GB"
capability = "8.0"
driver = "580.65.06"
'
old='[[fleet]]
name = "NVIDIA A100-SXM4-80GB"
capability = "8.0"
driver = "550.54.14"
'
printf '%s' "$h100" > "$work/h100.toml"
printf '%s\n%s' "$a100" "$h100" > "$work/a100-h100.toml"
printf '%s\n%s' "$old" "$h100" > "$work/old-a100-h100.toml"
echo "the store: $(du -sb "$repo/artifacts/v1/blobs" | cut -f1) bytes of blob files for kart.lock's $(grep -c '^\[\[artifact\]\]' "$repo/kart.lock") artifacts"
cd "$work"  # file names in the output relative to it
for fleet in h100 a100-h100 old-a100-h100; do
  echo; echo "== fleet $fleet"
  "$kart" -C "$repo" coverage --fleet "$fleet.toml" || true
  "$kart" -C "$repo" bundle --fleet "$fleet.toml" -o "$fleet.kartbundle"
  "$kart" bundle --inspect "$fleet.kartbundle"
done
