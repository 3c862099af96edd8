#!/usr/bin/env bash
# Sourced by the other scripts: makes (or reuses) .venv with the pinned Python packages and
# exports HYPATIA_PY (its python) and TORCH_CMAKE_PREFIX.
# HYPATIA_SYSTEM_PYTHON=1 uses python3 as it is instead (the GPU machine has no network).
_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "${HYPATIA_SYSTEM_PYTHON:-0}" = 1 ]; then
  HYPATIA_PY="$(command -v python3)"
else
  _venv="${HYPATIA_VENV:-$_root/.venv}"
  _requirements=("$_root/scripts/requirements.txt" "$_root/scripts/requirements-headers.txt")
  if ! cat "${_requirements[@]}" | cmp -s "$_venv/.hypatia-requirements" -; then
    echo "setup: creating $_venv (torch and friends from scripts/requirements.txt, headers from requirements-headers.txt)"
    python3 -m venv "$_venv" || return 1
    "$_venv/bin/python" -m pip install -q --upgrade pip || return 1
    "$_venv/bin/python" -m pip install -q -r "$_root/scripts/requirements.txt" || return 1
    "$_venv/bin/python" -m pip install -q --no-deps -r "$_root/scripts/requirements-headers.txt" || return 1
    cat "${_requirements[@]}" > "$_venv/.hypatia-requirements"
  fi
  HYPATIA_PY="$_venv/bin/python"
fi
TORCH_CMAKE_PREFIX="$("$HYPATIA_PY" -c 'import torch; print(torch.utils.cmake_prefix_path)')" || return 1
export HYPATIA_PY TORCH_CMAKE_PREFIX
