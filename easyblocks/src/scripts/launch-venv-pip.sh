@readable_by_all@
@remove_leftovers@

@pip_changes_venv@

@bind_user_software@

@keep_venv_python@

venv=@venv@
pip() {
    exec "$runtime" @entry@ "$sif" @python@ -m pip "$@"
}
# After a change: the image's commands for the venv again (a package that pip removed may have hidden one of them)
image_commands() {
    exec "$runtime" @entry@ "$sif" @python@ -m @image_commands_module@
}
# What the venv looks like: a change of pip's shows in it
venv_state() {
    find "$1" -printf '%P %y %s %T@ %m\n' | sort | cksum
}

# Commands that leave the venv alone (list, show, freeze, download, install --dry-run, ...) run straight against
# the venv as it is now, read-only if packed.
if ! pip_changes_venv "$@"; then
    if [ -f "$squashfs" ]; then
        use_for_user_software "$squashfs" image-src=/,ro
    elif [ -d "$dir" ]; then
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
remove_leftovers "$dir.venv-pip"

# The long steps run in the background and are waited for: bash runs a trap only when the foreground command
# ends, and a SIGTERM from Slurm or a Ctrl-C must stop them at once. They keep the terminal as stdin (pip asks
# before it uninstalls).
child=
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
        kill "$child" 2>/dev/null || true
        wait "$child" 2>/dev/null || true
    fi
    exit "$1"
}
trap 'stop 129' HUP
trap 'stop 130' INT
trap 'stop 143' TERM

if [ ! -f "$squashfs" ]; then
    [ -d "$dir/venv" ] || die "there is neither $squashfs nor $dir/venv: reinstall the module with eb"
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

work="$dir.venv-pip.tmp.$(hostname).$$"
new="$squashfs.tmp.$(hostname).$$"
trap 'rm -rf "$work" "$new"' EXIT
in_background unsquashfs -no-progress -quiet -dest "$work" "$squashfs" >/dev/null ||
    die "cannot unpack $squashfs; nothing was changed"
use_for_user_software "$work"
before=$(venv_state "$work")
links=$(venv_python_links "$work${venv#/user-software}/bin")
status=0
in_background pip "$@" || status=$?
if [ "$status" -ne 0 ]; then
    echo "venv-pip: error: pip failed (exit code $status); $squashfs was not changed" >&2
    exit "$status"
fi
keep_venv_python "$work${venv#/user-software}/bin" "$links"
in_background image_commands || die "the image's commands could not be given to $venv; $squashfs was not changed"
if [ "$(venv_state "$work")" = "$before" ]; then
    echo "venv-pip: nothing changed in $venv; $squashfs stays as it was."
    exit 0
fi
cpus="${SLURM_CPUS_PER_TASK:-$(nproc)}"
in_background mksquashfs "$work" "$new" -noappend -no-progress -quiet -processors "$cpus" >/dev/null ||
    die "mksquashfs failed; $squashfs was not changed"
# (grep reads the whole listing: with -q it would stop early, and pipefail would count unsquashfs's SIGPIPE)
unsquashfs -l "$new" | grep -x "squashfs-root${venv#/user-software}/bin/python" >/dev/null ||
    die "the new SquashFS file lacks $venv/bin/python; $squashfs was not changed"
# Whoever could read the old file can read the new one (a project's shared install)
chmod --reference="$squashfs" "$new"
chgrp --reference="$squashfs" "$new" 2>/dev/null || true
mv "$new" "$squashfs"
echo "venv-pip: $squashfs has the change; new jobs use it (no module reload needed), running ones keep the old one."