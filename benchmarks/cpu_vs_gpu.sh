#!/usr/bin/env bash
# The run behind the README's benchmark figures: every backend this machine has, one-hot and int
# labels, 512x512 random crops from the embedded 960x720 JPEG + RGB-PNG dataset, decode ceilings,
# per-stage breakdown, the input-bound training analysis, and every backend again on the prepared copy
# (8-bit class-index masks, `daliloader prepare`). Writes benchmarks/results/<host>.json
# and .png (commit the JSON only when the README quotes it).
#   usage: benchmarks/cpu_vs_gpu.sh [DATA] [extra daliloader bench options]
set -euo pipefail
cd "$(dirname "$0")/.."
out="benchmarks/results/$(hostname)-$(nproc)cores"
.venv/bin/daliloader bench "$@" --label-mode onehot,int --seconds 3 --repeats 3 --train --prepared \
  --json "$out.json" --plot "$out.png"
