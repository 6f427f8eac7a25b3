#!/usr/bin/env bash
# Stage, beside ../shared/device/stage-tf-gpu's stack, what the GPU machine needs for the bucket tests and
# that stack leaves out: the S3 client (obstore, the `s3` extra) and the S3 server the tests start (moto
# with flask, from the `dev` extra), as wheels for the machine's Python 3.12, in .gpu/extras (git ignores
# .gpu/). Wheels whose package the stack already stages are left out, so that one version of each is
# installed. About 35 MB: one transfer.
#
#   here, from the project root:   benchmarks/gpu_extras.sh
#   there:   the call that runs benchmarks/gpu_check.sh carries [".gpu/extras"]; gpu_check.sh installs
#            them into a folder of their own and puts it on PYTHONPATH after the staged stack.
set -euo pipefail
cd "$(dirname "$0")/.."
exclude="$(git rev-parse --git-common-dir)/info/exclude"  # (a worktree's .git is a file)
grep -qx '/.gpu/' "$exclude" 2>/dev/null || { mkdir -p "$(dirname "$exclude")"; echo '/.gpu/' >> "$exclude"; }
extras=.gpu/extras
rm -rf "$extras"; mkdir -p "$extras"
# pip's own status decides (grep's would hide a failed download behind "staged 0 wheels")
if ! python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux_2_34_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux1_x86_64 \
  -d "$extras" 'obstore>=0.12' 'moto[s3]>=5.1' 'flask>=3' 'flask-cors>=4' 2> "$extras.log"; then
  grep -v 'is ignored' "$extras.log" >&2
  echo "pip could not download the extras (above); nothing staged" >&2
  rm -rf "$extras"
  exit 1
fi
name() { basename "$1" | cut -d- -f1 | tr 'A-Z.' 'a-z_'; }  # a wheel's package, normalised
staged=$(for f in .gpu/download/*.whl; do if [ -e "$f" ]; then name "$f"; fi; done | sort -u)  # (none: keep all)
for f in "$extras"/*.whl; do
  if grep -qx "$(name "$f")" <<<"$staged"; then rm "$f"; fi
done
rm -f "$extras.log"
echo "staged $(ls "$extras" | wc -l) wheels, $(du -sh "$extras" | cut -f1), in $extras; carry it in the gpu_check.sh call"
