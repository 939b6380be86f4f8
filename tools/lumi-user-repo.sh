#!/bin/bash
# make lumi-user-repo: the easyblock and the easyconfigs of this checkout into REPO ($1: UserRepo/easybuild of
# LUMI's EasyBuild-user), with the modes your umask gives (under umask 002 in a project's prefix, the other members
# can update them too), naming each of the easyconfigs on EasyBuild's robot path (EASYBUILD_ROBOT_PATHS, as
# EasyBuild-user sets it; else LUMI's LUMI-EasyBuild-contrib) that one of the same name here now shadows.
set -euo pipefail
repo=$1
robot_paths=${EASYBUILD_ROBOT_PATHS:-/appl/lumi/LUMI-EasyBuild-contrib/easybuild/easyconfigs}
file_mode=$(printf '%04o' $(( 8#666 & ~8#$(umask) )))

mkdir -p -- "$repo/easyblocks/generic" "$repo/easyconfigs/p/PyTorch"  # (the umask's modes; setgid where inherited)
install -m "$file_mode" -- easyblocks/generic/singularitycontainer.py "$repo/easyblocks/generic/"
install -m "$file_mode" -- easyconfigs/p/PyTorch/*.eb "$repo/easyconfigs/p/PyTorch/"

IFS=: read -ra dirs <<<"$robot_paths"
for dir in "${dirs[@]}"; do
    if [ -z "$dir" ] || [ ! -d "$dir/p/PyTorch" ] || [ "$dir" -ef "$repo/easyconfigs" ]; then
        continue
    fi
    for easyconfig in easyconfigs/p/PyTorch/*.eb; do
        theirs=$dir/p/PyTorch/${easyconfig##*/}
        if [ -f "$theirs" ]; then
            echo "lumi-user-repo: $repo/$easyconfig shadows $theirs, which has the same name (EasyBuild-user" \
                "searches UserRepo first): eb ${easyconfig##*/} installs this checkout's; give the other's full path" \
                "to install that one"
        fi
    done
done
echo "Installed into $repo: module load LUMI partition/container EasyBuild-user, then eb <easyconfig>"
