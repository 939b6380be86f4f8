@readable_by_all@

@pip_changes_venv@

@bind_user_software@

@keep_venv_python@
@layers@
@workdir@

venv=@venv@
venv_bin="user-software${venv#/user-software}/bin"  # (in a tree unpacked from the SquashFS files)
# The runtime never gets the lock's descriptor (9): its FUSE daemons outlive a killed venv-pip, and would hold the lock
# for everyone
pip() {
    exec "$runtime" @entry@ "$sif" @python@ -m pip "$@" 9>&-
}
# After a change: the image's commands for the venv again (a package that pip removed may have hidden one of them)
image_commands() {
    exec "$runtime" @entry@ "$sif" @python@ -m @image_commands_module@ 9>&-
}
overlay_python=$(cat <<'PYTHON'
@overlay_python@
PYTHON
)
in_overlay() {  # [--then NEXT] MODULE ARGS...: modules of the venv's Python, on the writable overlay (OVERLAY_PYTHON)
    exec "$runtime" @entry@ "$sif" @python@ -c "$overlay_python" "$@" 9>&-
}
# What the venv looks like: a change of pip's shows in it
venv_state() {
    find "$1" -printf '%P %y %s %T@ %m\n' | sort | cksum
}
like() {  # the new file $2 gets the mode and group of $1, for whoever could read it (a project's shared install)
    chmod --reference="$1" "$2"
    chgrp --reference="$1" "$2" 2>/dev/null || true
}
# The container sees the venv in the form the install dir's state has (STATE), read-only
use_state() {
    case "$form" in
        layers) use_layers ;;
        file) drop_layers; use_for_user_software "$squashfs" image-src=/user-software,ro ;;
        directory) drop_layers; use_for_user_software "$dir" ;;
        *) die "there is neither $packed nor $dir: reinstall the module with eb" ;;
    esac
}

# Commands that leave the venv alone (list, show, freeze, download, install --dry-run, ...) run straight against
# the venv as it is now, read-only if packed.
if ! pip_changes_venv "$@"; then
    use_state
    pip "$@"
fi
[ -z "$pip_user" ] || die "--user would install into ~/.local, which $venv does not see; leave --user out"

@lock_install_dir@
wait_for_lock
read_state  # (as it is now that this run holds the lock)
remove_superseded "$root"

# The long steps run in the background and are waited for: bash runs a trap only when the foreground command
# ends, and a SIGTERM from Slurm or a Ctrl-C must stop them at once. They keep the terminal as stdin (pip asks
# before it uninstalls).
child=
stop_on_signals() {
    trap 'stop 129' HUP
    trap 'stop 130' INT
    trap 'stop 143' TERM
}
in_background() {
    local status=0
    "$@" <&0 &
    child=$!
    wait "$child" || status=$?
    child=
    return "$status"
}
stop() {
    if [ -n "$child" ]; then
        pkill -TERM -P "$child" 2>/dev/null || true  # (what a function run in the background started)
        kill "$child" 2>/dev/null || true
        wait "$child" 2>/dev/null || true
    fi
    exit "$1"
}
stop_on_signals

if [ "$form" = directory ]; then
    [ -d "$dir/venv" ] || die "there is neither $packed nor $dir/venv: reinstall the module with eb"
    use_state
    links=$(venv_python_links "$dir${venv#/user-software}/bin")
    status=0
    in_background pip "$@" || status=$?  # the lock is held until pip and image_commands end
    keep_venv_python "$dir${venv#/user-software}/bin" "$links"
    [ "$status" -eq 0 ] || exit "$status"
    in_background image_commands
    exit 0
fi
[ "$form" != missing ] || die "there is neither $packed nor $dir: reinstall the module with eb"
# After unmake-squashfs both are there: changing one of them would leave the other behind, silently
[ ! -e "$dir" ] || die "both $packed and $dir exist (after unmake-squashfs?): the module uses the packed venv." \
    "Remove the one you no longer want (to use $dir: rm $packed; module load $module), then run venv-pip again"

# The change goes into a new generation, made current by one rename when it is whole (STATE)
work=
new=
trap 'clean_workdir "$work"; rm -rf -- "$new"' EXIT
new=$(new_generation "$root") || die "cannot make a directory in $root; nothing was changed"
new_squashfs="$new/$squashfs_name"
new_changes="$new/$changes_name"
make_new_current() {  # (from the rename on, the new generation is the venv: no trap may remove it)
    trap '' HUP INT TERM
    make_current "$root" "$new" || die "cannot make $packed name $new; nothing was changed"
    new=
    stop_on_signals
}

# The venv with the layer $1 on top unpacked into $tree, in a fresh work dir on storage with room for it (but the
# places $2...: pip ran out of space there)
unpack_in_workdir() {
    local layer=$1
    shift
    make_workdir "$(( $(unpacked_bytes "$squashfs" "$layer") * 11 / 10 + (64 << 20) ))" "$@"
    tree="$work/tree"
    in_background unpack_venv "$tree" "$layer" || die "cannot unpack $squashfs with $layer; nothing was changed"
}

# pip on the whole venv, unpacked in $work, packed again into a new generation (with an empty layer, in that form)
change_by_repacking() {
    local tree before links status full=()
    while :; do  # (in the next place while pip runs out of space, as in change_in_layers)
        unpack_in_workdir "$changes" "${full[@]}"
        drop_layers
        use_for_user_software "$tree/user-software"
        before=$(venv_state "$tree")
        links=$(venv_python_links "$tree/$venv_bin")
        status=0
        in_background pip "$@" || status=$?
        if [ "$status" -eq 0 ] || ! ran_out_of_space "$work"; then
            break
        fi
        full+=("$(workdir_place "$work")")
        echo "venv-pip: pip ran out of space in ${full[-1]}; trying the next place" >&2
        clean_workdir "$work"
    done
    [ "$status" -eq 0 ] || stop_as_pip "$status" "the venv was not changed"
    keep_venv_python "$tree/$venv_bin" "$links"
    in_background image_commands || die "the image's commands could not be given to $venv; the venv was not changed"
    if [ "$(venv_state "$tree")" = "$before" ]; then
        echo "venv-pip: nothing changed in $venv; $packed stays as it was."
        exit 0
    fi
    pack_base "$tree"
    make_new_current
    echo "venv-pip: $packed has the change; new jobs use it (no module reload needed), running ones keep the old one."
}
pack_base() {  # the tree $1 becomes the new generation's SquashFS file, with an empty layer in the layers form
    in_background mksquashfs "$1" "$new_squashfs" "${squash_options[@]}" >/dev/null ||
        die "mksquashfs failed; the venv was not changed"
    # (grep reads the whole listing: with -q it would stop early, and pipefail would count unsquashfs's SIGPIPE)
    unsquashfs -l "$new_squashfs" | grep -x "squashfs-root/$venv_bin/python" >/dev/null ||
        die "the new SquashFS file lacks $venv/bin/python; the venv was not changed"
    like "$squashfs" "$new_squashfs"
    if [ "$form" = layers ]; then
        if ! empty_layer "$new_changes" || ! mark_empty_layer "$new"; then
            die "cannot write $new_changes; the venv was not changed"
        fi
        like "$changes" "$new_changes"
    fi
}

# pip on the layers, with a writable directory on top that gets the change; that becomes part of the new layer. When
# the layer grows beyond a quarter of the SquashFS file (and 16 MiB), both are merged into a new SquashFS file.
change_in_layers() {
    local upper tree limit why status need full=()
    need=$(( $(unpacked_bytes "$changes") * 2 + (64 << 20) ))
    while :; do  # (in the next place while pip runs out of space)
        make_workdir "$need" "${full[@]}"
        mkdir "$work/overlay"
        use_layers "$work/overlay"
        # pip, then the image's commands for the venv again, in one container
        status=0
        in_background in_overlay --then @image_commands_module@ pip "$@" || status=$?
        if [ "$status" -eq 0 ] || ! ran_out_of_space "$work"; then
            break
        fi
        full+=("$(workdir_place "$work")")
        echo "venv-pip: pip ran out of space in ${full[-1]}; trying the next place" >&2
        drop_layers
        clean_workdir "$work"
    done
    upper="$work/overlay/upper"
    why=
    if [ "$status" = @refused_status@ ]; then
        :  # (OVERLAY_PYTHON said why)
    elif [ "$status" -ne 0 ]; then
        stop_as_pip "$status" "the venv was not changed"
    elif venv_python_changed "$upper/$venv_bin"; then
        why="a package changed $venv/bin/python, python3 or python3.N: repacking the whole venv to keep its own Python"
    elif [ -n "$(find "$upper" -name $'*\n*' -print -quit)" ]; then
        why="a name with a newline, which the layer's lists cannot hold: repacking the whole venv"
    fi
    if [ "$status" -ne 0 ] || [ -n "$why" ]; then
        [ -z "$why" ] || echo "venv-pip: $why"
        drop_layers
        clean_workdir "$work"
        change_by_repacking "$@"
        return
    fi
    if [ -z "$(find "$upper" ! -type d -print -quit)" ]; then
        echo "venv-pip: nothing changed in $venv; $packed stays as it was."
        exit 0
    fi
    tree="$work/tree"
    mkdir "$tree"
    layer_whiteouts "$changes" >"$work/removed"
    in_background apply_layer "$changes" "$tree" || die "cannot unpack $changes; nothing was changed"
    if ! apply_upper "$upper" "$tree" "$work/removed" ||
        ! hide_below_new_directories "$tree" "$work/removed" "$squashfs"; then
        die "cannot put the change together in $work; nothing was changed"
    fi
    in_background pack_layer "$tree" "$work/removed" "$new_changes" "$squashfs" ||
        die "mksquashfs failed; nothing was changed"
    like "$changes" "$new_changes"
    limit=$(( $(stat -c %s "$squashfs") / 4 ))
    if [ "$(stat -c %s "$new_changes")" -le "$(( limit > (16 << 20) ? limit : (16 << 20) ))" ]; then
        # the SquashFS file stays as it is: the new generation shares it (a hard link, no copy)
        ln -- "$squashfs" "$new_squashfs" || die "cannot link $squashfs into $new; nothing was changed"
        make_new_current
        echo "venv-pip: $packed has the change as a layer; new jobs use it (no module reload needed), running ones" \
            "keep the old one."
        return
    fi
    # (a fresh work dir: the whole venv may not fit where the changes did)
    clean_workdir "$work"
    unpack_in_workdir "$new_changes"
    rm -f -- "$new_changes"
    pack_base "$tree"
    make_new_current
    echo "venv-pip: $packed has the change (merged with the earlier ones); new jobs use it (no module reload" \
        "needed), running ones keep the old one."
}

if [ "$form" = layers ] && [ -O "$squashfs" ] && [ -O "$changes" ]; then
    change_in_layers "$@"
else
    if [ "$form" = layers ]; then
        theirs=$changes
        [ -O "$squashfs" ] || theirs=$squashfs
        echo "venv-pip: $theirs belongs to $(stat -c %U "$theirs"): your change cannot be a layer on top of it;" \
            "repacking the whole venv"
    fi
    change_by_repacking "$@"
fi
