#!/usr/bin/env bash
# `make gpu-check` on a bare CUDA machine with no package index: the one command to run there,
# from a copy of this repository with the wheels of `make gpu-wheels` in .whl/.
#
#   bash scripts/gpu_check.sh [bench.gpu_check options: --dry, --no-mesh]
#
# Installs .whl/*.whl into a folder on PYTHONPATH (no index, no dependencies), maps services/
# to the package `mediamesh` there (what `pip install -e .` does), puts stand-ins for the
# modules left behind (bench/gpu_check_launch.py), imports what the check loads, builds
# flux-tiny, then runs `python -m bench.gpu_check`. Everything it prints goes to
# gpu_check.log beside the JSON.
#
# Environment: OUT (the folder the JSON and log go to: bench/results and .mediamesh when
# unset; a dry run never writes bench/results), PYTHON (python3), GPU_CHECK_WHEELS (.whl),
# GPU_CHECK_SITE (/tmp/site), MEDIAMESH_MODELS_DIR (.mediamesh/models).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON=${PYTHON:-python3}
WHEELS=${GPU_CHECK_WHEELS:-.whl}
SITE=${GPU_CHECK_SITE:-/tmp/site}
MODELS=${MEDIAMESH_MODELS_DIR:-.mediamesh/models}
dry=0
for arg in "$@"; do
  [[ $arg == --dry ]] && dry=1
done
if [[ -n ${OUT:-} ]]; then
  json=$OUT/gpu_check.json log_dir=$OUT
elif ((dry)); then
  json=.mediamesh/gpu_check-dry.json log_dir=.mediamesh
else
  json=bench/results/gpu_check.json log_dir=.mediamesh
fi
mkdir -p "$log_dir" "$(dirname "$json")" "$SITE"

run() {
  echo "gpu-check: $(date -u +%FT%TZ) on $(uname -n) ($(uname -m)), $("$PYTHON" --version 2>&1)"
  if command -v nvidia-smi >/dev/null; then nvidia-smi -L || true; fi

  shopt -s nullglob
  local wheels=("$WHEELS"/*.whl)
  if ((${#wheels[@]})); then
    echo "gpu-check: installing ${#wheels[@]} wheels from $WHEELS into $SITE"
    PIP_NO_INDEX=1 "$PYTHON" -m pip install -q --no-index --no-deps --no-compile \
      --no-cache-dir --disable-pip-version-check --upgrade --target "$SITE" "${wheels[@]}"
  else
    echo "gpu-check: no wheels in $WHEELS; using what $PYTHON has"
  fi
  # The import package `mediamesh` is the folder services/ (pyproject.toml's package-dir).
  rm -rf "$SITE/mediamesh"
  ln -s "$PWD/services" "$SITE/mediamesh"
  # bench.common asks git for the commit measured; a copy of the tree without git is "unknown".
  if ! command -v git >/dev/null; then
    mkdir -p "$SITE/bin"
    printf '#!/bin/sh\nexit 1\n' >"$SITE/bin/git"
    chmod +x "$SITE/bin/git"
    export PATH="$SITE/bin:$PATH"
  fi
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
  export PIP_NO_INDEX=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
  export MEDIAMESH_MODELS_DIR=$MODELS

  "$PYTHON" -m bench.gpu_check_launch stand-ins --site "$SITE"
  "$PYTHON" -m bench.gpu_check_launch check
  "$PYTHON" -m mediamesh.cli.main models build --out "$MODELS" --only flux-tiny
  "$PYTHON" -m bench.gpu_check --out "$json" --models-dir "$MODELS" "$@"
  echo "gpu-check: wrote $json"
}

run "$@" 2>&1 | tee "$log_dir/gpu_check.log"
