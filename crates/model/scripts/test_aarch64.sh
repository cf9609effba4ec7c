#!/usr/bin/env bash
# Cross-compiles hat-model for aarch64 and runs its unit tests (every kernel path against the
# scalar reference: NEON and NEON with dot products) under qemu user-mode emulation.
# Correctness only: emulated speed means nothing. Installs what it needs (Debian packages
# qemu-user, gcc-aarch64-linux-gnu; the rustup target) when missing.
# Usage: crates/model/scripts/test_aarch64.sh [extra cargo test args]
set -euo pipefail
cd "$(dirname "$0")/../../.."
need=()
command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
rustup target list --installed | grep -qx aarch64-unknown-linux-gnu \
  || rustup target add aarch64-unknown-linux-gnu
# linker and runner: .cargo/config.toml ([target.aarch64-unknown-linux-gnu]); qemu's default
# CPU model ("max") has the dot-product extension, so both NEON paths run.
cargo test -p hat-model --lib --target aarch64-unknown-linux-gnu "$@"
