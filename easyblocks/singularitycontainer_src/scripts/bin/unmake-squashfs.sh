# unmake-squashfs, a function of the library:
# the packed venv unpacked into user-software/ (COMMAND_HELPS)
unmake_squashfs() {
    no_arguments "$@"

    # (status 1: another run holds the lock; else the library said why not)
    begin_change "$root" now || case $? in 1) die "$(lock_refusal "$root")" ;; *) exit 1 ;; esac
    generation=$(current_generation "$root")
    generation_whole "$generation" || die "$(damaged_state "$root" "$generation")"
    remove_superseded "$root"
    [ -n "$generation" ] || die "there is no $packed (the packed venv) to unpack"
    if [ -e "$dir" ] || [ -L "$dir" ]; then
        die "$dir already exists; move it away first, it is not overwritten"
    fi
    command -v unsquashfs >/dev/null || die "unsquashfs not found on PATH"

    # (into a new generation, never made current, but with the record of one: if this run is killed, a later change
    # removes it, see STATE)
    new_change_generation "$root" || die "cannot make a directory in $root; nothing was changed"
    tmp=$change_new
    in_background unpack_venv "$tmp/unpacked" "$generation/$squashfs_name" "$generation/$changes_name" ||
        die "unsquashfs failed; nothing was changed"
    # (the modes of the install's row, whatever umask packed the SquashFS file)
    share_modes "$root" "$tmp/unpacked"
    # (on disk before it has its name: a crash leaves no $dir with empty files)
    sync -f -- "$tmp/unpacked" || die "cannot write the unpacked venv to disk; nothing was changed"
    mv -T -- "$tmp/unpacked/${dir##*/}" "$dir" || die "cannot move the unpacked venv to $dir; nothing was changed"
    sync -- "$root" || true
    abort_change "$root"  # (what is left of the new generation: the venv is $dir now)
    echo "Unpacked $generation/$squashfs_name into $dir."
    [ ! -f "$generation/$changes_name" ] || echo "It includes the changes in $generation/$changes_name."
    echo "To install into it, remove the link $packed and reload the module (module load $module):"
    echo "as long as the link exists, the packed venv is what the container sees as /user-software."
}
