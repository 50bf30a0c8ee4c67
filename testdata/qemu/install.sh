#!/usr/bin/env bash
# What a CI runner has for building inside a foreign platform's base (sandbox/, issue 23):
# Debian's qemu-user-static, registered with binfmt_misc with the F flag (the kernel opens the
# emulator when it is registered, so that it runs inside any root file system), and the test
# bases of testdata/bases. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
[ -x /usr/bin/qemu-aarch64-static ] || need+=(qemu-user-static)
command -v update-binfmts >/dev/null || need+=(binfmt-support)
if [ ${#need[@]} -gt 0 ]; then
  echo "qemu: installing ${need[*]} (Debian's packages)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
binfmt=/proc/sys/fs/binfmt_misc
if [ ! -e "$binfmt/register" ]; then
  mount -t binfmt_misc binfmt_misc "$binfmt"
fi
if [ ! -e "$binfmt/qemu-aarch64" ]; then
  update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || update-binfmts --import qemu-aarch64
fi
if ! grep -q '^flags:.*F' "$binfmt/qemu-aarch64"; then
  echo "qemu: qemu-aarch64 is registered without the F flag: $(grep flags "$binfmt/qemu-aarch64")" >&2
  exit 1
fi
echo "qemu: qemu-aarch64 is registered ($(grep flags "$binfmt/qemu-aarch64"))" >&2
bash bases/build.sh arm64 >/dev/null
bash bases/build.sh amd64 >/dev/null
