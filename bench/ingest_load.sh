#!/usr/bin/env bash
# Report ingest through the real endpoint with TLS (issue #10): 2,048 node plugins (16,384 ranks,
# 8 per node, 8 connections × 4 subflows each) posting once per second, under the connection
# policies compared in docs/benchmarks.md ("Report ingest"), and past capacity.
#
#   bench/ingest_load.sh [build-dir]
#   env: NODES=2048 DURATION=30 WARMUP=5 RUNS="close-resume close-full keepalive overload"
#        OVERLOAD_RATES="2 4" OVERLOAD_GLOBAL_LIMIT=200
#        SERVER_CPUS, CLIENT_CPUS (e.g. 0 and 1: the server and the load generator on their own
#        cores; unset: not pinned)
#
# The overload runs offer 2x and 4x the 1 Hz rate against a global limit of
# OVERLOAD_GLOBAL_LIMIT batches/s (what the operator sets with --report-global-qps; its default,
# 4000/s, is more than one load generator on a small machine can offer), to show what the endpoint
# answers past its limit: 429 with Retry-After, memory bounded.
set -euo pipefail
BUILD=${1:-build}
BIN=${BIN:-$BUILD/bench/c4-ingest-bench}
NODES=${NODES:-2048}
DURATION=${DURATION:-30}
WARMUP=${WARMUP:-5}
OVERLOAD_RATES=${OVERLOAD_RATES:-"2 4"}
OVERLOAD_GLOBAL_LIMIT=${OVERLOAD_GLOBAL_LIMIT:-200}
RUNS=${RUNS:-"close-resume close-full keepalive overload"}
PIN=()
[[ -z ${SERVER_CPUS:-} ]] || PIN+=(--server-cpus "$SERVER_CPUS")
[[ -z ${CLIENT_CPUS:-} ]] || PIN+=(--client-cpus "$CLIENT_CPUS")

echo "# $(date -u +%FT%TZ) $(uname -r) $(nproc) CPUs: $(lscpu | sed -n 's/^Model name: *//p')"
echo "# $(openssl version); $(curl --version | head -1 | cut -d' ' -f1-2,4-5)"
run() {
  echo "## $* (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  "$BIN" --nodes "$NODES" --duration "$DURATION" --warmup "$WARMUP" ${PIN[@]+"${PIN[@]}"} "$@"
}
for r in $RUNS; do
  case $r in
    # The server's policy: one request per connection; clients keep their libcurl handle, so
    # every reconnect resumes the TLS session.
    close-resume) run --client reuse ;;
    # Same server; a new libcurl handle per request: a full handshake every time.
    close-full) run --client fresh ;;
    # cpp-httplib's keep-alive as it was configured before (100 requests, 5 s idle).
    keepalive) run --client reuse --keep-alive-max-count 100 --keep-alive-timeout 5 ;;
    overload)
      for rate in $OVERLOAD_RATES; do
        run --client reuse --rate "$rate" --global-rate "$OVERLOAD_GLOBAL_LIMIT" \
          --global-burst "$OVERLOAD_GLOBAL_LIMIT"
      done
      ;;
    *) echo "unknown run $r" >&2; exit 2 ;;
  esac
done
