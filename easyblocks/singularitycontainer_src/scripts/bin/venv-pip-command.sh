# venv-pip, a function of the library: pip against the module's virtual environment, whatever its state
# (COMMAND_HELPS); the functions of its change, then venv_pip, the command
# Every container venv-pip starts (in place of the shell that calls it): in_container with the arguments $@, with the
# work dir's temporary directory (TMPDIR: use_workdir_tmp) bound at container_tmp and the container's TMPDIR, where
# pip and what it runs keep their temporary files (at a path of the container's own: the work dir may be where the
# runtime binds nothing, and the container could not make its path)
in_change_container() {
    local bind=${work:+$work/$workdir_tmp:$container_tmp}
    SINGULARITY_BINDPATH="${SINGULARITY_BINDPATH:-}${bind:+${SINGULARITY_BINDPATH:+,}$bind}" \
        APPTAINER_BINDPATH="${APPTAINER_BINDPATH:-}${bind:+${APPTAINER_BINDPATH:+,}$bind}" \
        SINGULARITYENV_TMPDIR=$container_tmp APPTAINERENV_TMPDIR=$container_tmp in_container "$@"
}
# The venv's Python with the arguments $@, in a change's container (prepare_command)
in_change_python() {
    prepare_command "$venv/bin/python" "$@"
    in_change_container "$sif" "${prepared[@]}"
}
pip() {
    in_change_python -m pip "$@"
}
# After a change: the image's commands for the venv again (a package that pip removed may have hidden one of them)
image_commands() {
    in_change_python -m "$image_commands_module"
}
in_overlay() {  # [--then NEXT] MODULE ARGS...: modules of the venv's Python, on the writable overlay (OVERLAY_PYTHON)
    in_change_python -c "$overlay_python" "$@"
}
# venv-pip sync: pip with each request of the file $replaying, one after the other on the writable overlay, then the
# image's commands (OVERLAY_PYTHON, run from a file in the work dir: it runs itself again for each request); each
# one's status in $work/$workdir_tmp/requests.status, a line each
in_overlay_each() {
    local tmp="$work/$workdir_tmp"
    { printf '%s' "$overlay_python" >"$tmp/overlay-python.py" && cp -- "$replaying" "$tmp/requests"; } || return 1
    in_change_python "$container_tmp/overlay-python.py" --then "$image_commands_module" \
        "$([ -n "$replay_from" ] && echo --carry || echo --each)" "$container_tmp/requests" pip
}
# The upper directory of the writable EXT3 image $1 copied into the new directory $2 of the work dir, its whiteouts
# listed in the new file $3 there, NUL-terminated: read on the host by e2fsprogs' debugfs (read_upper), else by a
# container (export_upper_in_container)
export_upper() {
    read_upper "$@" && return 0
    remove_own_tree "$2"
    remove_own_tree "$work/upper-dump"
    rm -f -- "$3" "$work/upper-dirs" "$work/upper-dirs.commands" "$work/upper-dirs.modes"
    export_upper_in_container "$@"
}
# export_upper by debugfs, which reads the image as a file, without a container: rdump copies the directories, files
# and links with their permissions and times (whiteouts, character devices 0,0, it leaves out, and the setuid, setgid
# and sticky bits), and one more run lists each directory it copied (ls -p: /inode/mode/uid/gid/name/size/ a line),
# where the whiteouts are the character devices, and the entries with those bits get them. Not where a name holds a
# newline (a line of the listing, or of its commands, could not hold it), a directory's name a carriage return (where
# debugfs ends a command) or a debugfs says more than its version: then it fails, having written only in the work dir.
read_upper() {
    local dump="$work/upper-dump" dirs="$work/upper-dirs" said="$work/upper-debugfs.err" record
    ext3_put_away "$1" && mkdir -- "$dump" || return 1
    (cd -- "$dump" && PATH=$PATH:$e2fs_dirs exec debugfs -R 'rdump /upper .' "$1") >/dev/null 2>"$said" &&
        debugfs_said_nothing "$said" && mv -T -- "$dump/upper" "$2" && rmdir -- "$dump" || return 1
    find "$2" -type d -printf '%P\0' >"$dirs" || return 1
    ! holds_a_newline "$dirs" && ! LC_ALL=C grep -qz $'\r' -- "$dirs" || return 1
    # (a name in double quotes, a double quote in it doubled: debugfs' own quoting)
    LC_ALL=C awk 'BEGIN { RS = "\0" } { gsub(/"/, "\"\""); printf "ls -p \"/upper%s\"\n", ($0 == "" ? "" : "/" $0) }' \
        "$dirs" >"$dirs.commands" || return 1
    # (the names by the environment, not -v: their backslashes kept)
    e2fs_tool debugfs -f "$dirs.commands" "$1" 2>"$said" | list=$dirs whiteouts=$3 LC_ALL=C awk '
        BEGIN { RS = "\0"; list = ENVIRON["list"]; whiteouts = ENVIRON["whiteouts"]
                while ((getline dir < list) > 0) dirs[++count] = dir; RS = "\n"; printf "" > whiteouts }
        /^debugfs: ls -p / { listed++; next }
        /^$/ { next }
        {   # /inode/mode/uid/gid/name/size/: a name holds no /
            if (split($0, field, "/") != 8 || field[1] != "" || field[8] != "" || field[3] !~ /^[0-7]+$/) exit 1
            if (field[3] !~ /^(04|10|12|02)/ && field[2] != "0") exit 1  # (a FIFO, a socket: in no venv)
            path = (dirs[listed] == "" ? "" : dirs[listed] "/") field[6]
            if (field[3] ~ /^02/)
                printf "%s%c", path, 0 > whiteouts
            else if (field[3] !~ /^12/ && substr(field[3], length(field[3]) - 3, 1) != "0")
                printf "%s %s%c", substr(field[3], length(field[3]) - 3), path, 0
        }
        END { if (listed != count) exit 1 }' >"$dirs.modes" && debugfs_said_nothing "$said" || return 1
    while IFS= read -r -d '' record; do
        chmod "${record%% *}" -- "$2/${record#* }" || return 1
    done <"$dirs.modes"
}
# Whether the file system of the EXT3 image $1 was put away whole: clean (s_state, at byte 1082, is 1) and with no
# journal to replay (s_feature_incompat's RECOVER, at byte 1120: a kernel that still mounts it, as a process left
# running in the container keeps its mounts, sets it). Else debugfs, which reads the file, may read less than the
# kernel holds: the container reads it through the kernel instead.
ext3_put_away() {
    local fields=()
    read -ra fields < <(od -An -v --endian=little -j 1082 -N 40 -t u2 -- "$1" | tr '\n' ' '; echo) || return 1
    [ "${#fields[@]}" -eq 20 ] && [ "${fields[0]}" = 1 ] && (( (fields[19] & 4) == 0 ))
}
debugfs_said_nothing() {  # whether what a debugfs said (the file $1) is its version alone
    [ "$(grep -cv '^debugfs [0-9]' "$1")" = 0 ]
}
# export_upper by a container (EXPORT_UPPER): it sees into the image. The overlays are the read-only layers by now:
# the image is mounted once. The work dir is bound at a path of the container's own (a setuid runtime cannot make a
# path such as /run/user/<uid>/... in an image with read-only overlays: it left the bind out).
export_upper_in_container() {
    local binds="$1:/venv-pip-upper:image-src=/upper,ro,$work:/venv-pip-work"
    SINGULARITY_BINDPATH="${SINGULARITY_BINDPATH:+$SINGULARITY_BINDPATH,}$binds" \
        APPTAINER_BINDPATH="${APPTAINER_BINDPATH:+$APPTAINER_BINDPATH,}$binds" \
        in_change_python -I -c "$export_python" /venv-pip-upper \
        "/venv-pip-work/${2#"$work"/}" "/venv-pip-work/${3#"$work"/}"
}
# The writable layer of a change in the work dir $1, of the kind $2 (writable_layer_kind): its path. An EXT3 image may
# be larger than the place's room (where that runs out, pip fails as it would in a directory there, and venv-pip goes
# on in the next place): 16 GiB, or four times the packed venv. A personal change's starts with the venv's
# directories, the caller's (precreate_venv_directories).
writable_layer() {
    local upper=''
    if [ -n "$personal" ]; then
        [ -f "$1/venv-dirs" ] || venv_directories "${lower_layers[@]}" ${changes:+"$changes"} || return 1
        upper=precreate_venv_directories
    fi
    if [ "$2" = directory ]; then
        mkdir "$1/overlay" || return 1
        if [ -n "$upper" ]; then
            mkdir "$1/overlay/upper" "$1/overlay/work" && "$upper" "$1/overlay/upper" || return 1
        fi
        echo "$1/overlay"
        return
    fi
    ext3_layer "$1/overlay.img" "$(ext3_image_mib)" "$upper" && echo "$1/overlay.img"
}
ext3_image_mib() {  # the size of the EXT3 image of a change (MiB): 16 GiB, or four times the packed venv
    local size bytes=0 mib
    while read -r size; do
        bytes=$(( bytes + size ))
    done < <(stat -c %s -- "${lower_layers[@]}" ${changes:+"$changes"})
    mib=$(( bytes >> 18 ))
    echo $(( mib > 16384 ? mib : 16384 ))
}
# What the writable layer takes in the work dir before pip writes to it: an EXT3 image's journal, which mkfs.ext3
# writes at once (on a disk; a tmpfs keeps it as holes) and sizes by the image: 128 MiB up to 32 GiB (134 MiB with the
# rest, as measured), 256 MiB to 64 GiB, 512 MiB to 128 GiB, 1 GiB above; a directory nothing
writable_layer_room() {
    local mib
    if [ "$writable_kind" != image ]; then
        echo 0
        return
    fi
    mib=$(ext3_image_mib)
    if [ "$mib" -lt 32768 ]; then
        echo $(( 136 << 20 ))
    elif [ "$mib" -lt 65536 ]; then
        echo $(( 264 << 20 ))
    elif [ "$mib" -lt 131072 ]; then
        echo $(( 520 << 20 ))
    else
        echo $(( 1032 << 20 ))
    fi
}
# pip failed: a file or directory that it was given (a requirements or constraints file, --find-links, a wheel or a
# project) and that exists here but not in the container, where pip runs and sees only what the runtime binds, is
# named, with what to do (one container start, after a failure only)
say_paths_the_container_lacks() {
    local arg value='' paths=() missing path dir
    for arg in "$@"; do
        if [ -n "$value" ]; then
            value=''
        else
            case "$arg" in
                -r | -c | -f | -e | --requirement | --constraint | --find-links | --editable) value=yes && continue ;;
                --*=*) arg=${arg#*=} ;;
                -[rcfe]?*) arg=${arg:2} ;;
                -*) continue ;;
            esac
        fi
        if [ -e "$arg" ]; then
            paths+=("$arg")
        fi
    done
    [ "${#paths[@]}" -gt 0 ] || return 0
    # shellcheck disable=SC2016  # (expanded in the container)
    missing=$(in_change_container --exec "$sif" sh -c 'for path; do [ -e "$path" ] || printf "%s\n" "$path"; done' sh \
        "${paths[@]}" 2>/dev/null) || return 0
    while IFS= read -r path; do
        [ -n "$path" ] || continue
        # (a directory itself: its parent, /opt say, would hide the image's own)
        if [ -d "$path" ]; then
            dir=$path
        else
            dir=$(dirname -- "$path")
        fi
        echo "venv-pip: pip runs in the container, which does not see $path: it sees the host's paths that the" \
            "runtime binds (your home, the current directory, /tmp, and SINGULARITY_BINDPATH's). Bind it (export" \
            "SINGULARITY_BINDPATH=$dir,\$SINGULARITY_BINDPATH APPTAINER_BINDPATH=$dir,\$APPTAINER_BINDPATH) and" \
            "run venv-pip again" >&2
    done <<<"$missing"
}
pip_failed() {  # pip (with the arguments $2...) ended with the status $1: say why, and stop with it
    local status=$1
    shift
    [ "$status" -eq 255 ] || say_paths_the_container_lacks "$@"
    say_why_pip_failed "$status" "$work" "the venv was not changed" container_starts
    exit "$status"
}
container_starts() {  # whether the container starts as the last one was to (with the overlays and binds of now)
    (in_change_container --exec "$sif" true) >/dev/null 2>&1
}
# Whether pip ran out of space in the writable layer $1 (an EXT3 image nearly full of what it wrote)
layer_is_full() {
    [ -f "$1" ] && [ $(( $(stat -c %b "$1") * $(stat -c %B "$1") * 10 )) -ge $(( $(stat -c %s "$1") * 9 )) ]
}
yes_if() {  # yes if the command $@ succeeds, else no: a fact for the decisions (DECISIONS)
    if "$@"; then
        echo yes
    else
        echo no
    fi
}
# What the venv looks like: a change of pip's shows in it
venv_state() {
    find "$1" -printf '%P %y %s %T@ %m\n' | sort | cksum
}
# The container sees the venv of the state of the install dir (STATE) read-only: of the form $1, the generation $2
use_state() {
    local others
    others=$(others_overlays "$root")
    case "$1" in
        layers) use_overlays "$others" "$2/$squashfs_name:ro" "$2/$changes_name:ro"; use_for_user_software "" ;;
        file) use_overlays "$others"; use_for_user_software "$2/$squashfs_name" image-src=/user-software,ro ;;
        directory) use_overlays "$others"; use_for_user_software "$dir" ;;
        *) die "there is neither $packed nor $dir: reinstall the module with eb" ;;
    esac
}
make_new_current() {  # the new generation $1 (of the form layers, with a layer on top, else file)
    local new_form='file'
    if [ -f "$1/$changes_name" ]; then
        new_form=layers
        record_writable_layer_kind "$1" "$writable_kind" || die "cannot write in $1; the venv was not changed"
    fi
    write_requests "$1" "$generation" || die "cannot write in $1; the venv was not changed"
    commit_change "$root" "$new_form" || die "cannot make $packed name $1; nothing was changed"
}
# The SquashFS file $2 with the layer $3 on top (if there is one) unpacked into $1/tree
unpack_into() {
    in_background unpack_venv "$1/tree" "$2" "$3" || die "cannot unpack $2 with $3; nothing was changed"
}
next_place() {  # $1 (pip, or putting the change together) ran out of space in the work dir: on to the next place
    full_places+=("${work%/*}")
    echo "venv-pip: $1 ran out of space in ${full_places[-1]}; trying the next place" >&2
    remove_own_tree "$work"
}
# pip with the arguments $3... in a new work dir (work) with room for $2 bytes, in the next place while pip runs out
# of space; its status. $1 says how: repack (on the whole venv unpacked into $work/tree, where $work/before and
# $work/python-links say what it was before) or layers (on the packed venv, with the writable overlay $work/overlay
# on top, and then the image's commands). (Called in a || list, where set -e is off: each step says if it failed.)
pip_where_there_is_room() {
    local how=$1 need=$2 status
    shift 2
    while :; do
        work=$(make_workdir "$root" "$need" "${full_places[@]}") || exit 1
        use_workdir_tmp "$work"
        status=0
        if [ "$how" = repack ]; then
            unpack_into "$work" "$squashfs" "$changes"
            use_overlays "$user_overlays"
            use_for_user_software "$work/tree/user-software"
            if ! { venv_state "$work/tree" >"$work/before" &&
                venv_python_links "$work/tree/$venv_bin" >"$work/python-links"; }; then
                die "cannot write in $work; nothing was changed"
            fi
            if [ -n "$replaying" ]; then
                in_background in_overlay_each || status=$?
            else
                in_background pip "$@" || status=$?
            fi
        else
            pip_on_layers "$@" || status=$?
        fi
        if [ "$status" -eq 0 ] || ! { ran_out_of_space "$work" || layer_is_full "$work/overlay.img"; }; then
            return "$status"
        fi
        next_place pip
    done
}
# pip with the arguments $@ on the packed venv's layers, with a writable layer on top in the work dir (work), then the
# image's commands: its status; what pip changed is in $work/overlay/upper, and the paths it removed (the whiteouts)
# are listed in $work/whiteouts, NUL-terminated, whatever the kind. The writable layer is of the kind writable_kind;
# where the runtime refuses it (the install was made with another runtime: a setuid one refuses a directory, one in a
# user namespace an EXT3 image), the other kind from then on, saying so once it worked (where neither starts, the
# status stays the runtime's 255).
pip_on_layers() {
    local writable status=0 refused why
    if ! writable=$(writable_layer "$work" "$writable_kind" 2>"$work/layer.err"); then
        [ -z "$kind_refused" ] || return 255
        ! ran_out_of_space "$work" || return 1  # (pip_where_there_is_room goes on in the next place)
        # (no mkfs.ext3 on this node, say: the change is made as a repack, which needs no writable layer)
        why=$(tail -n 1 "$work/layer.err")
        echo "venv-pip: cannot make a writable $writable_kind for the change in $work (${why:-no reason given}):" \
            "repacking the whole venv instead" >&2
        return "$overlay_refused"
    fi
    if [ -z "$layer_overlays" ]; then  # (once: it says what it leaves out)
        layer_overlays=$(read_only_overlays "$user_overlays")
        layer_overlays=${layer_overlays:-none}
    fi
    use_overlays "${layer_overlays#none}" "$squashfs:ro" "${base_layer_overlay:-}" "${layer_so_far_overlay:-}" \
        "$writable"
    use_for_user_software ""  # (no bind there)
    # (the layer so far, which the change is put together on, unpacked while pip runs)
    remove_own_tree "$work/tree"
    start_beside layer_so_far "$work/tree" "$work/removed"
    if [ -n "$replaying" ]; then
        in_background in_overlay_each || status=$?
    else
        in_background in_overlay --then "$image_commands_module" pip "$@" || status=$?
    fi
    layer_so_far_status=0
    join_beside || layer_so_far_status=$?
    if [ "$status" -eq 255 ] && [ -z "$kind_refused" ] && ! container_starts; then
        refused=$writable_kind
        kind_refused=$refused
        writable_kind=$([ "$refused" = directory ] && echo image || echo directory)
        remove_own_tree "$writable"
        rm -f -- "$writable"
        status=0
        pip_on_layers "$@" || status=$?
        if [ "$status" -ne 255 ]; then
            echo "venv-pip: the container runtime refuses a writable $refused on top of the venv's layers (a setuid" \
                "runtime lets only root use a directory, one in a user namespace takes no EXT3 image): the change" \
                "got a writable $writable_kind instead" >&2
        fi
        return "$status"
    fi
    if [ "$status" -eq 0 ] && [ "$writable_kind" = image ]; then
        use_overlays "${layer_overlays#none}" "$squashfs:ro" "${base_layer_overlay:-}" "${layer_so_far_overlay:-}"
        mkdir "$work/overlay" || die "cannot write in $work; nothing was changed"
        in_background export_upper "$writable" "$work/overlay/upper" "$work/whiteouts" || status=$?
        if [ "$status" -ne 0 ] && ! ran_out_of_space "$work"; then
            die "cannot copy the change out of $writable (exit code $status); nothing was changed"
        fi
    elif [ "$status" -eq 0 ] && ! find "$work/overlay/upper" -mindepth 1 -type c -printf '%P\0' >"$work/whiteouts"
    then
        die "cannot write in $work; nothing was changed"
    fi
    if [ "$status" -eq 0 ] && ! only_the_venvs_part "$work/overlay/upper" "$work/whiteouts"; then
        die "cannot write in $work; nothing was changed"
    fi
    return "$status"
}
# What the writable layer $1 and its whiteouts (the list $2) hold outside /user-software is not the venv's (the mount
# points the runtime made there for its binds): it goes
only_the_venvs_part() {
    local entry others=() whiteouts=() venvs=()
    # (bash's globs and lists, no process where there is nothing to remove: the runtime's few mount points)
    for entry in "$1"/* "$1"/.*; do
        case "${entry##*/}" in
            . | .. | user-software) ;;
            *) [ ! -e "$entry" ] && [ ! -L "$entry" ] || others+=("$entry") ;;
        esac
    done
    [ "${#others[@]}" -eq 0 ] || rm -rf -- "${others[@]}" || return 1
    [ -s "$2" ] || return 0
    mapfile -d '' -t whiteouts <"$2" || return 1
    others=("${whiteouts[@]/#user-software\/*/}")  # (the venv's each an empty word: where all are, nothing to do)
    printf -v entry '%s' "${others[@]}"
    [ -n "$entry" ] || return 0
    for entry in "${whiteouts[@]}"; do
        [ "${entry#user-software/}" = "$entry" ] || venvs+=("$entry")
    done
    { [ "${#venvs[@]}" -eq 0 ] || printf '%s\0' "${venvs[@]}"; } >"$2"
}
unpacked_need() {  # the bytes a work dir needs for the SquashFS files $@ unpacked
    echo $(( $(unpacked_bytes "$@") * 11 / 10 + (64 << 20) ))
}
# pip (with the arguments $2...) on the whole venv, unpacked in a work dir, packed again into the new generation $1
# (with an empty layer, in that form)
change_by_repacking() {
    local new=$1 status=0
    shift
    pip_where_there_is_room repack "$(unpacked_need "$squashfs" "$changes")" "$@" || status=$?
    [ "$status" -eq 0 ] || pip_failed "$status" "$@"
    keep_venv_python "$work/tree/$venv_bin" "$(cat "$work/python-links")"
    in_background image_commands || die "the image's commands could not be given to $venv; the venv was not changed"
    if [ "$(venv_state "$work/tree")" = "$(cat "$work/before")" ]; then
        [ -z "$replaying" ] || replayed_requests >/dev/null  # (what did not carry over)
        echo "venv-pip: nothing changed in $venv; $packed stays as it was."
        exit 0
    fi
    pack_base "$work/tree" "$new"
    make_new_current "$new"
    echo "venv-pip: $packed has the change; new jobs use it (no module reload needed), running ones keep the old one."
}
pack_base() {  # the tree $1 becomes the SquashFS file of the new generation $2, with an empty layer in the layers form
    local new_squashfs="$2/$squashfs_name" new_changes="$2/$changes_name"
    share_modes "$root" "$1"
    in_background pack_tree "$1" "$new_squashfs" || die "mksquashfs failed; the venv was not changed"
    [ -n "$(printf '%s\0' "$venv_bin/python" | in_squashfs "$new_squashfs" | tr -d '\0')" ] ||
        die "the new SquashFS file lacks $venv/bin/python; the venv was not changed"
    like "$squashfs" "$new_squashfs" "$root"
    if [ "$form" = layers ]; then
        if ! empty_layer "$new_changes" || ! mark_empty_layer "$2"; then
            die "cannot write $new_changes; the venv was not changed"
        fi
        like "$changes" "$new_changes" "$root"
    fi
}
repack_instead() {  # the change (pip $3...) into the new generation $2 on the whole venv instead of as a layer,
    # saying why ($1) if it says; not for a personal layer, which cannot hold the whole venv
    [ -z "$personal" ] || die "this change cannot be a layer of your own (${1:+${1%%:*}}${1:-see above})," \
        "and the install's venv is not yours to repack; nothing was changed"
    [ -z "$1" ] || echo "venv-pip: $1"
    remove_own_tree "$work"
    change_by_repacking "${@:2}"
}
# pip (with the arguments $2...) on the layers, with a writable directory on top that gets the change; that becomes
# part of the new layer of the new generation $1 (layer_or_merge).
change_in_layers() {
    local new=$1 upper whiteouts tree status=0 python=no newline=no changed=no
    shift
    pip_where_there_is_room layers "$(( $(layer_so_far_bytes) * 2 + (64 << 20) + $(writable_layer_room) ))" \
        "$@" || status=$?
    upper="$work/overlay/upper"
    whiteouts="$work/whiteouts"
    if [ "$status" -eq 0 ] && [ -n "$personal" ]; then
        prune_venv_directories "$upper"
    fi
    if [ "$status" -eq 0 ]; then
        ! venv_python_changed "$upper/$venv_bin" || python=yes
        if [ -n "$(find "$upper" -name $'*\n*' -print -quit)" ] || holds_a_newline "$whiteouts"; then
            newline=yes
        fi
        [ -z "$(find "$upper" ! -type d ! -type c -print -quit)" ] && [ ! -s "$whiteouts" ] || changed=yes
    fi
    case "$(layers_outcome "$status" "$overlay_refused" "$python" "$newline" "$changed")" in
        failed) pip_failed "$status" "$@" ;;
        refused) repack_instead "" "$new" "$@"; return ;;  # (OVERLAY_PYTHON said why)
        python) repack_instead "$python_changed" "$new" "$@"; return ;;
        newline) repack_instead "$newline_in_a_name" "$new" "$@"; return ;;
        unchanged)
            if [ -n "$replaying" ] && [ -n "$personal" ] && [ -z "$replay_from" ]; then
                # (none of the requests changes the venv as it is now: an empty layer)
                empty_layer "$new/$changes_name" || die "cannot write $new/$changes_name; nothing was changed"
                commit_personal_layer "$new"
                exit 0
            fi
            [ -z "$replaying" ] || replayed_requests >/dev/null  # (what did not carry over)
            echo "venv-pip: nothing changed in $venv; $changed_what stays as it was."
            exit 0
            ;;
    esac
    tree="$work/tree"
    if [ "$layer_so_far_status" -ne 0 ]; then
        again_where_there_is_room "cannot unpack $changes into $work; nothing was changed" "$new" "$@"
        return
    fi
    if ! apply_upper "$upper" "$tree" "$work/removed" "$whiteouts" ||
        ! hide_below_new_directories "$tree" "$work/removed" "${lower_layers[@]}"; then
        again_where_there_is_room "cannot put the change together in $work; nothing was changed" "$new" "$@"
        return
    fi
    if holds_a_newline "$work/removed"; then
        # (what the layer must hide below a new directory: a name of the SquashFS file's)
        repack_instead "$newline_in_a_name" "$new" "$@"
        return
    fi
    pack_new_layer "$new" "$tree"
}
# The change put together in the tree $2 (what it removes in $work/removed) packed as the layer of the new generation
# $1, which becomes the venv's (layer_or_merge), or the caller's (commit_personal_layer)
pack_new_layer() {
    [ -z "$personal" ] || before_packing=record_personal_packages
    share_modes "$layers_dir" "$2"
    in_background pack_layer "$2" "$work/removed" "$1/$changes_name" "${lower_layers[@]}" ||
        die "mksquashfs failed; nothing was changed"
    if [ -n "$personal" ]; then
        commit_personal_layer "$1"
        return
    fi
    like "$changes" "$1/$changes_name" "$root"
    layer_or_merge "$1"
}
# What the layer of the state the change is made on takes unpacked; and that layer as an overlay of pip's container:
# none where it changes nothing (a mount less)
layer_so_far_bytes() {
    if [ "$layer_so_far_empty" = yes ]; then
        echo 0
    else
        unpacked_bytes "$changes"
    fi
}
# The layer of the state the change is made on, unpacked into the new directory $1, its whiteouts listed in the new
# file $2 (NUL-terminated); one that changes nothing (make-squashfs and a merge leave one) has nothing to unpack
layer_so_far() {
    rm -f -- "$2"
    mkdir "$1" || return 1
    if [ "$layer_so_far_empty" = yes ]; then
        : >"$2"
        return
    fi
    # (apply_layer not in a background of its own: its unsquashfs is then a child of the step that stop ends)
    layer_whiteouts "$changes" >"$2" && apply_layer "$changes" "$1"
}
# The new layer, put together, becomes the new generation $1's, on the SquashFS file as it is; or, when it grows
# beyond a quarter of the SquashFS file (and 16 MiB), both are merged into a new SquashFS file
layer_or_merge() {
    local new=$1 new_squashfs="$1/$squashfs_name" new_changes="$1/$changes_name" sizes=()
    mapfile -t sizes < <(stat -c %s -- "$new_changes" "$squashfs")
    [ "${#sizes[@]}" -eq 2 ] || die "cannot read the sizes of $new_changes and $squashfs; nothing was changed"
    if [ "$(layer_or_merge_choice "${sizes[0]}" "${sizes[1]}")" = layer ]; then
        # the SquashFS file stays as it is: the new generation shares it (a hard link, no copy)
        ln -- "$squashfs" "$new_squashfs" || die "cannot link $squashfs into $new; nothing was changed"
        make_new_current "$new"
        echo "venv-pip: $packed has the change as a layer; new jobs use it (no module reload needed), running ones" \
            "keep the old one."
        return
    fi
    # (a fresh work dir: the whole venv may not fit where the changes did)
    remove_own_tree "$work"
    work=$(make_workdir "$root" "$(unpacked_need "$squashfs" "$new_changes")") || exit 1
    use_workdir_tmp "$work"
    unpack_into "$work" "$squashfs" "$new_changes"
    rm -f -- "$new_changes"
    pack_base "$work/tree" "$new"
    make_new_current "$new"
    echo "venv-pip: $packed has the change (merged with the earlier ones); new jobs use it (no module reload" \
        "needed), running ones keep the old one."
}
# A step that puts the change together in the work dir failed: where that was for want of space there, the whole
# change (into the new generation $2, pip $3...) again in the next place, as when pip runs out of it; else stop,
# saying $1
again_where_there_is_room() {
    local why=$1
    shift
    ran_out_of_space "$work" || die "$why"
    next_place "putting the change together"
    change_in_layers "$@"
}
# A pip command that leaves the venv alone (list, show, freeze, download, install --dry-run, ...), with the arguments
# $@: straight against the venv as it is now, read-only if packed, with a work dir of its own (pip downloads, and
# builds to read a package's metadata, in its temporary directory); venv-pip ends with its status
pip_without_change() {
    use_state "$form" "$generation"
    work=$(make_workdir "$root" $(( 64 << 20 ))) || exit 1
    use_workdir_tmp "$work"
    use_private_pip_cache
    # shellcheck disable=SC2064  # (this run's work dir)
    trap "remove_own_tree $(printf %q "$work")" EXIT
    stop_on_signals
    status=0
    in_background pip "$@" || status=$?
    [ "$status" -eq 0 ] || [ "$status" -eq 255 ] || say_paths_the_container_lacks "$@"
    exit "$status"
}
# The state as it is now that this run holds the lock: what this run changes
read_state_under_lock() {
    generation=$(current_generation "$root")
    form=$(venv_form "$root" "$generation")
    writable_kind=$(writable_layer_kind "$generation")
    kind_refused=  # (the kind the runtime refused, if it did: pip_on_layers)
    squashfs="$generation/$squashfs_name"
    changes="$generation/$changes_name"
    layer_so_far_empty=no  # (make-squashfs and a merge leave a layer that changes nothing: not mounted, not unpacked)
    [ ! -e "$generation/$empty_mark" ] || layer_so_far_empty=yes
    layer_so_far_overlay="$changes:ro"
    [ "$layer_so_far_empty" = no ] || layer_so_far_overlay=''
    [ "$layer_so_far_empty" = yes ] || know_listing_root  # (a layer with a change is listed more than once)
    layer_so_far_status=1  # (pip_on_layers: 0 once the layer so far is unpacked)
    user_overlays=$(others_overlays "$root")  # (before this run adds its own)
    layer_overlays=  # (user_overlays but the writable ones, or none, once a change on layers needs them: pip_on_layers)
    generation_whole "$generation" || die "$(damaged_state "$root" "$generation")"
    lower_layers=("$squashfs")  # (what a layer of the change goes on: the SquashFS files below it)
    base_layer_overlay=''  # (the install's layer, below a personal change's: read_personal_state)
    layers_dir=$root changed_what=$packed  # (where the change's generation goes, and what it changes)
    [ -n "$personal" ] || remove_superseded "$root" "$generation"  # (a personal change leaves the install alone)
}
# A personal change (personal_change) goes into the personal dir $1: on the install's venv as read_state_under_lock
# read it, below the caller's layer so far (if any, made on that state) as the layer the change is put together on
read_personal_state() {
    local pdir=$1 base=''
    [ "$form" = layers ] || die "your own packages go into a layer on top of the install's layers, and the install's" \
        "venv is not in layers (its form is $form): ask its owner to run make-squashfs, or install it yourself"
    base_layer_overlay=$layer_so_far_overlay
    [ "$layer_so_far_empty" = yes ] || lower_layers+=("$changes")
    layers_dir=$pdir changed_what="your layer in $pdir"
    personal_generation=$(current_generation "$pdir")
    changes='' layer_so_far_empty=yes layer_so_far_overlay=''
    requests_base=$personal_generation requests_of="your layer"
    if [ -n "$replaying" ] && [ -z "$replay_from" ]; then  # (venv-pip sync --user: the layer's own requests, again)
        if [ -z "$personal_generation" ] || [ ! -f "$personal_generation/$requests_name" ]; then
            die "there is no layer of yours in $pdir to make again (venv-pip install --user makes one)"
        fi
        replaying="$personal_generation/$requests_name"
        requests_base=''
    elif [ -n "$personal_generation" ]; then
        [ ! -f "$personal_generation/$base_record" ] || IFS= read -r base <"$personal_generation/$base_record" || true
        [ "$base" = "${generation##*/}" ] || die "the install's venv changed since you made your layer in $pdir" \
            "(it may hold other versions of what your layer changes): run venv-pip sync --user first, which makes" \
            "your layer again on the venv as it is now"
        generation_whole "$personal_generation" || die "your layer's state $personal_generation is damaged (its" \
            "SquashFS file is empty or short: did a node crash before it was written?): remove $pdir/$packed_name" \
            "and make your layer again"
        changes="$personal_generation/$changes_name"
        layer_so_far_empty=no
        layer_so_far_overlay="$changes:ro"
        know_listing_root
    fi
    # (the writable layer's kind as the runtime took it last time)
    [ -z "$personal_generation" ] || writable_kind=$(writable_layer_kind "$personal_generation")
    remove_superseded "$pdir"
}
# The change (pip with the arguments $@) of an unpacked venv, in place (the lock is held until pip and image_commands
# end); venv-pip ends with pip's status
pip_on_directory() {
    [ -d "$dir/venv" ] || die "there is neither $packed nor $dir/venv: reinstall the module with eb"
    use_state "$form" "$generation"
    say_where_others_can_replace
    work=$(make_workdir "$root" $(( 64 << 20 ))) || exit 1
    use_workdir_tmp "$work"
    links=$(venv_python_links "$dir${venv#/user-software}/bin")
    status=0
    in_background pip "$@" || status=$?
    keep_venv_python "$dir${venv#/user-software}/bin" "$links"
    if [ "$status" -ne 0 ]; then
        [ "$status" -eq 255 ] || say_paths_the_container_lacks "$@"
        exit "$status"
    fi
    in_background image_commands
    exit 0
}
# The change (pip with the arguments $@) of the packed venv: into a new generation, made current by one rename when it
# is whole (STATE); the functions it calls take it as their first argument. What they read besides is the state as
# this run read it under the lock (generation, form, squashfs, changes, user_overlays: not set again from here on), and
# what they set is the work dir the change is being made in (work: the next place where one runs out of space) and the
# writable layer's kind (writable_kind, kind_refused: another where the runtime refuses one). This run's work dir and
# new generation go when it ends, unless the rename made the new one the venv (CHANGE).
change_packed_venv() {
    [ "$form" != missing ] || die "there is neither $packed nor $dir: reinstall the module with eb"
    # After unmake-squashfs both are there: changing one of them would leave the other behind, silently
    [ ! -e "$dir" ] || die "both $packed and $dir exist (after unmake-squashfs?): the module uses the packed venv." \
        "Remove the one you no longer want (to use $dir: rm $packed; module load $module), then run venv-pip again"
    work=
    full_places=()  # (where this run ran out of space: not tried again)
    new_change_generation "$root" || die "cannot make a directory in $root; nothing was changed"
    say_where_others_can_replace
    if [ "$(change_method "$form" "$(yes_if [ -O "$squashfs" ])" "$(yes_if [ -O "$changes" ])")" = layers ]; then
        change_in_layers "$change_new" "$@"
    else
        if [ "$form" = layers ]; then
            theirs=$changes
            [ -O "$squashfs" ] || theirs=$squashfs
            echo "venv-pip: $theirs belongs to $(stat -c %U "$theirs"): your change cannot be a layer on top of it;" \
                "repacking the whole venv"
        fi
        change_by_repacking "$change_new" "$@"
    fi
}
# venv-pip sync [--user] [--from NAME/VERSION] (COMMAND_HELPS): the requests of a layer or of a venv replayed, in
# order, as one change: with --user, the caller's own again on the install's venv as it is now, or another module's
# personal layer's (--from) on top of the caller's layer of this module; without, the install's venv of another
# module's (--from) on this one's, by its changers
sync_command() {
    local user='' from='' other requests
    while [ "$#" -gt 0 ]; do
        case "$1" in
            --user) user=yes ;;
            --from=?*) from=${1#--from=} ;;
            --from) [ "$#" -ge 2 ] || die "venv-pip sync --from needs a module (NAME/VERSION)"; from=$2; shift ;;
            *) die "venv-pip sync takes --user and --from NAME/VERSION, '$(printable "$1")' was given" ;;
        esac
        shift
    done
    [ -n "$user$from" ] || die "venv-pip sync needs --user (your layer made again on the install's venv as it is" \
        "now), --from NAME/VERSION (what venv-pip added to that module, replayed on this one), or both"
    change_request=()
    replaying=yes
    if [ -n "$from" ]; then
        case "$from" in
            */*/* | /* | */ | *..* | .*) die "venv-pip sync --from takes a module of the same prefix, as" \
                "NAME/VERSION (PyTorch/2.7.1-rocm-6.2.4-python-3.12-singularity-20250827, say)," \
                "'$(printable "$from")' was given" ;;
            */*) ;;
            *) die "venv-pip sync --from takes NAME/VERSION, '$(printable "$from")' was given" ;;
        esac
        [ "$from" != "$module" ] || die "venv-pip sync --from names this module, $module: give the one to replay"
        replay_from=$from
        # (the other module's personal dir, or its install dir beside this one)
        local pdir="${root%/*/*}/$from"
        [ -z "$user" ] || personal_dir "$from"
        other=$(current_generation "$pdir")
        requests="$pdir"
        [ -z "$other" ] || requests="$other/$requests_name"
        # shellcheck disable=SC2154  # replace_why: replace_check's (files.sh)
        if [ -n "$user" ] && [ -n "$other" ] && replace_check "$other"; then
            die "other users can rename or replace what is in $replace_why: not replaying the requests there"
        fi
        [ -f "$requests" ] || die "there is nothing that venv-pip added to $from to replay (no $requests)"
        replaying=$requests
    fi
    if [ -n "$user" ]; then
        personal_change
    fi
    begin_change "$root" wait || exit 1
    read_state_under_lock
    use_private_pip_cache
    [ "$form" != directory ] || die "venv-pip sync --from replays onto a packed venv, and $dir is unpacked: run" \
        "make-squashfs first"
    change_packed_venv
    exit 0
}
# venv-pip install/uninstall --user: the change (pip with the arguments $@, but --user) into a new generation of the
# caller's personal dir (PERSONAL), on the install's venv as it is now and the caller's layer so far. What cannot be
# a layer (a change of the venv's own Python, a name with a newline, what the overlay refuses) is refused: the
# install's venv is not the caller's to repack. The lock is the personal dir's: the install's is its changers'.
personal_change() {
    local arg args=() pdir
    for arg; do
        [ "$arg" = --user ] || args+=("$arg")
    done
    [ -n "$replaying" ] || change_request=("${args[@]}")
    personal=yes
    personal_dir "$module"
    make_personal_dir "$pdir"
    begin_change "$pdir" wait || exit 1
    read_state_under_lock
    read_personal_state "$pdir"
    use_private_pip_cache
    work=
    full_places=()
    new_change_generation "$pdir" || die "cannot make a directory in $pdir; nothing was changed"
    say_where_others_can_replace
    change_in_layers "$change_new" "${args[@]}"
    exit 0
}
# The personal dir $1 (made private, with what it needs above it), where nobody else can rename or replace what is in
# it
# shellcheck disable=SC2154  # replace_why: replace_check's (files.sh)
make_personal_dir() {
    [ "${1:0:1}" = / ] ||
        die "the directory of your own packages, $1, is not an absolute path: set $personal_layers_var to one"
    (umask 077 && mkdir -p -- "$1") || die "cannot make $1, the directory of your own packages: set" \
        "$personal_layers_var to a directory of yours"
    if replace_check "$1"; then
        die "other users can rename or replace what is in $replace_why: your own packages cannot be kept in $1;" \
            "set $personal_layers_var to a directory of yours that only you can write"
    fi
}
# The new layer of the generation $1 becomes the caller's, recorded with the install's generation it was made on and
# the requests so far and this one: one rename (STATE)
commit_personal_layer() {
    local new=$1
    # (and links to the install's files it was made on: the module names them, see module_personal_layer)
    { echo "${generation##*/}" >"$new/$base_record" && write_requests "$new" "$requests_base" &&
        record_writable_layer_kind "$new" "$writable_kind" &&
        ln -s -- "$generation/$squashfs_name" "$new/$base_squashfs_link" &&
        ln -s -- "$generation/$changes_name" "$new/$base_changes_link"; } ||
        die "cannot write in $new; nothing was changed"
    commit_change "$layers_dir" layers || die "cannot make $layers_dir/$packed_name name $new; nothing was changed"
    local later=" In this shell, singularity exec and run see it after module load $module again." what="has the change"
    [ -z "$module_named_personal" ] || later=''
    [ -z "$replaying" ] || what="is made again on the install's venv as it is now"
    [ -z "$replay_from" ] || what="has what you added to $replay_from"
    echo "venv-pip: your layer in $layers_dir $what; new jobs use it (no module reload needed), running ones keep the" \
        "old one.$later"
}
# The requests file of the new generation $1 (what venv-pip was asked for, to make it, in order, one request a line:
# pip's arguments as shell words, each quoted where it needs it, '...', as venv-pip sync reads them back): those of
# the generation $2 it was made on (none: a layer made again), then this change's (change_request), or those of the
# requests it replayed (venv-pip sync) that pip carried out, saying which it did not
write_requests() {
    local word words=() quote="'" line
    {
        echo "# What venv-pip was asked for, for ${requests_of:-the venv of $module}, in order: pip's arguments as" \
            "shell words (venv-pip sync --from replays them on another module)"
        if [ -n "$2" ] && [ -f "$2/$requests_name" ]; then
            while IFS= read -r line || [ -n "$line" ]; do  # (all but the comments, by bash: no process)
                [ "${line#\#}" != "$line" ] || printf '%s\n' "$line"
            done <"$2/$requests_name"
        fi
        if [ -n "$replaying" ]; then
            replayed_requests
        else
            for word in "${change_request[@]}"; do
                case "$word" in
                    '' | *[!A-Za-z0-9_./=:,+@%-]*) words+=("$quote${word//$quote/$quote\\$quote$quote}$quote") ;;
                    *) words+=("$word") ;;
                esac
            done
            echo "${words[*]}"
        fi
    } >"$1/$requests_name"
}
# venv-pip sync: the requests replayed that pip carried out, on stdout; those it did not, said on stderr
replayed_requests() {
    local line status
    exec 3<"$work/$workdir_tmp/requests.status"
    while IFS= read -r line; do
        [[ ! "$line" =~ ^[[:space:]]*(#|$) ]] || continue  # (as OVERLAY_PYTHON skips them)
        IFS= read -r status <&3 || status=skipped
        if [ "$status" = 0 ]; then
            printf '%s\n' "$line"
        elif [ "$status" = "$newer_here_status" ]; then
            echo "venv-pip: not carried over (this module ships what it changes, said above): $line" >&2
        else
            echo "venv-pip: not carried over (pip failed, exit code $status): $line" >&2
        fi
    done <"$work/$workdir_tmp/requests"
    exec 3<&-
}
# venv-pip: the command. Its Python programs are read once, first: OVERLAY_PYTHON, run in the container on the
# writable overlay, and EXPORT_UPPER, which copies a change out of an EXT3 image (read_program)
venv_pip() {
    if [ "${1:-}" = --module-personal-layer ]; then  # (the module's load asks: module_personal_layer)
        module_personal_layer
        exit 0
    fi
    answer_help "$@"
    launch_with_personal_layer=''  # (venv-pip's containers take it where it says: read_personal_state)
    prepare_launch
    read_program overlay-python.py overlay_python
    read_program export-upper.py export_python
    venv_bin="user-software${venv#/user-software}/bin"  # (in a tree unpacked from the SquashFS files)
    container_tmp=/venv-pip-tmp  # (in_change_container)
    newline_in_a_name="a name with a newline, which the layer's lists cannot hold: repacking the whole venv"
    python_changed="a package changed $venv/bin/python, python3 or python3.N: repacking the whole venv to keep its own"
    python_changed+=" Python"
    [ "$#" -gt 0 ] || die "no pip command given (usage: venv-pip <pip command> [pip's options]; venv-pip -h says more)"
    know_who_runs
    use_shared_umask "$root"
    # (a change of the install's venv, unless it is the caller's own: personal_change; replaying: venv-pip sync, the
    # requests it replays, of another module's: replay_from)
    personal='' replaying='' replay_from='' requests_of='' requests_base='' change_request=("$@")
    if [ "$1" = sync ]; then  # (venv-pip's own word: pip has no sync)
        sync_command "${@:2}"
    fi
    if [ "$1" = list ] && pip_wants_user "$@"; then
        [ "$#" -eq 2 ] || die "venv-pip list --user takes no other options, '$(printable "$*")' was given"
        list_personal_layer
        exit 0
    fi
    if ! pip_changes_venv "$@"; then
        pip_without_change "$@"  # (and exit: not in a condition, where set -e would be off)
    fi
    ! pip_wants_user "$@" || personal_change "$@"
    begin_change "$root" wait || exit 1
    read_state_under_lock
    use_private_pip_cache
    if [ "$form" = directory ]; then
        pip_on_directory "$@"
    fi
    change_packed_venv "$@"
}
