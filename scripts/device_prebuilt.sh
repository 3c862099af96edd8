#!/usr/bin/env bash
# Sourced on the GPU machine when build-gpu/ was built here (HYPATIA_BUILD_DIR=build-gpu bash
# scripts/build.sh -DCMAKE_CUDA_ARCHITECTURES=90) and carried over, which saves the 4-5 min build of a
# device call. build-gpu's CMake cache and RPATHs name this machine's .venv torch; the GPU machine
# has the same torch elsewhere (its python3), so .venv's torch and nvidia folders become links to it.
# Then the tests, gpu_check.sh phases that skip a build where the library exists (reliability,
# frontends*) and sanitize.sh gpu use build-gpu. ninja there re-runs CMake; run nothing that builds.
_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_site="$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')"
_venv_site="$(sed -n 's|^Torch_DIR:PATH=\(.*\)/torch/share/cmake/Torch$|\1|p' "$_root/build-gpu/CMakeCache.txt")"
if [ -n "$_venv_site" ] && [ ! -e "$_venv_site/torch" ]; then
  mkdir -p "$_venv_site" && ln -sfn "$_site/torch" "$_venv_site/torch" && ln -sfn "$_site/nvidia" "$_venv_site/nvidia"
fi
export HYPATIA_SYSTEM_PYTHON=1 HYPATIA_BUILD_DIR="$_root/build-gpu" HYPATIA_OPS_LIBRARY="$_root/build-gpu/libhypatia_ops.so"
unset _root _site _venv_site
