# make-squashfs, a function of the library:
# user-software/ packed into a new generation (COMMAND_HELPS)
make_squashfs() {
    no_arguments "$@"

    # (status 1: another run holds the lock; else the library said why not)
    begin_change "$root" now || case $? in 1) die "$(lock_refusal "$root")" ;; *) exit 1 ;; esac
    generation=$(current_generation "$root")
    remove_superseded "$root"
    [ -z "$generation" ] || die "$packed already exists (the packed venv); remove it (or run unmake-squashfs and" \
        "remove it) first"
    [ -d "$dir" ] || die "there is no $dir to pack"
    command -v mksquashfs >/dev/null || die "mksquashfs not found on PATH"

    # A new generation, made current only once it is whole (STATE): an interrupted run leaves no partial venv.
    new_change_generation "$root" || die "cannot make a directory in $root; nothing was changed"
    new=$change_new
    squashfs="$new/$squashfs_name"
    changes="$new/$changes_name"
    share_modes "$root" "$dir"
    echo "Packing $dir into $squashfs with $(squash_processors) processors..."
    # (user-software/ from the container's root: a layer, see LAYERS)
    in_background pack_tree "$dir" "$squashfs" -keep-as-directory || die "mksquashfs failed; nothing was changed"
    if ! empty_layer "$changes" || ! mark_empty_layer "$new"; then
        die "cannot write $changes; nothing was changed"
    fi
    # mksquashfs makes its output 0644 whatever the umask: the mode the umask gives (group-writable where the install
    # dir is, so that venv-pip keeps it so)
    chmod "$(umask_mode 666)" "$squashfs" "$changes"
    choose_packed_form
    commit_change "$root" "$form" || die "cannot make $packed name $new; nothing was changed"
    echo "Created $packed/$squashfs_name."
    echo "Reload the module (module load $module) to use it as /user-software (read-only)."
    echo "$dir can now be removed; unmake-squashfs recreates it from the SquashFS file."
}
# The form of the packed venv, decided here once for this generation and those venv-pip makes from it (STATE):
# layers where the runtime stacks them and gives a change a writable layer on top (a directory, or an EXT3 image
# under a setuid runtime: recorded), else one SquashFS file that the module binds (the image: the module's, else the
# install's, in the install dir)
# (into the global form, for the new generation $new with the files squashfs and changes)
choose_packed_form() {
    image="${!layers_image_var:-${!sif_variable:-$root/$sif_name}}"
    [ -f "$image" ] || die "the image $image is not there, to try the runtime with: load the module (module load" \
        "$module), which finds it, and run make-squashfs again"
    form='file'
    if ! why=$(layers_stack "$image" "$squashfs" "$changes"); then
        rm -f -- "$changes"
        if ! why_not_bound=$(squashfs_binds "$image" "$squashfs"); then
            echo "The container runtime neither stacks $packed/$squashfs_name as overlays nor binds it at" \
                "/user-software ($why_not_bound): the venv stays the directory $dir, which the module binds there."
            exit 0  # (the new generation goes)
        fi
        echo "venv-pip will repack the whole venv for each change: the container runtime does not stack" \
            "$packed/$squashfs_name and a layer on top as overlays here ($why)."
    else
        say_where_others_can_replace
        work=$(make_workdir "$root" $(( 64 << 20 ))) || exit 1  # (it said why; nothing was changed)
        use_workdir_tmp "$work"
        if ! kind=$(writable_layer_allowed "$image" "$squashfs" "$changes" "$work"); then
            rm -f -- "$changes"
            echo "venv-pip will repack the whole venv for each change: the container runtime stacks" \
                "$packed/$squashfs_name and a layer on top, but gives a change neither a writable directory nor an" \
                "EXT3 image on top of them ($kind)."
        elif ! record_writable_layer_kind "$new" "$kind"; then
            die "cannot write in $new; nothing was changed"
        else
            form=layers
        fi
        remove_own_tree "$work"
    fi
}
