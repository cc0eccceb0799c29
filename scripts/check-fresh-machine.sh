#!/usr/bin/env bash
# Proves that the README's two commands work on a brand-new Debian 12: builds
# a minimal bookworm system with debootstrap (--variant=minbase, from the
# Debian mirror this machine's apt uses), bind-mounts this machine's CUDA
# toolkit (/usr/local/cuda, as the image provides it), clones the current
# commit into it, and runs `bash scripts/demo.sh` then `bash scripts/test.sh`
# inside. A package that install-deps.sh forgets fails here even when this
# machine happens to have it.
#
#   bash scripts/check-fresh-machine.sh [--keep] [--root DIR] [--jobs N]
#
# --keep leaves the chroot (default: removed at the end); --root picks where
# it goes (default /var/tmp/strata-fresh-$$). Needs root (or sudo) for
# debootstrap, chroot and mounts, and network access to the Debian mirror.
# Prints how long each phase took. Exit status: that of the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$(pwd)

KEEP=0
ROOT=/var/tmp/strata-fresh-$$
JOBS=${JOBS:-$(nproc)}
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) KEEP=1 ;;
    --root) ROOT=$2; shift ;;
    --jobs) JOBS=$2; shift ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "check-fresh-machine: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

# The mirror and suites this machine's apt uses (deb822 or one-line form).
mirror=""
if [ -f /etc/apt/sources.list.d/debian.sources ]; then
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
fi
if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
  mirror=$(awk '$1 == "deb" && $3 ~ /^bookworm$/ {print $2; exit}' /etc/apt/sources.list)
fi
mirror=${mirror:-http://deb.debian.org/debian}

if ! command -v debootstrap >/dev/null; then
  echo "check-fresh-machine: installing debootstrap"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends debootstrap
fi

mounts=()
cleanup() {
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
    $SUDO umount -l "${mounts[$i]}" 2>/dev/null || true
  done
  if [ "$KEEP" = 0 ] && [ -d "$ROOT" ]; then
    $SUDO rm -rf --one-file-system "$ROOT"
  fi
}
trap cleanup EXIT

phase_start=$(date +%s)
phase() {
  local now
  now=$(date +%s)
  printf '== [%4ds] %s\n' "$((now - phase_start))" "$*"
}

phase "debootstrap --variant=minbase bookworm $ROOT ($mirror)"
$SUDO debootstrap --variant=minbase bookworm "$ROOT" "$mirror" >"$ROOT.debootstrap.log" 2>&1 || {
  tail -20 "$ROOT.debootstrap.log"
  exit 1
}
rm -f "$ROOT.debootstrap.log"

# The same suites as this machine (updates and security too), so the fresh
# system gets the package versions a freshly installed Debian 12 gets.
if [ -f /etc/apt/sources.list.d/debian.sources ]; then
  $SUDO cp /etc/apt/sources.list.d/debian.sources "$ROOT/etc/apt/sources.list.d/"
  $SUDO rm -f "$ROOT/etc/apt/sources.list"
fi
$SUDO cp /etc/resolv.conf "$ROOT/etc/resolv.conf"

for m in proc sys dev dev/pts dev/shm; do
  $SUDO mkdir -p "$ROOT/$m"
  $SUDO mount --bind "/$m" "$ROOT/$m"
  mounts+=("$ROOT/$m")
done
# This image's CUDA toolkit, as on the machines Strata is built on.
if [ -d /usr/local/cuda/ ]; then
  cuda=$(readlink -f /usr/local/cuda)
  $SUDO mkdir -p "$ROOT$cuda"
  $SUDO mount --bind -o ro "$cuda" "$ROOT$cuda"
  mounts+=("$ROOT$cuda")
  [ "$cuda" = /usr/local/cuda ] || $SUDO ln -sfn "$cuda" "$ROOT/usr/local/cuda"
fi

phase "clean clone of $(git rev-parse --short HEAD) into the chroot"
$SUDO mkdir -p "$ROOT/work"
$SUDO git clone -q --no-local "$SRC" "$ROOT/work/strata"
if [ -d "$SRC/../shared" ]; then
  $SUDO cp -r "$SRC/../shared" "$ROOT/work/shared"
fi

run_in_chroot() {
  $SUDO chroot "$ROOT" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    JOBS="$JOBS" /bin/bash -c "cd /work/strata && $1"
}

phase "bash scripts/demo.sh (installs packages, builds, trains on 2 ranks)"
run_in_chroot "bash scripts/demo.sh"
phase "bash scripts/test.sh"
run_in_chroot "bash scripts/test.sh"
phase "fresh machine: both README commands passed"
