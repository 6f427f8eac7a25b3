#!/usr/bin/env bash
# The run behind the machine figures of docs/benchmarks.md: every backend this machine has, one-hot and
# int labels, 512x512 random crops from the embedded 960x720 JPEG + RGB-PNG dataset, decode ceilings,
# per-stage breakdown, the input-bound training analysis, and every backend again on the prepared copy
# (8-bit class-index masks, `daliloader prepare`). Writes benchmarks/results/<host>-<cores>cores.json
# and .png (commit the JSON only when the documentation quotes it).
#   usage: benchmarks/cpu_vs_gpu.sh [DATA] [extra daliloader bench options]
set -euo pipefail
cd "$(dirname "$0")/.."
out="benchmarks/results/$(hostname)-$(nproc)cores"
daliloader=daliloader  # as installed (pip), or the one `make` put in .venv/
[ -x .venv/bin/daliloader ] && daliloader=.venv/bin/daliloader
"$daliloader" bench "$@" --label-mode onehot,int --seconds 3 --repeats 3 --train --prepared \
  --json "$out.json" --plot "$out.png"
