#!/usr/bin/env bash
# Builds (or finds cached) the test control plane binaries from Go modules.
# Called by `testenv.sh build`; prints the bin dir on its last line.
# Everything is pinned in versions.env + go/*/go.{mod,sum}; their hash is the cache key, so a warm
# run builds nothing. Never downloads release binaries: only the Go module proxy is used.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$HERE/versions.env"

GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
[[ -x $GO ]] || { echo "testenv build: Go not found (need Go >= $GO_MIN_VERSION)" >&2; exit 1; }
export GOTOOLCHAIN=local CGO_ENABLED=0

key_input() {
  cat "$HERE/versions.env" "$HERE"/go/k8s/go.mod "$HERE"/go/k8s/go.sum \
      "$HERE"/go/etcd/go.mod "$HERE"/go/etcd/go.sum "$HERE"/go/etcd/main.go
  "$GO" env GOVERSION GOARCH
}
KEY="k8s-${K8S_VERSION}-etcd-${ETCD_VERSION}-kwok-${KWOK_VERSION}-helm-${HELM_VERSION}-$(key_input | sha256sum | cut -c1-12)"
CACHE=${C4_CACHE_DIR:-$HOME/.cache/c4}/testenv/$KEY
BIN=$CACHE/bin

# KWOK v0.8.0 has no built-in stages; keep the upstream stage files next to the binaries so `up`
# can assemble its --config from them (testenv.sh write_kwok_config).
save_kwok_stages() {
  [[ -d $CACHE/share/kwok-stages ]] && return 0
  local dir
  dir=$("$GO" mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [[ -d $dir/kustomize/stage ]] || { echo "testenv build: no KWOK stages in '$dir'" >&2; exit 1; }
  mkdir -p "$CACHE/share"
  cp -r "$dir/kustomize/stage" "$CACHE/share/kwok-stages.tmp"
  chmod -R u+w "$CACHE/share/kwok-stages.tmp"
  mv "$CACHE/share/kwok-stages.tmp" "$CACHE/share/kwok-stages"
}

cached() {
  if [[ -f $CACHE/.complete ]]; then
    save_kwok_stages
    echo "testenv build: cached ($KEY)" >&2
    echo "$BIN"
    exit 0
  fi
}
cached
# One build at a time per cache key (the CTest fixture and other callers may race).
mkdir -p "$CACHE"
exec 9>"$CACHE.lock"
flock 9
cached

mkdir -p "$BIN" "$CACHE/share"
START=$(date +%s)
say() { echo "testenv build [$(( $(date +%s) - START ))s]: $*" >&2; }

K8S_MINOR=${K8S_VERSION#v1.}; K8S_MINOR=${K8S_MINOR%%.*}
K8S_LDFLAGS="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  K8S_LDFLAGS+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$K8S_MINOR"
  K8S_LDFLAGS+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
TAGS=selinux,notest,grpcnotrace

say "etcd $ETCD_VERSION"
(cd "$HERE/go/etcd" && "$GO" build -trimpath -ldflags "-s -w" -o "$BIN/etcd" .)

say "kube-apiserver, kube-controller-manager, kube-scheduler, kubectl $K8S_VERSION"
(cd "$HERE/go/k8s" && "$GO" build -trimpath -tags "$TAGS" -ldflags "$K8S_LDFLAGS" -o "$BIN/" \
   k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
   k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl)

say "kwok $KWOK_VERSION"
GOBIN=$BIN "$GO" install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"

say "helm $HELM_VERSION"
GOBIN=$BIN "$GO" install -trimpath \
  -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" \
  "helm.sh/helm/v4/cmd/helm@$HELM_VERSION"

for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok helm; do
  [[ -x $BIN/$b ]] || { echo "testenv build: $b missing after build" >&2; exit 1; }
done
save_kwok_stages
ELAPSED=$(( $(date +%s) - START ))
echo "$ELAPSED" > "$CACHE/build-seconds"
touch "$CACHE/.complete"
say "done in ${ELAPSED}s -> $BIN"
echo "$BIN"
