
# The packed venv as layers: a SquashFS file, and on top of it, if this install stacks layers (make-squashfs checks
# that the runtime can), the layer of venv-pip's changes since the SquashFS file was packed, a path it removed as a
# whiteout (a character device 0,0). Both hold user-software/ from the container's root, so that the runtime can stack
# them as read-only overlays (the module sets SINGULARITY_OVERLAY and APPTAINER_OVERLAY). Both are files of one
# generation of the venv (STATE).

squash_processors() {  # how many processors mksquashfs uses: the job's, else the node's
    echo "${SLURM_CPUS_PER_TASK:-$(nproc)}"
}
# The tree $1 packed into the new SquashFS file $2, with the options $3... on top of this project's: what it holds
# belongs to you, and its root is the container's / (a layer)
pack_tree() {
    local tree=$1 file=$2
    shift 2
    mksquashfs "$tree" "$file" -noappend -no-progress -quiet -processors "$(squash_processors)" \
        -force-uid "$(id -u)" -force-gid "$(id -g)" -root-mode 0755 @mksquashfs_options@ "$@" >/dev/null
}
as_pattern() {  # the paths on stdin, a line each, as unsquashfs's patterns that match each path only
    sed 's/[][\\*?]/\\&/g'
}
# What follows an entry's type in unsquashfs -lls, up to its path
listed_entry='[^ ]* .* [0-9-]\{10\} [0-9:]\{5\} squashfs-root/'
layer_whiteouts() {  # the whiteouts of the layer $1, a path from the container's root a line
    unsquashfs -lls "$1" | sed -n "s|^c$listed_entry||p"
}
unpacked_bytes() {  # what the files of the SquashFS files $@ take unpacked
    local file
    for file in "$@"; do
        [ ! -f "$file" ] || unsquashfs -lls "$file"
    done | awk '$1 ~ /^-/ { bytes += $3 } END { print bytes + 0 }'
}
under_non_directory() {  # whether the path $2 of the tree $1 is below a file or a link of it (which hides it)
    local above=$2
    while [ "$above" != "${above%/*}" ]; do
        above=${above%/*}
        if [ -L "$1/$above" ] || { [ -e "$1/$above" ] && [ ! -d "$1/$above" ]; }; then
            return 0
        fi
    done
    return 1
}
# Where the layer $1 has a directory and the tree $2 a file or a link, or the other way round, the tree's goes (in the
# overlay, the layer's hides it; unsquashfs cannot write one over the other)
remove_other_types() {
    local kind path
    while IFS=' ' read -r kind path; do
        path=${path%% -> *}  # (a link's target)
        if [ "$kind" = d ]; then
            if [ -L "$2/$path" ] || { [ -e "$2/$path" ] && [ ! -d "$2/$path" ]; }; then
                rm -f -- "${2:?}/$path"
            fi
        elif [ -d "$2/$path" ] && [ ! -L "$2/$path" ]; then
            rm -rf -- "${2:?}/$path"
        fi
    done < <(unsquashfs -lls "$1" | sed -n "s|^\\(.\\)$listed_entry|\\1 |p")
}
apply_layer() {  # unpack the layer $1 over the tree $2: what it removes goes, what it holds replaces
    local whiteouts path
    whiteouts=$(layer_whiteouts "$1") || return 1
    while IFS= read -r path; do
        [ -z "$path" ] || rm -rf -- "${2:?}/$path"
    done <<<"$whiteouts"
    [ -z "$(ls -A "$2")" ] || remove_other_types "$1" "$2" || return 1
    # (without root, unsquashfs cannot make the whiteouts' devices: they are left out)
    if [ -n "$whiteouts" ]; then
        unsquashfs -f -no-progress -quiet -d "$2" -exclude-file <(printf '%s\n' "$whiteouts" | as_pattern) "$1" \
            >/dev/null
    else
        unsquashfs -f -no-progress -quiet -d "$2" "$1" >/dev/null
    fi
}
unpack_venv() {  # the SquashFS file $2, with the layer $3 on top if there is one, unpacked into the new directory $1
    unsquashfs -no-progress -quiet -dest "$1" "$2" >/dev/null || return 1
    [ ! -f "$3" ] || apply_layer "$3" "$1"
}
# The writable overlay's upper directory $1 (what pip changed) onto the tree $2; what it removed is added to the list
# $3: its whiteouts, the paths in the file $4 (NUL-terminated; gone from $1 afterwards). The directories pip
# removed (listed in $1@record@ by OVERLAY_PYTHON): one that holds nothing else is removed too; one made again hides
# what the layers below held in it (as an opaque directory does), and so does a directory where the tree has a file or
# a link, and the other way round.
apply_upper() {
    local path top=
    if [ -f "$1@record@" ]; then
        while IFS= read -r path; do  # (sorted: a directory before what is in it)
            path=${path#/}
            if [ -d "$1/$path" ] && [ ! -L "$1/$path" ]; then
                [ -n "$(find "$1/$path" ! -type d ! -type c -print -quit)" ] || rm -rf -- "${1:?}/$path"
                rm -rf -- "${2:?}/$path"
                # (what is below a listed directory is hidden with it)
                if [ -z "$top" ] || [ "${path#"$top"/}" = "$path" ]; then
                    top=$path
                    echo "$path" >>"$3"
                fi
            fi
        done <"$1@record@"
        rm -f "$1@record@"
    fi
    while IFS= read -r -d '' path; do
        rm -rf -- "${1:?}/$path" "${2:?}/$path"
        echo "$path" >>"$3"
    done <"$4"
    while IFS= read -r -d '' path; do
        if [ -d "$1/$path" ] && [ ! -L "$1/$path" ]; then
            if [ -L "$2/$path" ] || { [ -e "$2/$path" ] && [ ! -d "$2/$path" ]; }; then
                rm -f -- "${2:?}/$path"
            fi
        elif [ -d "$2/$path" ] && [ ! -L "$2/$path" ]; then
            rm -rf -- "${2:?}/$path"
        fi
    done < <(find "$1" -mindepth 1 -printf '%P\0')
    cp -a --remove-destination "$1/." "$2/"  # (a link in the tree is replaced, not written through)
}
# A directory of the tree $1 where the layer it was unpacked from had a whiteout (in the list $2) is new: nothing
# of the SquashFS file $3 below it may show through, so what the tree lacks there is added to the list $2
hide_below_new_directories() {
    local path entry listed
    listed=$(LC_ALL=C sort -u "$2")
    while IFS= read -r path; do
        if [ -n "$path" ] && [ -d "$1/$path" ] && [ ! -L "$1/$path" ]; then
            unsquashfs -l "$3" "$(printf '%s\n' "$path" | as_pattern)" | sed -n "s|^squashfs-root/||p" |
                while IFS= read -r entry; do
                if [ "${entry#"$path"/}" != "$entry" ] && [ ! -e "$1/$entry" ] && [ ! -L "$1/$entry" ] &&
                    ! under_non_directory "$1" "$entry"; then
                    echo "$entry"
                fi
            done
        fi
    done <<<"$listed" >>"$2"
}
in_squashfs() {  # the paths on stdin (a line each) that the SquashFS file $1 holds
    LC_ALL=C awk 'NR == FNR { sub(/^squashfs-root\//, ""); held[$0] = 1; next } $0 in held' <(unsquashfs -l "$1") -
}
# Pack the tree $1 as the layer $3 on the SquashFS file $4, with a whiteout for each path of the list $2 that the tree
# lacks and $4 holds (and that is not below another one, nor below a file or a link of the tree). Where $4 holds
# nothing, a whiteout would hide nothing, and in a directory that only the layer has, the overlay would list it as an
# entry that cannot be opened.
pack_layer() {
    local pseudo="$1.whiteouts" path
    LC_ALL=C sort -u "$2" | while IFS= read -r path; do
        [ -e "$1/$path" ] || [ -L "$1/$path" ] || under_non_directory "$1" "$path" || echo "$path"
    done | in_squashfs "$4" | awk '{ n = split($0, part, "/"); above = ""
                 for (i = 1; i < n; i++) { above = above part[i]; if (above in gone) next; above = above "/" }
                 gone[$0] = 1; print }' | while IFS= read -r path; do
        mkdir -p -- "$(dirname -- "$1/$path")"
        printf '%s c 0 %s %s 0 0\n' "$(printf '%s' "$path" | sed 's/[\\" ]/\\&/g')" "$(id -u)" "$(id -g)"
    done >"$pseudo"
    pack_tree "$1" "$3" -pf "$pseudo"
}
empty_layer() {  # the layer $1 that changes nothing (made from a directory beside it: in a new generation, which
    local empty status=0  # goes whole if this is killed)
    empty=$(new_private_dir "${1%/*}" .empty-layer.) || return 1
    pack_tree "$empty" "$1" || status=$?
    remove_own_tree "$empty"
    return "$status"
}
runtime_on_path() {  # the container runtime, as the module's commands find it
    command -v singularity || command -v apptainer
}
# A new, sparse EXT3 image $1 of $2 MiB for a writable overlay (it takes only what is written); the runtime's temporary
# directory for mkfs.ext3 beside it, not in a TMPDIR that others share
ext3_layer() {
    TMPDIR=${1%/*} "$(runtime_on_path)" overlay create --sparse --size "$2" "$1" >/dev/null 9>&-
}
# Whether the runtime starts the image $1 with the overlays $2 and the binds $3 (comma lists, as the variables take
# them) and the command $4... succeeds in it; says why not on stdout
runs_in_container() {
    local runtime output image=$1 stack=$2 binds=$3
    shift 3
    if ! runtime=$(runtime_on_path); then
        echo "no singularity or apptainer on PATH"
        return 1
    fi
    output=$(SINGULARITY_BINDPATH="$binds" APPTAINER_BINDPATH="$binds" SINGULARITY_OVERLAY="$stack" \
        APPTAINER_OVERLAY="$stack" "$runtime" exec "$image" "$@" 2>&1 9>&-) && return 0
    echo "${output:-$runtime exec with the overlays $stack and the binds $binds failed}" | tail -n 1
    return 1
}
runs_with_overlays() {  # runs_in_container without binds
    runs_in_container "$1" "$2" "" "${@:3}"
}
# Whether the runtime binds the SquashFS file $2 at /user-software in the image $1 (without setuid, SingularityCE
# leaves image-src binds out, saying nothing); says why not on stdout
squashfs_binds() {
    runs_in_container "$1" "" "$2:/user-software:image-src=/user-software,ro" test -d /user-software/venv
}
# Whether the runtime stacks the SquashFS file $2 and the layer $3 as overlays on the image $1 (an unprivileged one
# needs a kernel that mounts overlays in a user namespace); says why not on stdout
layers_stack() {
    runs_with_overlays "$1" "$2:ro,$3:ro" test -d /user-software/venv
}
# How a change of the layers $2 and $3 on the image $1 gets its writable layer on top (writable_layer_kind), tried in
# the work dir $4: a directory where the runtime stacks one (in a user namespace), else an EXT3 image (a setuid runtime
# lets only root use a directory as an overlay); says why neither on stdout, with status 1
writable_layer_allowed() {
    local why probe='mkdir /user-software/.venv-pip-probe && rmdir /user-software/.venv-pip-probe'
    if ! mkdir "$4/overlay"; then
        echo "cannot write in $4"
        return 1
    fi
    if why=$(runs_with_overlays "$1" "$2:ro,$3:ro,$4/overlay" sh -c "$probe"); then
        echo directory
    elif ext3_layer "$4/overlay.img" 64 2>/dev/null &&
        runs_with_overlays "$1" "$2:ro,$3:ro,$4/overlay.img" sh -c "$probe" >/dev/null; then
        echo image
    else
        echo "$why"
        return 1
    fi
}
