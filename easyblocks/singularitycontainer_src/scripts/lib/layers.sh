
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
        -force-uid "$EUID" -force-gid "${run_group:-$(id -g)}" -root-mode 0755 "${mksquashfs_options[@]}" "$@" \
        >/dev/null
}
# The paths on stdin (NUL-terminated) as unsquashfs patterns that match each path only, NUL-terminated: every ASCII
# punctuation and blank is escaped with a backslash, which makes it itself (the wildcards * ? [, the extended ones @( +(
# !( *( ?(, a backslash, and ';', which ends -ex's list); '/' stays, the separator of a pattern's parts. One sed for
# all paths (a change's may be tens of thousands).
patterns_of() {
    LC_ALL=C sed -z -e 's/[[:punct:][:blank:]]/\\&/g' -e 's|\\/|/|g'
}
# Each entry of the SquashFS file $1 (below the patterns $2..., and the directories above them) as "<type> <path>",
# NUL-terminated; with listing_modes=yes, "<type and permissions, as ls -l shows them> <path>". unsquashfs -lln prints
# a path after the root it is given (a random one here, which no name holds), a name with a newline over several
# lines (only the first has the root), and a link as "path -> target", with the target's length as its size: taken
# apart by these, never by blanks, any name comes back as it is.
listing_root=''  # (squashfs_entries': made once a run, by know_listing_root)
know_listing_root() {  # (128 random bits: bash 4.4, LUMI's, has no SRANDOM); none where od fails
    local random
    random=$(od -An -N16 -tx1 /dev/urandom) || { listing_root=''; return 0; }
    listing_root="/.squashfs-root-${random//[!0-9a-f]/}"
}
listing_modes=''
squashfs_entries() {
    [ -n "$listing_root" ] || know_listing_root
    local root=$listing_root
    [ -n "$root" ] || return 1
    unsquashfs -lln -d "$root" "$1" "${@:2}" | LC_ALL=C awk -v root="$root" -v width="${listing_modes:+10}" '
        function flush(   at, fields, path) {
            at = index(entry, " " root "/")
            if (at) {
                path = substr(entry, at + length(root) + 2)
                if (substr(entry, 1, 1) == "l") {
                    split(substr(entry, 1, at - 1), fields, " +")
                    path = substr(path, 1, length(path) - fields[3] - 4)
                }
                printf "%s %s%c", substr(entry, 1, width ? width : 1), path, 0
            }
            entry = ""
        }
        index($0, root) { flush(); entry = $0; next }
        entry != "" { entry = entry "\n" $0 }
        END { flush() }'
}
layer_whiteouts() {  # the whiteouts of the layer $1, each a path from the container's root, NUL-terminated
    squashfs_entries "$1" | LC_ALL=C awk 'BEGIN { RS = "\0" } /^c / { printf "%s%c", substr($0, 3), 0 }'
}
unpacked_bytes() {  # what the files of the SquashFS files $@ take unpacked (a name with a newline may count twice)
    local file
    for file in "$@"; do
        [ ! -f "$file" ] || unsquashfs -lln "$file"
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
# The paths on stdin (NUL-terminated) that are below none of the list $1 (NUL-terminated); without $1, below none of
# the paths before them (sorted: a directory before what is in it)
not_below_any() {
    list=${1:-} LC_ALL=C awk 'BEGIN { RS = "\0"; list = ENVIRON["list"]  # (not -v: a name, its backslashes kept)
                                     while (list != "" && (getline path < list) > 0) top[path] = 1 }
                                   { n = split($0, part, "/"); above = ""
                                     for (i = 1; i < n; i++) {
                                         above = above part[i]; if (above in top) next; above = above "/"
                                     }
                                     if (list == "") top[$0] = 1
                                     printf "%s%c", $0, 0 }'
}
# The paths on stdin (NUL-terminated) removed from the tree $1 where they are there: not below a file or a link of the
# tree, below which nothing is the tree's (a link's target is not). One rm for all: a change may remove thousands.
remove_paths() {
    local path first
    # (an empty list: no process)
    IFS= read -r -d '' first || [ -n "$first" ] || return 0
    { printf '%s\0' "$first"; cat; } | while IFS= read -r -d '' path; do
        if { [ -e "$1/$path" ] || [ -L "$1/$path" ]; } && ! under_non_directory "$1" "$path"; then
            printf '%s\0' "$path"
        fi
    done | (cd -- "$1" && xargs -0r rm -rf --)
}
# Where the layer $1 has a directory and the tree $2 a file or a link, or the other way round, the tree's goes (in the
# overlay, the layer's hides it; unsquashfs cannot write one over the other). So does a file or a link of the tree
# where the layer has one: unsquashfs -f would write the layer's file through a link, wherever it points, or into a
# file that another name of the tree shares (a hard link).
remove_other_types() {
    local entry path
    while IFS= read -r -d '' entry; do
        path=${entry:2}
        if [ "${entry:0:1}" = d ]; then
            if [ -L "$2/$path" ] || { [ -e "$2/$path" ] && [ ! -d "$2/$path" ]; }; then
                rm -f -- "${2:?}/$path"
            fi
        elif [ -d "$2/$path" ] && [ ! -L "$2/$path" ]; then
            rm -rf -- "${2:?}/$path"
        elif [ -L "$2/$path" ] || [ -e "$2/$path" ]; then
            rm -f -- "${2:?}/$path"
        fi
    done < <(squashfs_entries "$1")
}
# Unpack the layer $1 over the tree $2: what it removes goes, what it holds replaces. (Without root, unsquashfs cannot
# make the whiteouts' devices: they are left out by a file of patterns beside the tree, each matching one name
# (patterns_of), which no count of them outgrows.)
apply_layer() {
    local excluded="$2.excluded" status=0
    layer_whiteouts "$1" >"$excluded" && remove_paths "$2" <"$excluded" || return 1
    if holds_a_newline "$excluded"; then
        rm -f -- "$excluded"
        return 1  # (an exclude file's lines cannot hold a newline: venv-pip makes no such layer, it repacks)
    fi
    # (each line from /: unsquashfs drops a backslash that starts a line of an exclude file, which '\*' would lose)
    { [ -z "$(find "$2" -mindepth 1 -print -quit)" ] || remove_other_types "$1" "$2"; } &&
        patterns_of <"$excluded" | LC_ALL=C sed -z 's|^|/|' | tr '\0' '\n' >"$excluded.patterns" &&
        unsquashfs -f -no-progress -quiet -d "$2" -exclude-file "$excluded.patterns" "$1" >/dev/null || status=$?
    rm -f -- "$excluded" "$excluded.patterns"
    return "$status"
}
unpack_venv() {  # the SquashFS file $2, with the layer $3 on top if there is one, unpacked into the new directory $1
    unsquashfs -no-progress -quiet -dest "$1" "$2" >/dev/null || return 1
    [ ! -f "$3" ] || apply_layer "$3" "$1"
}
# The writable overlay's upper directory $1 (what pip changed) onto the tree $2; what it removed is added to the list
# $3 (NUL-terminated paths): its whiteouts, the paths in the file $4 (NUL-terminated; gone from $1 afterwards). The
# directories pip removed (listed in $1$emptied_record by OVERLAY_PYTHON, NUL-terminated): one that holds nothing
# else is removed too; one made again hides what the layers below held in it (as an opaque directory does), and so
# does a directory where the tree has a file or a link, and the other way round.
apply_upper() {
    local path top='' tops="$4.tops"
    if [ -f "$1$emptied_record" ]; then
        : >"$tops" || return 1
        while IFS= read -r -d '' path; do  # (sorted: a directory before what is in it)
            path=${path#/}
            if [ -d "$1/$path" ] && [ ! -L "$1/$path" ]; then
                [ -n "$(find "$1/$path" ! -type d ! -type c -print -quit)" ] || rm -rf -- "${1:?}/$path"
                under_non_directory "$2" "$path" || rm -rf -- "${2:?}/$path"
                # (what is below a listed directory is hidden with it: its whiteouts too, where it was made again)
                if [ -z "$top" ] || [ "${path#"$top"/}" = "$path" ]; then
                    top=$path
                    printf '%s\0' "$path" >>"$3"
                    printf '%s\0' "$path" >>"$tops"
                    [ ! -d "$1/$path" ] || find "$1/$path" -mindepth 1 -type c -delete || return 1
                fi
            fi
        done <"$1$emptied_record"
        rm -f "$1$emptied_record"
        # (so they leave the list, in one pass: an uninstall in a user namespace leaves one for each file it removed)
        if [ -s "$tops" ]; then
            not_below_any "$tops" <"$4" >"$4.kept" && mv -f -- "$4.kept" "$4" || return 1
        fi
        rm -f -- "$tops"
    fi
    remove_paths "$1" <"$4" && remove_paths "$2" <"$4" && { [ ! -s "$4" ] || cat -- "$4" >>"$3"; } || return 1
    while IFS= read -r -d '' path; do
        if [ -d "$1/$path" ] && [ ! -L "$1/$path" ]; then
            if [ -L "$2/$path" ] || { [ -e "$2/$path" ] && [ ! -d "$2/$path" ]; }; then
                rm -f -- "${2:?}/$path"
            fi
        elif [ -d "$2/$path" ] && [ ! -L "$2/$path" ]; then
            rm -rf -- "${2:?}/$path"
        fi
    done < <(find "$1" -mindepth 1 -printf '%P\0')
    # (hard links, not a second copy of pip's output: both are in the work dir; a link in the tree is replaced, not
    # written through)
    cp -a --link --remove-destination "$1/." "$2/"
}
# A directory of the tree $1 where the layer it was unpacked from had a whiteout (in the list $2, NUL-terminated paths)
# is new: nothing of the SquashFS files $3... below it (the venv's, and the install's layer below a personal one) may
# show through, so what the tree lacks there is added to the list
hide_below_new_directories() {
    local path entry pattern file
    [ -s "$2" ] || return 0
    LC_ALL=C sort -zu "$2" >"$2.sorted" || return 1
    while IFS= read -r -d '' path; do
        if [ -n "$path" ] && [ -d "$1/$path" ] && [ ! -L "$1/$path" ]; then
            pattern=$(printf '%s\0' "$path" | patterns_of | tr -d '\0')
            while IFS= read -r -d '' entry; do
                entry=${entry:2}
                if [ "${entry#"$path"/}" != "$entry" ] && [ ! -e "$1/$entry" ] && [ ! -L "$1/$entry" ] &&
                    ! under_non_directory "$1" "$entry"; then
                    printf '%s\0' "$entry"
                fi
            done < <(for file in "${@:3}"; do squashfs_entries "$file" "$pattern"; done)
        fi
    done <"$2.sorted" >>"$2"
    rm -f -- "$2.sorted"
}
# The paths on stdin (NUL-terminated) that one of the SquashFS files $@ holds, as they came: of a listing of those
# paths only (the whole file's, 60,000 entries and more, takes a second), unless they are very many
in_squashfs() {
    local paths=() patterns=() file
    mapfile -d '' paths
    [ "${#paths[@]}" -gt 0 ] || return 0
    [ "${#paths[@]}" -gt 4096 ] || mapfile -d '' patterns < <(printf '%s\0' "${paths[@]}" | patterns_of)
    printf '%s\0' "${paths[@]}" | LC_ALL=C awk 'BEGIN { RS = "\0" } NR == FNR { held[substr($0, 3)] = 1; next }
                                                $0 in held { printf "%s%c", $0, 0 }' \
        <(for file in "$@"; do squashfs_entries "$file" "${patterns[@]}"; done) -
}
# The paths on stdin (NUL-terminated) as pseudo file definitions name them, NUL-terminated: each byte that mksquashfs
# takes for the end of a name (C's isspace: a blank, a tab, a carriage return, a vertical tab, a form feed), a quote
# and a backslash escaped (a path cannot hold a newline there: venv-pip repacks where a whiteout would need one)
pseudo_names() {
    LC_ALL=C sed -z 's/[[:space:]\\"]/\\&/g'
}
# Pack the tree $1 as the layer $3 on the SquashFS files $4... (the venv's, and the install's layer below a personal
# one), with a whiteout for each path of the list $2 that the tree lacks and they hold (and that is not below another
# one, nor below a file or a link of the tree). Where they hold nothing, a whiteout would hide nothing, and in a
# directory that only the layer has, the overlay would list it as an entry that cannot be opened. (A few processes
# for all the paths: an upgrade may remove tens of thousands.) With before_packing set, that command is run with the
# tree and the list of its whiteouts (NUL-terminated paths) before the tree is packed.
before_packing=''
pack_layer() {
    local whiteouts="$1.whiteouts" path
    if [ ! -s "$2" ]; then  # (nothing removed: no whiteouts, and no process to find none)
        if [ -n "$before_packing" ]; then
            { : >"$whiteouts" && "$before_packing" "$1" "$whiteouts"; } || return 1
        fi
        pack_tree "$1" "$3"
        return
    fi
    LC_ALL=C sort -zu "$2" | while IFS= read -r -d '' path; do
        [ -e "$1/$path" ] || [ -L "$1/$path" ] || under_non_directory "$1" "$path" || printf '%s\0' "$path"
    done | in_squashfs "${@:4}" | not_below_any >"$whiteouts" || return 1
    # (the directories above them, in the tree: none is below a file or a link of it)
    LC_ALL=C sed -z -n 's|/[^/]*$||p' "$whiteouts" | LC_ALL=C sort -zu | (cd -- "$1" && xargs -0r mkdir -p --) ||
        return 1
    pseudo_names <"$whiteouts" | LC_ALL=C sed -z "s/\$/ c 0 $EUID ${run_group:-$(id -g)} 0 0/" | tr '\0' '\n' \
        >"$whiteouts.pseudo" || return 1
    [ -z "$before_packing" ] || "$before_packing" "$1" "$whiteouts" || return 1
    pack_tree "$1" "$3" -pf "$whiteouts.pseudo"
}
empty_layer() {  # the layer $1 that changes nothing (made from a directory beside it: in a new generation, which
    local empty status=0  # goes whole if this is killed)
    empty=$(new_private_dir "${1%/*}" .empty-layer.) || return 1
    pack_tree "$empty" "$1" || status=$?
    remove_own_tree "$empty"
    return "$status"
}
# A new, sparse EXT3 image $1 of $2 MiB for a writable overlay (it takes only what is written), laid out as the
# runtime's overlay create lays it out (upper/ and work/, the caller's, in a file of mode 0600), made by mkfs.ext3
# itself: one process, and a journal of 4 MiB, the smallest (the runtime takes no image without one) where the
# runtime's would write 128 MiB of it at each change. Where that fails (e2fsprogs before 1.43 has no -d), by the
# runtime, with its temporary directory beside the image, not in a TMPDIR that others share. With $3, the command
# that fills upper/ first (its path the argument), by mkfs.ext3 only.
# shellcheck disable=SC2154  # runtime: find_runtime's (container.sh)
ext3_layer() {
    local layout mode=755 status=0
    layout=$(new_private_dir "${1%/*}" .ext3-layout.) || return 1
    # (ids beyond 16 bits: as the runtime does, the directories open to all in a file only its owner reads)
    [ "$EUID" -le 65535 ] && [ "${run_group:-$(id -g)}" -le 65535 ] || mode=777
    if ! { mkdir -m "$mode" -- "$layout/upper" "$layout/work" && { [ -z "${3:-}" ] || "$3" "$layout/upper"; } &&
        truncate -s "$2M" -- "$1" && chmod 600 -- "$1" &&
        e2fs_tool mkfs.ext3 -q -F -J size=4 -d "$layout" "$1" >/dev/null 2>&1; }; then
        rm -f -- "$1"
        [ -z "${3:-}" ] || { remove_own_tree "$layout"; return 1; }
        find_runtime && TMPDIR=${1%/*} "$runtime" overlay create --sparse --size "$2" "$1" >/dev/null 9>&- || status=$?
    fi
    remove_own_tree "$layout"
    return "$status"
}
e2fs_dirs=/usr/sbin:/sbin  # (where e2fsprogs is, also where a user's PATH has no sbin)
e2fs_tool() {  # the tool $1 of e2fsprogs with the arguments $2...
    PATH=$PATH:$e2fs_dirs "$@"
}
# Whether the runtime starts the image $1 with the overlays $2 and the binds $3 (comma lists, as the variables take
# them) and the command $4... succeeds in it; says why not on stdout
runs_in_container() {
    local output image=$1 stack=$2 binds=$3
    shift 3
    if ! find_runtime 2>/dev/null; then
        echo "no singularity or apptainer on PATH"
        return 1
    fi
    output=$(SINGULARITY_BINDPATH="$binds" APPTAINER_BINDPATH="$binds" SINGULARITY_OVERLAY="$stack" \
        APPTAINER_OVERLAY="$stack" in_container --exec "$image" "$@" 2>&1) && return 0
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
