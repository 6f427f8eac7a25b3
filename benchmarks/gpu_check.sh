#!/usr/bin/env bash
# The one command to run on a machine with an NVIDIA GPU: the GPU tests, the README's quick start on
# dali-gpu, then the GPU figures. Steps that fail do not stop the others; the exit status is 1 if any failed.
#
#   usage: benchmarks/gpu_check.sh [DATA] [extra `daliloader bench` options, e.g. --seconds 1]
#   GPU_CHECK_PLAN=quick (default) | full       OUT=folder for the reports (default benchmarks/results)
#
# quick fits one device call of 10 minutes, which is what a session lent 15 minutes of device time has
# left once ../shared/device/stage-tf-gpu's stack is staged and installed (its setup.sh in a call of
# its own, about 90 s; the staging and test times measured are in docs/gpu.md). Each step has its own
# time limit and writes its own report, so a step cut short loses only itself:
#   1. pytest -m gpu (GPU_CHECK_WORKERS processes, default 8, where pytest-xdist loads; 6 ran 102 of
#      167 tests in 200 s on an H100), GPU_CHECK_TESTS_S, default 300                          <= 300 s
#      GPU_CHECK_FIRST: test files to run first, the others following in name order: a run cut short at
#      its limit covers the first, so a session can start where the last one stopped
#   2. the README quick start on dali-gpu, and every line native libraries print             <=  60 s
#   3. where dali-gpu's time goes (benchmarks/gpu_where.py: tf_dataset, the expert's tf.data, dali-cpu
#      on every core against its pair-decode ceiling, the
#      graph alone, the inputs' feed, the graph cut after each stage, the decoder alone)
#      GPU_CHECK_WHERE_S, default 180, + 30 s for the figure in flight                          <= 210 s
# full adds the bench of every backend (one-hot and int, prepared copy and packs, training), the decoder,
# mask-form, CPU-scaling and augmentation figures (about 40 minutes).
#
# The bucket tests need obstore and moto, which the staged stack leaves out: benchmarks/gpu_extras.sh stages
# them in .gpu/extras, and this script installs them where that folder was carried.
#
# Python: .venv/bin/python when it exists (`make install`: TensorFlow, Keras and DALI's TF plugin too),
# else python3 as it is (the staged stack: `source /tmp/gpu/env.sh` first). On a GPU machine with DALI
# alone (no TensorFlow installed, daliloader on PYTHONPATH), the tests that need TensorFlow skip and say
# so, and the bench times the DALI backends through pipeline.run.
set -uo pipefail
cd "$(dirname "$0")/.."
py=python3
[ -x .venv/bin/python ] && py=.venv/bin/python
plan=${GPU_CHECK_PLAN:-quick}
out="${OUT:-benchmarks/results}/$(hostname)-$(nproc)cores-gpu"; mkdir -p "$(dirname "$out")"
failed=()

# the bucket tests' S3 client and server, where benchmarks/gpu_extras.sh staged them (.gpu/extras carried):
# installed into a folder of their own, after the staged stack on PYTHONPATH
if compgen -G ".gpu/extras/*.whl" > /dev/null && ! "$py" -c "import moto, obstore" 2>/dev/null; then
  if "$py" -m pip install -q --no-index --no-deps --no-compile --target /tmp/gpu-extras .gpu/extras/*.whl \
      2> /tmp/gpu-extras.log; then
    export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}/tmp/gpu-extras"
  else
    grep -v -i warning /tmp/gpu-extras.log
    echo "the extras did not install (above): the bucket tests will skip" >&2
    failed+=("installing .gpu/extras")
  fi
fi

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
parallel=()
# pytest's help read whole first: `--help | grep -q` stops reading at the first match, pytest dies of the
# broken pipe, and pipefail made that read as "xdist did not load" on the lent machines of 2026-11-26
help=$("$py" -m pytest -p no:cacheprovider --help 2>/dev/null)
if grep -q -- --numprocesses <<<"$help"; then
  parallel=(-n "${GPU_CHECK_WORKERS:-8}")
else
  "$py" -c "import pytest, xdist; print('pytest', pytest.__version__, '| xdist', xdist.__version__, 'did not load')" 2>&1 | tail -1
fi
test_files=(${GPU_CHECK_FIRST:-})  # then every other test file, in name order
for f in tests/test_*.py; do [[ " ${test_files[*]} " == *" $f "* ]] || test_files+=("$f"); done
gpu_tests() {  # pytest -m gpu, every test named in "$out-tests.log", what did not pass shown here
  # -v names each test as it ends: on 2026-11-26 a run cut at its limit showed two failures as bare
  # "F"s. SIGINT at the limit lets pytest still print its summary of what ran, with the slowest tests
  # (8 processes ran 75 tests in 226 s on an H200 on 2026-11-27: which ones take the time is unknown).
  timeout -s INT -k 20 "${GPU_CHECK_TESTS_S:-300}" "$py" -m pytest -m gpu -v -rfEs --durations=25 -p no:cacheprovider "${parallel[@]}" "${test_files[@]}" \
    > "$out-tests.log" 2>&1
  local rc=$?
  grep -v -E " (PASSED|SKIPPED) " "$out-tests.log" | tail -40
  return $rc
}
step "GPU tests (pytest -m gpu; -rfEs lists what failed or skipped and why)" gpu_tests
step "the README quick start on dali-gpu: no native log line" \
  timeout 60 "$py" benchmarks/quickstart_check.py --backend dali-gpu
step "where dali-gpu's time goes: tf_dataset, the expert's tf.data, the graph alone, the feed, by stage, decoder" \
  timeout $((${GPU_CHECK_WHERE_S:-180} + 30)) "$py" benchmarks/gpu_where.py --budget ${GPU_CHECK_WHERE_S:-180} --json "$out-where.json"
if [ "$plan" = full ]; then
  step "JPEG decoders: nvJPEG against libjpeg-turbo" \
    "$py" benchmarks/jpeg_decoders.py --json "$out-jpeg-decoders.json"
  step "mask forms, CPU and GPU" \
    "$py" benchmarks/mask_forms.py --json "$out-mask-forms.json"
  step "dali-cpu against the decode ceiling on 1, 2, 4, ... cores" \
    "$py" benchmarks/cpu_scaling.py --json "$out-cpu-scaling.json"
  step "augmentation kernels: DALI GPU and CPU, OpenCV, TensorFlow" \
    "$py" benchmarks/augment_ops.py --json "$out-augment-ops.json"
  step "throughput: every backend and the expert's tf.data, original and prepared data, and training" \
    "$py" -m daliloader.cli bench "$@" --backends dali-gpu,dali-cpu,tfdata,opencv,tf-expert --label-mode onehot,int \
    --prepared --train --json "$out.json" --plot "$out.png"
  step "throughput with full augmentation" \
    "$py" -m daliloader.cli bench "$@" --backends dali-gpu,dali-cpu,opencv --label-mode onehot,int --augment \
    --no-stages --json "$out-augment.json"
fi

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
