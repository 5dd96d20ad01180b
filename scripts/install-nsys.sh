#!/usr/bin/env bash
# Installs a real Nsight Systems CLI (nsys) for perfgate on a machine without a GPU (CI, development),
# from the source that fits this distribution, as /etc/os-release names it:
#   Debian (bookworm and later): the nsight-systems package of the non-free component of this very
#     release (bookworm: 2022.4), plus the link its split packaging needs so that `nsys profile` can
#     import its .qdstrm into a .nsys-rep. It traces NVTX ranges of CPU processes, not CUDA.
#   Ubuntu and every other system: nothing is changed; it says what to install and exits 2.
# Idempotent: with an nsys already on PATH it only checks Debian's link.
#   --dry-run            say which source it would use; change nothing
#   PERFGATE_OS_RELEASE  the os-release file to read (default /etc/os-release)
set -euo pipefail
dry=0
[ "${1:-}" = "--dry-run" ] && dry=1
os_release=${PERFGATE_OS_RELEASE:-/etc/os-release}

field() {  # one KEY=value of the os-release file, unquoted (the file is read, never run)
  [ -r "$os_release" ] || return 0
  sed -n "s/^$1=//p" "$os_release" | head -n 1 | sed -e 's/^"//' -e 's/"$//' -e "s/^'//" -e "s/'$//"
}
id=$(field ID); codename=$(field VERSION_CODENAME); version=$(field VERSION_ID); pretty=$(field PRETTY_NAME)
pretty=${pretty:-${id:-an unknown system} ${version}}

multiarch="$(uname -m)-linux-gnu"
debian_link=/usr/lib/$multiarch/nsight-systems/host-linux-x64   # where Debian's nsys looks for its importer
debian_importer=/usr/lib/nsight-systems/host-linux-x64          # where Debian puts it

say_what_to_install() {
  local repo=""
  if [ "$id" = ubuntu ] && [ -n "$version" ]; then
    repo="ubuntu${version//./}"
  fi
  cat >&2 <<MSG
install-nsys: $pretty: this script installs nsys only on Debian (bookworm or later), from Debian's
non-free component. Install NVIDIA's Nsight Systems yourself (2023.1 or newer on a GPU runner):
  - NVIDIA's Nsight Systems .deb/.rpm/.run for Linux x86_64: https://developer.nvidia.com/nsight-systems/get-started
  - or the CUDA toolkit's copy (package cuda-nsight-systems-<cuda version>) from NVIDIA's CUDA repository${repo:+
    https://developer.download.nvidia.com/compute/cuda/repos/$repo/$(uname -m)/}
then put nsys on PATH or set PERFGATE_NSYS=/path/to/nsys, and run scripts/setup.sh again.
MSG
  exit 2
}

if [ "$id" = debian ] && [ -n "$codename" ] && [ "$codename" != buster ] && [ "$codename" != bullseye ]; then
  source_line="Debian $codename, component non-free: package nsight-systems"
else
  source_line=""
fi

if command -v nsys >/dev/null 2>&1; then
  if [ -e "$debian_importer" ] && [ ! -e "$debian_link" ]; then
    echo "install-nsys: $(command -v nsys) is Debian's package; linking its importer: $debian_link"
    if [ $dry = 0 ]; then
      sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
      $sudo mkdir -p "$(dirname "$debian_link")"
      $sudo ln -s "$debian_importer" "$debian_link"
    fi
  fi
  echo "install-nsys: nsys already installed: $(command -v nsys) ($(nsys --version 2>/dev/null || echo 'version unknown'))"
  [ $dry = 1 ] && echo "install-nsys: source for $pretty: ${source_line:-none (this script would say what to install)}"
  exit 0
fi

[ -n "$source_line" ] || say_what_to_install
echo "install-nsys: $pretty: installing from $source_line"
[ $dry = 1 ] && exit 0

sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
src=/etc/apt/sources.list.d/perfgate-nonfree.sources
if [ ! -e "$src" ]; then
  mirror=$(grep -h '^URIs:' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n 1 | awk '{print $2}')
  if [ -z "$mirror" ]; then
    mirror=$(grep -hE '^deb +(\[[^]]*\] +)?https?://' /etc/apt/sources.list 2>/dev/null | grep -v security \
      | head -n 1 | sed -E 's/^deb +(\[[^]]*\] +)?//' | awk '{print $1}')
  fi
  mirror=${mirror:-http://deb.debian.org/debian}
  $sudo tee "$src" >/dev/null <<SRC
Types: deb
URIs: $mirror
Suites: $codename
Components: contrib non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
if ! $sudo apt-get install -y -qq --no-install-recommends nsight-systems-target nsight-systems >/dev/null; then
  echo "install-nsys: apt-get could not install nsight-systems from Debian $codename non-free ($src)" >&2
  say_what_to_install
fi
if [ -e "$debian_importer" ] && [ ! -e "$debian_link" ]; then
  $sudo mkdir -p "$(dirname "$debian_link")"
  $sudo ln -s "$debian_importer" "$debian_link"
fi
nsys --version
