# syntax=docker/dockerfile:1
# The C4 operator: ghcr.io/c4-dev/c4/operator:<version> (helm/c4 values operator.image).
#   docker build -f docker/operator.Dockerfile -t ghcr.io/c4-dev/c4/operator:0.1.0 .
# Build context: the repository root (.dockerignore keeps build trees and .git out).

# ---- build: the project's CMake, Release, only the operator ----------------------------------
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
 && cmake --build build --target c4-operator

# ---- runtime: Debian 12 slim, the shared libraries the binary links, non-root --------------------
FROM debian:12-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libcurl4 libyaml-cpp0.7 \
      libcpp-httplib0.11 libssl3 \
 && rm -rf /var/lib/apt/lists/*
# = install(TARGETS c4-operator RUNTIME DESTINATION bin) under the /usr/local prefix.
COPY --from=build /src/build/operator/c4-operator /usr/local/bin/c4-operator
# The chart runs it as 65532 (runAsNonRoot) with a read-only root file system.
USER 65532:65532
EXPOSE 8080 8443
ENTRYPOINT ["/usr/local/bin/c4-operator"]
