# syntax=docker/dockerfile:1
# c4-netbench, the NCCL-plugin traffic generator and training stand-in (TrainingJob pods):
# ghcr.io/c4-dev/c4/netbench:<version>.
#   docker build -f docker/netbench.Dockerfile -t ghcr.io/c4-dev/c4/netbench:0.1.0 .
# Build context: the repository root (.dockerignore keeps build trees and .git out).
# The image carries no NCCL plugin: under C4 the operator sets NCCL_NET_PLUGIN to the plugin the
# node plugin installed on the node (mounted into the pod); standalone, pass --plugin PATH.

# ---- build: the project's CMake, Release, only c4-netbench ---------------------------------------
FROM debian:12 AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends cmake ninja-build g++ pkg-config \
      nlohmann-json3-dev libyaml-cpp-dev libcurl4-openssl-dev libcpp-httplib-dev libssl-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# The top-level CMakeLists adds these four components; nothing else is needed to configure.
COPY CMakeLists.txt ./
COPY cmake/ cmake/
COPY common/ common/
COPY kube/ kube/
COPY nccl-net-plugin/ nccl-net-plugin/
COPY nccl-profiler-plugin/ nccl-profiler-plugin/
COPY node-plugin/ node-plugin/
COPY operator/ operator/
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DC4_BUILD_TESTS=OFF -DC4_BUILD_BENCH=OFF -DC4_BUILD_E2E=OFF \
 && cmake --build build --target c4-netbench

# ---- runtime: Debian 12 slim (c4-netbench links only libc and libstdc++), non-root -----------------
FROM debian:12-slim
COPY --from=build /src/build/nccl-net-plugin/netbench/c4-netbench /usr/local/bin/c4-netbench
# Checkpoints go to $C4_CHECKPOINT_DIR: the volume must be writable by 65532 (fsGroup).
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/c4-netbench"]
