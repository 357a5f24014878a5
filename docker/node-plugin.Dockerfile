# syntax=docker/dockerfile:1
# The C4 node plugin with the NCCL net plugin it installs onto each node:
# ghcr.io/c4-dev/c4/node-plugin:<version> (helm/c4 values nodePlugin.image).
#   docker build -f docker/node-plugin.Dockerfile -t ghcr.io/c4-dev/c4/node-plugin:0.1.0 .
# Build context: the repository root (.dockerignore keeps build trees and .git out).

# ---- build: the project's CMake, Release, the node plugin and libnccl-net-c4.so -------------------
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
 && cmake --build build --target c4-node-plugin nccl-net-c4 nccl-profiler-c4

# ---- runtime: Debian 12 slim, the shared libraries the binary links ------------------------------
FROM debian:12-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libcurl4 libyaml-cpp0.7 \
      libcpp-httplib0.11 libssl3 \
 && rm -rf /var/lib/apt/lists/*
# = install(TARGETS c4-node-plugin RUNTIME DESTINATION bin) under the /usr/local prefix.
COPY --from=build /src/build/node-plugin/c4-node-plugin /usr/local/bin/c4-node-plugin
# The NCCL plugins (libstdc++ linked in: need only glibc >= 2.34 on the node) that the node plugin
# copies into the node's plugin directory (--plugin-source and --profiler-plugin-source, as the
# chart passes them): the profiler plugin is the default telemetry source, the net plugin serves
# traffic planning's Enforce mode and jobs that choose it.
COPY --from=build /src/build/nccl-net-plugin/libnccl-net-c4.so /usr/lib/c4/libnccl-net-c4.so
COPY --from=build /src/build/nccl-profiler-plugin/libnccl-profiler-c4.so /usr/lib/c4/libnccl-profiler-c4.so
# Not root: /proc/<pid>/cgroup of the node's processes (hostPID) is world-readable; the chart runs it
# with no capability as nodePlugin.runAsUser (this uid by default), after an init container gave
# that uid the node's host directories.
USER 65532:65532
EXPOSE 9400
ENTRYPOINT ["/usr/local/bin/c4-node-plugin"]
