#!/bin/bash
# make lumi-user-repo: the easyblock and the easyconfigs of this checkout into REPO ($1: UserRepo/easybuild of
# LUMI's EasyBuild-user), with the modes your umask gives (under umask 002 in a project's prefix, the other members
# can update them too), naming each easyconfig on EasyBuild's robot path that one of the same name here now shadows
# (EasyBuild finds an easyconfig by its name anywhere below a robot path: EASYBUILD_ROBOT_PATHS, as EasyBuild-user
# sets it; else LUMI's LUMI-EasyBuild-contrib and, as partition/container adds it, the root of
# LUMI-EasyBuild-containers). A file in REPO that someone changed since this script wrote it (its manifest, beside
# them, says what it wrote) is left as it is, and named.
set -euo pipefail
repo=$1
containers=${LUMI_CONTAINER_REPOSITORY_ROOT:-/appl/local/containers}/LUMI-EasyBuild-containers
robot_paths=${EASYBUILD_ROBOT_PATHS:-/appl/lumi/LUMI-EasyBuild-contrib/easybuild/easyconfigs:$containers}
file_mode=$(printf '%04o' $(( 8#666 & ~8#$(umask) )))
manifest=$repo/.lumi-user-repo.sha256  # (what this script wrote last: "checksum  path in REPO")

mkdir -p -- "$repo/easyblocks/generic" "$repo/easyconfigs/p/PyTorch"  # (the umask's modes; setgid where inherited)
manifest_line() {  # the manifest's line for the path $1 (in REPO), if there is one (a regular file: never a FIFO)
    if [ -f "$manifest" ] && [ ! -L "$manifest" ]; then
        awk -v path="$1" 'substr($0, 67) == path { print; exit }' "$manifest"
    fi
}
# Each file of this checkout into REPO: a new file (mktemp) renamed over the old one, never written through its name
new_manifest=$(mktemp -- "$repo/.lumi-user-repo.sha256.XXXXXX")
trap 'rm -f -- "$new_manifest"' EXIT
left=0
for file in easyblocks/generic/singularitycontainer.py easyconfigs/p/PyTorch/*.eb; do
    target=$repo/$file
    ours=$(sha256sum <"$file" | cut -c1-64)
    written=$(manifest_line "$file")
    # (a file that an earlier version of this script wrote, before the manifest, is taken for its own)
    if [ -n "$written" ] && [ -f "$target" ] && [ ! -L "$target" ]; then
        theirs=$(sha256sum <"$target" | cut -c1-64)
        if [ "$theirs" != "$ours" ] && [ "$theirs" != "${written:0:64}" ]; then
            echo "lumi-user-repo: $target was changed since lumi-user-repo wrote it (by you or another member):" \
                "left as it is. Remove it (rm $target) and run make lumi-user-repo again to take this checkout's" >&2
            echo "$written" >>"$new_manifest"
            left=$((left + 1))
            continue
        fi
    fi
    new=$(mktemp -- "${target%/*}/.${target##*/}.XXXXXX")
    if ! { cp -- "$file" "$new" && chmod "$file_mode" "$new" && mv -fT -- "$new" "$target"; }; then
        rm -f -- "$new"
        echo "lumi-user-repo: cannot write $target" >&2
        exit 1
    fi
    echo "$ours  $file" >>"$new_manifest"
done
chmod "$file_mode" "$new_manifest" && mv -fT -- "$new_manifest" "$manifest"
trap - EXIT

# The easyconfigs of the same names that EasyBuild would otherwise find on the robot path (below each of its
# directories, as it searches)
names=()
for easyconfig in easyconfigs/p/PyTorch/*.eb; do
    names+=(-o -name "${easyconfig##*/}")
done
IFS=: read -ra dirs <<<"$robot_paths"
for dir in "${dirs[@]}"; do
    if [ -z "$dir" ] || [ ! -d "$dir" ] || [ "$dir" -ef "$repo/easyconfigs" ]; then
        continue
    fi
    while IFS= read -r -d '' theirs; do
        echo "lumi-user-repo: $repo/easyconfigs/p/PyTorch/${theirs##*/} shadows $theirs, which has the same name" \
            "(EasyBuild-user searches UserRepo first): eb ${theirs##*/} installs this checkout's; give the other's" \
            "full path to install that one"
    done < <(find -L "$dir" -type f \( "${names[@]:1}" \) -print0 2>/dev/null | sort -z)
done
echo "Installed into $repo: module load LUMI partition/container EasyBuild-user, then eb <easyconfig>"
[ "$left" -eq 0 ] || exit 1  # (what was left is said above)
