#!/usr/bin/env bash
# Installs a real Nsight Systems CLI on a Debian bookworm machine without a GPU (this project's
# CI and dev machines): nsight-systems 2022.4 from Debian's non-free component, plus the link its
# split packaging needs so that `nsys profile` can import its .qdstrm into a .nsys-rep.
# Idempotent; does nothing when an nsys that can import reports is already on PATH.
set -euo pipefail
if command -v nsys >/dev/null 2>&1 && [ -e /usr/lib/x86_64-linux-gnu/nsight-systems/host-linux-x64 ] ; then
  nsys --version; exit 0
fi
sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
src=/etc/apt/sources.list.d/perfgate-nonfree.sources
if [ ! -e "$src" ]; then
  mirror=$(grep -h '^URIs:' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1 | awk '{print $2}')
  mirror=${mirror:-http://deb.debian.org/debian}
  $sudo tee "$src" >/dev/null <<SRC
Types: deb
URIs: $mirror
Suites: bookworm
Components: contrib non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends nsight-systems-target nsight-systems >/dev/null
# Debian puts the importer in /usr/lib/nsight-systems/host-linux-x64, nsys looks beside its target dir.
if [ ! -e /usr/lib/x86_64-linux-gnu/nsight-systems/host-linux-x64 ]; then
  $sudo ln -s /usr/lib/nsight-systems/host-linux-x64 /usr/lib/x86_64-linux-gnu/nsight-systems/host-linux-x64
fi
nsys --version
