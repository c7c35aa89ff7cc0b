#!/usr/bin/env bash
# Build the operator image from the Dockerfile without Docker and without an image registry:
#   1. buildah, podman, runc and mmdebstrap from Debian (apt), if missing;
#   2. the Dockerfile's base image (python:3.11-slim) made from Debian packages: mmdebstrap
#      minbase + $IMAGE_BASE_PACKAGES of $IMAGE_BASE_SUITE (sandbox/versions.env), cached as a tar
#      in $IR_CACHE/images/ by suite and package list, imported under the base's name;
#   3. `buildah bud --isolation chroot` of the unmodified Dockerfile, with the machine's CA bundle
#      mounted read-only (pip verifies the package index through it, e.g. behind a TLS proxy).
# Images live in a container storage of their own ($IR_CACHE/containers): the tag of a real
# python:3.11-slim in the machine's storage is never replaced. An image already built from the
# same sources (a hash of the build context and Dockerfile, in a label) is not rebuilt.
# Usage: hack/build-image.sh [TAG]        (default localhost/inference-rollout:test)
#        hack/build-image.sh --storage    print the storage flags podman needs, one per line
set -euo pipefail
# shellcheck source=sandbox/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../sandbox/lib.sh"
cd "${IR_REPO}"

STORAGE=(--root "${IR_CACHE}/containers/storage" --runroot /run/inference-rollout/containers
  --storage-driver overlay)
SOURCES_LABEL=dev.inference-rollout.sources
CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt

if [[ "${1:-}" == --storage ]]; then
  printf '%s\n' "${STORAGE[@]}"
  exit 0
fi
TAG="${1:-localhost/inference-rollout:test}"

# The one base image the Dockerfile names, fully qualified as podman stores it.
base_image() {
  local names
  names="$(sed -nE 's/^FROM[[:space:]]+([^[:space:]]+).*/\1/p' Dockerfile | grep -v '^build$' | sort -u)"
  [[ "$(wc -l <<<"${names}")" == 1 ]] || die "the Dockerfile names more than one base image: ${names}"
  case "${names}" in
    */*/*) printf '%s\n' "${names}" ;;
    */*) printf 'docker.io/%s\n' "${names}" ;;
    *) printf 'docker.io/library/%s\n' "${names}" ;;
  esac
}

# The base's root filesystem from Debian packages (cached), imported under the base's name.
make_base() {
  local name="$1" key tar python
  key="$(printf '%s' "${IMAGE_BASE_PACKAGES}" | sha256sum | cut -c1-12)"
  tar="${IR_CACHE}/images/debian-${IMAGE_BASE_SUITE}-minbase-${key}.tar"
  if [[ ! -s "${tar}" ]]; then
    log base "mmdebstrap ${IMAGE_BASE_SUITE} minbase + ${IMAGE_BASE_PACKAGES}"
    mkdir -p "${IR_CACHE}/images"
    mmdebstrap --variant=minbase --mode=root --format=tar --include="${IMAGE_BASE_PACKAGES}" \
      --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
      --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
      "${IMAGE_BASE_SUITE}" "${tar}.tmp" \
      "deb http://deb.debian.org/debian ${IMAGE_BASE_SUITE} main" \
      "deb http://deb.debian.org/debian ${IMAGE_BASE_SUITE}-updates main" \
      "deb http://deb.debian.org/debian-security ${IMAGE_BASE_SUITE}-security main" \
      >"${IR_CACHE}/images/mmdebstrap.log" 2>&1 ||
      die "mmdebstrap failed, see ${IR_CACHE}/images/mmdebstrap.log"
    mv "${tar}.tmp" "${tar}"
  fi
  python="python${name##*:}" && python="${python%%-*}"   # python:3.11-slim -> python3.11
  tar -tf "${tar}" "./usr/bin/${python}" >/dev/null 2>&1 ||
    die "${tar} has no /usr/bin/${python}: ${IMAGE_BASE_SUITE}'s python3 is not the one ${name} names"
  if [[ "$(podman "${STORAGE[@]}" image inspect --format '{{index .Labels "base.tar"}}' "${name}" 2>/dev/null)" == "${tar##*/}" ]]; then
    log base "${name} present (from ${tar##*/})"
    return
  fi
  log base "importing ${tar##*/} as ${name}"
  podman "${STORAGE[@]}" import --quiet \
    --change 'ENV=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD=["python3"]' --change "LABEL=base.tar=${tar##*/}" "${tar}" "${name}" >/dev/null
}

# A hash of what the build reads: the Dockerfile, .dockerignore and the files it lets through.
sources_hash() {
  find Dockerfile .dockerignore pyproject.toml README.md operator crds -type f \
    ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16
}

main() {
  apt_install_missing buildah:buildah podman:podman runc:runc mmdebstrap:mmdebstrap
  local base hash t0
  base="$(base_image)"
  make_base "${base}"
  hash="$(sources_hash)"
  if [[ "$(podman "${STORAGE[@]}" image inspect --format "{{index .Labels \"${SOURCES_LABEL}\"}}" "${TAG}" 2>/dev/null)" == "${hash}" ]]; then
    log image "${TAG} is built from these sources (${hash}); not rebuilt"
    return
  fi
  local mounts=()
  [[ -f "${CA_BUNDLE}" ]] && mounts=(--volume "${CA_BUNDLE}:${CA_BUNDLE}:ro")
  log image "buildah bud ${TAG} (sources ${hash})"
  t0=$(date +%s)
  buildah "${STORAGE[@]}" bud --isolation chroot --pull=never "${mounts[@]}" \
    --label "${SOURCES_LABEL}=${hash}" --tag "${TAG}" --file Dockerfile . \
    >"${IR_CACHE}/images/bud.log" 2>&1 || die "buildah bud failed, see ${IR_CACHE}/images/bud.log"
  log image "built ${TAG} in $(($(date +%s) - t0)) s: $(podman "${STORAGE[@]}" image inspect --format '{{.Size}}' "${TAG}") bytes"
}

main
