@readable_by_all@
@remove_leftovers@

@pip_changes_venv@

@bind_user_software@

@keep_venv_python@
@layers@
@workdir@

venv=@venv@
venv_bin="user-software${venv#/user-software}/bin"  # (in a tree unpacked from the SquashFS files)
pip() {
    exec "$runtime" @entry@ "$sif" @python@ -m pip "$@"
}
# After a change: the image's commands for the venv again (a package that pip removed may have hidden one of them)
image_commands() {
    exec "$runtime" @entry@ "$sif" @python@ -m @image_commands_module@
}
overlay_python=$(cat <<'PYTHON'
@overlay_python@
PYTHON
)
in_overlay() {  # [--then NEXT] MODULE ARGS...: modules of the venv's Python, on the writable overlay (OVERLAY_PYTHON)
    exec "$runtime" @entry@ "$sif" @python@ -c "$overlay_python" "$@"
}
# What the venv looks like: a change of pip's shows in it
venv_state() {
    find "$1" -printf '%P %y %s %T@ %m\n' | sort | cksum
}
like() {  # the new file $2 gets the mode and group of $1, for whoever could read it (a project's shared install)
    chmod --reference="$1" "$2"
    chgrp --reference="$1" "$2" 2>/dev/null || true
}
replace() {  # the new file $1 becomes $2
    like "$2" "$1"
    mv "$1" "$2"
}

# Commands that leave the venv alone (list, show, freeze, download, install --dry-run, ...) run straight against
# the venv as it is now, read-only if packed.
if ! pip_changes_venv "$@"; then
    if [ -f "$squashfs" ] && [ -f "$changes" ]; then
        use_layers
    elif [ -f "$squashfs" ]; then
        drop_layers
        use_for_user_software "$squashfs" image-src=/user-software,ro
    elif [ -d "$dir" ]; then
        drop_layers
        use_for_user_software "$dir"
    else
        die "there is neither $squashfs nor $dir: reinstall the module with eb"
    fi
    pip "$@"
fi
[ -z "$pip_user" ] || die "--user would install into ~/.local, which $venv does not see; leave --user out"

@lock_install_dir@
if ! take_lock -n; then
    echo "venv-pip: waiting for another venv-pip, make-squashfs, unmake-squashfs or eb reinstall on $root..." >&2
    take_lock
fi
remove_leftovers "$squashfs"
remove_leftovers "$changes"
remove_leftovers "$dir.venv-pip"

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

if [ ! -f "$squashfs" ]; then
    [ -d "$dir/venv" ] || die "there is neither $squashfs nor $dir/venv: reinstall the module with eb"
    drop_layers
    use_for_user_software "$dir"
    links=$(venv_python_links "$dir${venv#/user-software}/bin")
    status=0
    in_background pip "$@" || status=$?  # the lock is held until pip and image_commands end
    keep_venv_python "$dir${venv#/user-software}/bin" "$links"
    [ "$status" -eq 0 ] || exit "$status"
    in_background image_commands
    exit 0
fi
# After unmake-squashfs both are there: changing one of them would leave the other behind, silently
[ ! -e "$dir" ] || die "both $squashfs and $dir exist (after unmake-squashfs?): the module uses the SquashFS" \
    "file. Remove the one you no longer want (to use $dir: rm $squashfs; module load $module), then run venv-pip again"

work=
new="$squashfs.tmp.$(hostname).$$"
new_changes="$changes.tmp.$(hostname).$$"
trap 'clean_workdir "$work"; rm -f "$new" "$new_changes"' EXIT

# The venv with the layer $1 on top unpacked into $tree, in a fresh work dir on storage with room for it
unpack_in_workdir() {
    make_workdir "$(( $(unpacked_bytes "$squashfs" "$1") * 11 / 10 + (64 << 20) ))"
    tree="$work/tree"
    in_background unpack_venv "$tree" "$1" || die "cannot unpack $squashfs with $1; nothing was changed"
}

# pip on the whole venv, unpacked in $work, packed again into $squashfs (with $changes emptied)
change_by_repacking() {
    local tree before links status=0
    unpack_in_workdir "$changes"
    drop_layers
    use_for_user_software "$tree/user-software"
    before=$(venv_state "$tree")
    links=$(venv_python_links "$tree/$venv_bin")
    in_background pip "$@" || status=$?
    if [ "$status" -ne 0 ]; then
        echo "venv-pip: error: pip failed (exit code $status); $squashfs was not changed" >&2
        exit "$status"
    fi
    keep_venv_python "$tree/$venv_bin" "$links"
    in_background image_commands || die "the image's commands could not be given to $venv; $squashfs was not changed"
    if [ "$(venv_state "$tree")" = "$before" ]; then
        echo "venv-pip: nothing changed in $venv; $squashfs stays as it was."
        exit 0
    fi
    pack_base "$tree"
    echo "venv-pip: $squashfs has the change; new jobs use it (no module reload needed), running ones keep the old one."
}
pack_base() {  # the tree $1 becomes $squashfs; $changes, which it includes, becomes empty
    in_background mksquashfs "$1" "$new" "${squash_options[@]}" >/dev/null ||
        die "mksquashfs failed; $squashfs was not changed"
    # (grep reads the whole listing: with -q it would stop early, and pipefail would count unsquashfs's SIGPIPE)
    unsquashfs -l "$new" | grep -x "squashfs-root/$venv_bin/python" >/dev/null ||
        die "the new SquashFS file lacks $venv/bin/python; $squashfs was not changed"
    [ ! -f "$changes" ] || empty_layer "$new_changes" || die "cannot write $new_changes; $squashfs was not changed"
    like "$squashfs" "$new"
    [ ! -f "$changes" ] || like "$changes" "$new_changes"
    # The two renames go together: a signal between them would leave the old file without the changes it did not
    # hold. The layer first: a job starting in between gets the venv as of the last merge, not the new file with the
    # old changes on top again.
    trap '' HUP INT TERM
    [ ! -f "$changes" ] || mv "$new_changes" "$changes"
    mv "$new" "$squashfs"
    stop_on_signals
}

# pip on the layers, with a writable directory on top that gets the change; that becomes part of $changes. When
# $changes grows beyond a quarter of $squashfs (and 16 MiB), both are merged into a new $squashfs.
change_in_layers() {
    local upper tree limit why status=0
    make_workdir "$(( $(unpacked_bytes "$changes") * 2 + (64 << 20) ))"
    mkdir "$work/overlay"
    use_layers "$work/overlay"
    # pip, then the image's commands for the venv again, in one container
    in_background in_overlay --then @image_commands_module@ pip "$@" || status=$?
    upper="$work/overlay/upper"
    why=
    if [ "$status" = @refused_status@ ]; then
        :  # (OVERLAY_PYTHON said why)
    elif [ "$status" -ne 0 ]; then
        echo "venv-pip: error: pip failed (exit code $status); $squashfs and $changes were not changed" >&2
        exit "$status"
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
        echo "venv-pip: nothing changed in $venv; $squashfs stays as it was."
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
    limit=$(( $(stat -c %s "$squashfs") / 4 ))
    if [ "$(stat -c %s "$new_changes")" -le "$(( limit > (16 << 20) ? limit : (16 << 20) ))" ]; then
        replace "$new_changes" "$changes"
        echo "venv-pip: $changes has the change; new jobs use it (no module reload needed), running ones keep the" \
            "old one."
        return
    fi
    # (a fresh work dir: the whole venv may not fit where the changes did)
    clean_workdir "$work"
    unpack_in_workdir "$new_changes"
    pack_base "$tree"
    echo "venv-pip: $squashfs has the change (merged with the earlier ones); new jobs use it (no module reload" \
        "needed), running ones keep the old one."
}

if [ -f "$changes" ] && [ -O "$squashfs" ] && [ -O "$changes" ]; then
    change_in_layers "$@"
else
    if [ -f "$changes" ]; then
        theirs=$changes
        [ -O "$squashfs" ] || theirs=$squashfs
        echo "venv-pip: $theirs belongs to $(stat -c %U "$theirs"): your change cannot be a layer on top of it;" \
            "repacking the whole venv"
    fi
    change_by_repacking "$@"
fi
