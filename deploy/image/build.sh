#!/usr/bin/env bash
# Builds warmpath's container image without a Docker daemon, from Debian's
# packages: the binary is built here (cgo, against this machine's
# libczmq-dev, Debian bookworm's); mmdebstrap makes a bookworm root
# filesystem holding only libczmq4 with its dependencies, CA certificates,
# base-files, netbase and tzdata (unpacked, no package manager, no shell
# scripts run); umoci writes it, with the binary, as a one-layer OCI image.
#
#   deploy/image/build.sh            # → dist/image/oci (layout), dist/image/warmpath-oci.tar
#   OUT=dir deploy/image/build.sh
#
# Load it with `podman load -i dist/image/warmpath-oci.tar`, or copy it
# anywhere with `skopeo copy oci:dist/image/oci:warmpath docker://…`.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-dist/image}
SUITE=bookworm
TAG=warmpath

for tool in mmdebstrap umoci; do
	command -v "$tool" >/dev/null || { echo "image: $tool is missing (go tool task setup:image installs it)" >&2; exit 1; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

version=$(git describe --always --dirty 2>/dev/null || echo dev)
CGO_ENABLED=1 go build -trimpath -ldflags "-s -w -X github.com/warmpath/warmpath/internal/app.Version=$version" \
	-o "$work/warmpath" ./cmd/warmpath

# The extract variant runs no maintainer script (nor customize hooks), so
# these hooks, run once everything is unpacked, do what the scripts
# would have: the CA bundle, the users, the loader's cache. Documentation,
# manuals and translations are left out.
mmdebstrap --variant=extract --quiet \
	--include=libczmq4,ca-certificates,base-files,netbase,tzdata \
	--extract-hook='mkdir -p "$1/usr/local/bin" "$1/etc/warmpath" "$1/tmp" && chmod 1777 "$1/tmp"' \
	--extract-hook="upload $work/warmpath /usr/local/bin/warmpath" \
	--extract-hook='chmod 0755 "$1/usr/local/bin/warmpath"' \
	--extract-hook='mkdir -p "$1/etc/ssl/certs" && cat "$1"/usr/share/ca-certificates/mozilla/*.crt > "$1/etc/ssl/certs/ca-certificates.crt"' \
	--extract-hook='printf "root:x:0:0:root:/root:/usr/sbin/nologin\nwarmpath:x:65532:65532:warmpath:/nonexistent:/usr/sbin/nologin\n" > "$1/etc/passwd"' \
	--extract-hook='printf "root:x:0:\nwarmpath:x:65532:\n" > "$1/etc/group"' \
	--extract-hook='rm -rf "$1"/usr/share/doc "$1"/usr/share/man "$1"/usr/share/locale "$1"/usr/share/info "$1"/var/cache/apt "$1"/var/lib/apt "$1"/var/lib/dpkg "$1"/var/log/*' \
	--extract-hook='ldconfig -r "$1"' \
	"$SUITE" "$work/rootfs.tar"

rm -rf "$OUT/oci"
mkdir -p "$OUT"
umoci init --layout "$OUT/oci"
umoci new --image "$OUT/oci:$TAG"
umoci raw add-layer --image "$OUT/oci:$TAG" "$work/rootfs.tar"
umoci config --image "$OUT/oci:$TAG" --os linux --architecture amd64 \
	--config.user 65532:65532 \
	--config.env PATH=/usr/local/bin:/usr/bin:/bin \
	--config.entrypoint /usr/local/bin/warmpath \
	--config.cmd serve --config.cmd --config --config.cmd /etc/warmpath/warmpath.yaml \
	--config.exposedports 9002/tcp --config.exposedports 9090/tcp \
	--config.label org.opencontainers.image.title=warmpath \
	--config.label org.opencontainers.image.version="$version" \
	--config.label org.opencontainers.image.base.name="debian:$SUITE (mmdebstrap, extract)"
umoci gc --layout "$OUT/oci"
tar -C "$OUT/oci" -cf "$OUT/warmpath-oci.tar" .
echo "image: $OUT/oci:$TAG ($(du -sh "$OUT/oci" | cut -f1) compressed), $OUT/warmpath-oci.tar; version $version"
