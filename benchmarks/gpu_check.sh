#!/usr/bin/env bash
# The one command to run on a machine with an NVIDIA GPU: every GPU test, then the GPU figures, then
# what to commit. Steps that fail do not stop the others; the exit status is 1 if any failed.
#
#   usage: benchmarks/gpu_check.sh [DATA] [extra `daliloader bench` options, e.g. --seconds 1]
#
# Python: .venv/bin/python when it exists (`make install`: TensorFlow, Keras and DALI's TF plugin too),
# else python3 as it is. On a GPU machine with DALI alone (no TensorFlow installed, daliloader on
# PYTHONPATH), the tests that need TensorFlow skip and say so, and the bench times the DALI backends
# through pipeline.run.
set -uo pipefail
cd "$(dirname "$0")/.."
py=python3
[ -x .venv/bin/python ] && py=.venv/bin/python
out="benchmarks/results/$(hostname)-$(nproc)cores-gpu"
failed=()

if ! "$py" -c "from nvidia.dali import backend; import sys; sys.exit(backend.GetCUDADeviceCount() == 0)"; then
  echo "DALI sees no CUDA GPU here (or is not installed for $py): nothing to check." >&2
  exit 1
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
"$py" -c "import sys, nvidia.dali as d; print('python', sys.version.split()[0], '| DALI', d.__version__)"
"$py" -c "import tensorflow as tf; print('TensorFlow', tf.__version__, '| GPUs:', tf.config.list_physical_devices('GPU'))" \
  2>/dev/null || echo "TensorFlow: not installed (its tests skip; bench times DALI alone)"

step() {  # step NAME COMMAND...: run it, remember a failure
  local name=$1; shift
  echo; echo "== $name"
  "$@" || failed+=("$name")
}
step "GPU tests (pytest -m gpu; -rs lists what skipped and why)" \
  "$py" -m pytest -m gpu -q -rs -p no:cacheprovider tests
step "JPEG decoders: nvJPEG against libjpeg-turbo" \
  "$py" benchmarks/jpeg_decoders.py --json "$out-jpeg-decoders.json"
step "mask forms, CPU and GPU" \
  "$py" benchmarks/mask_forms.py --json "$out-mask-forms.json"
step "dali-cpu against the decode ceiling on 1, 2, 4, ... cores (several DALI batches at once, and one per batch)" \
  "$py" benchmarks/cpu_scaling.py --json "$out-cpu-scaling.json"
step "augmentation kernels: DALI GPU and CPU, OpenCV, TensorFlow" \
  "$py" benchmarks/augment_ops.py --json "$out-augment-ops.json"
step "throughput: every backend, original and prepared data (LZ4 masks inflated on the GPU), and training" \
  "$py" -m daliloader.cli bench "$@" --backends dali-gpu,dali-cpu,tfdata,opencv --label-mode onehot,int --prepared \
  --train --json "$out.json" --plot "$out.png"
step "throughput with full augmentation" \
  "$py" -m daliloader.cli bench "$@" --backends dali-gpu,dali-cpu,opencv --label-mode onehot,int --augment \
  --no-stages --json "$out-augment.json"

echo
echo "== what to commit"
ls -l "$out"*.json 2>/dev/null
cat <<EOT
- Commit the JSON files above that the documentation quotes (not the .png), under benchmarks/results/.
- docs/benchmarks.md: the GPU table from $out.json (machine, DALI build, dali-gpu against its
  binding ceiling: the smaller of nvJPEG images and CPU mask decodes; prepared and packs columns, where
  dali-gpu inflates the LZ4 masks; dali-gpu against opencv; the training floor), the lz4 rows of
  $out-mask-forms.json (GPU and CPU), dali-cpu's share of the ceiling on 16 cores from
  $out-cpu-scaling.json, and the share of throughput full augmentation keeps ($out-augment.json).
- tests/test_backends.py NVJPEG_MAX_DIFF: set it from the dali-mixed row of $out-jpeg-decoders.json,
  and the dali-gpu image tolerance of docs/gpu.md and docs/training.md with it.
EOT
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]}" >&2
  exit 1
fi
