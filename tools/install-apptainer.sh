#!/bin/bash
# Install Apptainer from Debian's unstable suite (sid) into a directory of its own, relocated, on Debian 12 or 13,
# without touching the system's apt sources: sid's apptainer needs a newer glibc than Debian 12 has, so its
# binaries get sid's glibc through their ELF interpreter and RPATH.
#
#   tools/install-apptainer.sh DEST     ->  DEST/bin/apptainer, and DEST/bin/singularity linked to it
#
# Needs root (apt-get), dpkg and patchelf. Debian's apptainer is built without setuid: as root it mounts with the
# kernel; as any other user it runs in a user namespace and mounts SquashFS with squashfuse_ll (/dev/fuse must be
# open to users: tools/setup-users.sh), as LUMI users' runtime does without root.
set -euo pipefail

dest=${1:?usage: $0 DEST}
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo "$(uname -m)-linux-gnu")
# shellcheck source=tools/sid-apt.sh
source "$(dirname "$0")/sid-apt.sh"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sid_apt "$work/apt"
(cd "$work" && apt-get "${sid_apt_options[@]}" download -qq apptainer libc6 libseccomp2 libsqlite3-0)

rm -rf "$dest.tmp" && mkdir -p "$dest.tmp"
for deb in "$work"/*.deb; do dpkg -x "$deb" "$dest.tmp"; done
root=$dest.tmp/usr
lib=$root/lib/$multiarch
loaders=("$lib"/ld-linux*.so.*)
loader=${loaders[0]##*/}
for binary in "$root/bin/apptainer" "$lib/apptainer/bin/starter"; do
    # RPATH, not RUNPATH: sid's libsqlite3 needs sid's libm as well, which only an RPATH reaches
    patchelf --set-interpreter "$dest/usr/lib/$multiarch/$loader" --force-rpath --set-rpath "$dest/usr/lib/$multiarch" \
        "$binary"
done
# A relocated install reads PREFIX/etc and PREFIX/lib/var (PREFIX = usr here)
mkdir -p "$root/etc" "$root/lib/var/lib/apptainer/mnt/session"
mv "$dest.tmp/etc/apptainer" "$root/etc/"
# Run as any other user (a user namespace), it looks for its capability file under PREFIX/lib/etc as well
mkdir -p "$root/lib/etc" && ln -s ../../etc/apptainer "$root/lib/etc/apptainer"
# root on these machines lacks CAP_SYS_RESOURCE; asking for every capability (the default) fails
sed -i 's/^root default capabilities = .*/root default capabilities = no/' "$root/etc/apptainer/apptainer.conf"
mkdir -p "$dest.tmp/bin"
ln -s ../usr/bin/apptainer "$dest.tmp/bin/apptainer"
ln -s apptainer "$dest.tmp/bin/singularity"   # as many sites install it: reads SINGULARITY_* names too

rm -rf "$dest" && mv "$dest.tmp" "$dest"
got=$("$dest/bin/apptainer" --version)
# Debian's unstable suite moves on (1.4.5 when this was written): whatever it serves must start
case "$got" in
    "apptainer version "*) echo "install-apptainer: $got in $dest" ;;
    *) echo "install-apptainer: $dest/bin/apptainer --version says: $got" >&2; exit 1 ;;
esac
