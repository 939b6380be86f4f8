#!/bin/bash
# Build Apptainer with setuid from Debian's own source package (unstable suite) and install it at the prefix DEST,
# which is compiled in: a setuid install cannot be relocated. LUMI runs SingularityCE 4.x in setuid mode (no user
# namespaces there); this runtime behaves as that one does where it matters to the module: the SIF, SquashFS
# overlays and image-src binds go through loop devices and the kernel's SquashFS and overlayfs, and a writable
# directory overlay is refused for every user but root ("only root user can use sandbox as overlay in setuid mode",
# exit 255, the check SingularityCE's container_linux.go has too).
#
#   tools/install-apptainer-suid.sh DEST   ->  DEST/bin/apptainer (and singularity), DEST/libexec/.../starter-suid 4755
#
# Needs root, mmdebstrap and patchelf; about 15 minutes on 2 cores (a sid build root with the source package's
# Build-Depends, then Go). Debian 12 and 13 alike: everything is built and linked inside the sid build root, and the
# binaries get that root's glibc through their ELF interpreter and RPATH (a setuid binary keeps an RPATH).
set -euo pipefail

dest=${1:?usage: $0 DEST}
case "$dest" in /*) ;; *) echo "install-apptainer-suid: DEST must be an absolute path" >&2; exit 2 ;; esac
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo "$(uname -m)-linux-gnu")

# shellcheck source=tools/sid-apt.sh
source "$(dirname "$0")/sid-apt.sh"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sid_apt "$work/apt" deb-src
(cd "$work" && apt-get "${sid_apt_options[@]}" source -qq --download-only apptainer)
dscs=("$work"/apptainer_*.dsc)
version=$(sed -n 's/^Version: \([^-+~]*\).*/\1/p' "${dscs[0]}")
# The build root: sid with the source package's Build-Depends (the Go libraries come as golang-*-dev sources, built
# in GOPATH mode as Debian's own rules do; debhelper and dh-golang are not needed to build by hand)
deps=$(sed -n 's/^Build-Depends: //p' "${dscs[0]}" | tr ',' '\n' | sed 's/([^)]*)//g; s/\[[^]]*\]//g; s/ //g' |
       grep -v -e '^debhelper' -e '^dh-golang' -e '^$' | paste -sd,)
mmdebstrap --quiet --aptopt='Acquire::Check-Valid-Until "false"' --variant=buildd \
    --include="golang-go,libseccomp-dev,pkg-config,$deps" sid "$work/root" "deb $sid_mirror sid main"
# A real directory, not a link: mconfig resolves its own path
src=$work/root/build/gopath/src/github.com/apptainer/apptainer
mkdir -p "$src"
tar xzf "$work"/apptainer_*.orig.tar.gz -C "$src" --strip-components=1
tar xJf "$work"/apptainer_*.debian.tar.xz -C "$src"
(cd "$src" && while read -r patch; do
     case "$patch" in '' | '#'*) ;; *) patch -s -p1 <"debian/patches/$patch" ;; esac
 done <debian/patches/series && echo "$version" >VERSION)
goroot=/usr/lib/$(cd "$work/root/usr/lib" && find . -maxdepth 1 -name 'go-1.*' -printf '%f\n' | sort -V | tail -n 1)
# No /proc in the chroot: Go cannot find its GOROOT by itself. GO111MODULE on make's command line: its Makefile
# sets it.
chroot "$work/root" env -i PATH="$goroot/bin:/usr/bin:/bin" GOROOT="$goroot" HOME=/build GOCACHE=/build/gocache \
    GOPATH=/build/gopath:/usr/share/gocode GO111MODULE=off bash -ec "
    cd /build/gopath/src/github.com/apptainer/apptainer
    ./mconfig -b builddir -V '$version' --prefix='$dest' --without-network --with-suid >/dev/null
    make -s -C builddir GOFLAGS=-mod=readonly GO111MODULE=off >/dev/null
    make -s -C builddir install DESTDIR=/build/dest >/dev/null"

rm -rf "$dest" && cp -a "$work/root/build/dest$dest" "$dest" && mkdir -p "$dest/lib"
for lib in ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libseccomp.so.2 libsqlite3.so.0; do
    cp -L "$work/root/usr/lib/$multiarch/$lib" "$dest/lib/"
done
for binary in "$dest/bin/apptainer" "$dest/libexec/apptainer/bin/starter" "$dest/libexec/apptainer/bin/starter-suid"
do
    patchelf --set-interpreter "$dest/lib/ld-linux-x86-64.so.2" --force-rpath --set-rpath "$dest/lib" "$binary"
done
chown -R root:root "$dest"
chmod 4755 "$dest/libexec/apptainer/bin/starter-suid"
# root on these machines lacks CAP_SYS_RESOURCE; asking for every capability (the default) fails.
# SingularityCE in setuid mode mounts SquashFS and EXT3 images with the kernel (loop devices), whatever the image:
# Apptainer does so only when told (by default it runs squashfuse and fuse2fs as the user, as without setuid).
sed -i -e 's/^root default capabilities = .*/root default capabilities = no/' \
    -e 's/^# *allow setuid-mount squashfs = .*/allow setuid-mount squashfs = yes/' \
    -e 's/^# *allow setuid-mount extfs = .*/allow setuid-mount extfs = yes/' "$dest/etc/apptainer/apptainer.conf"
for setting in 'allow setuid = yes' 'allow setuid-mount squashfs = yes' 'allow setuid-mount extfs = yes'; do
    grep -qx "$setting" "$dest/etc/apptainer/apptainer.conf" ||
        { echo "install-apptainer-suid: cannot set '$setting' in $dest/etc/apptainer/apptainer.conf" >&2; exit 1; }
done
[ -e "$dest/bin/singularity" ] || ln -s apptainer "$dest/bin/singularity"  # (LUMI's name: reads SINGULARITY_* too)
got=$("$dest/bin/apptainer" --version)
case "$got" in
    "apptainer version "*) echo "install-apptainer-suid: $got (setuid) in $dest" ;;
    *) echo "install-apptainer-suid: $dest/bin/apptainer --version says: $got" >&2; exit 1 ;;
esac
