#!/usr/bin/env bash
# An NCCL plugin (libnccl-net-c4.so, libnccl-profiler-c4.so) must load on a GPU machine that has
# another C++ runtime (PyTorch's NCCL) and an older C library than the Debian 12 build host: it may
# need only libc, libm, libgcc_s and the dynamic loader, no glibc symbol newer than 2.34, and
# export nothing but its ABI tables.
#   check_plugin_self_contained.sh <plugin .so> <exported symbol>...
set -euo pipefail
so=${1:?usage: check_plugin_self_contained.sh <plugin .so> <exported symbol>...}
shift
(($# > 0)) || { echo "usage: check_plugin_self_contained.sh <plugin .so> <exported symbol>..." >&2; exit 2; }
status=0
needed=$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort)
for lib in $needed; do
  case $lib in
    libc.so.6 | libm.so.6 | libgcc_s.so.1 | ld-linux-x86-64.so.2 | ld-linux-aarch64.so.1) ;;
    *) echo "FAIL: $so needs $lib" >&2; status=1 ;;
  esac
done
newest=$(objdump -T "$so" | grep -o 'GLIBC_2\.[0-9]*' | sort -t. -k2 -n | tail -1)
if [[ -n $newest && ${newest#GLIBC_2.} -gt 34 ]]; then
  echo "FAIL: $so needs $newest (more than glibc 2.34):" >&2
  objdump -T "$so" | grep "$newest" >&2
  status=1
fi
exported=$(nm -D --defined-only "$so" | awk '{print $3}' | sort | tr '\n' ' ')
want=$(printf '%s\n' "$@" | sort | tr '\n' ' ')
if [[ $exported != "$want" ]]; then
  echo "FAIL: $so exports '$exported', want '$want'" >&2
  status=1
fi
if ((status == 0)); then
  echo "self-contained: needs $(echo $needed | tr '\n' ' '); newest glibc symbol $newest;" \
    "exports $exported"
fi
exit $status
