# The venv's own Python (python, python3, python3.X: links to the image's):
# a package's command of such a name would replace it with a script that starts itself for ever. It is put back, and
# taken out of the package's RECORD (an uninstall must not remove it); the package is named.
venv_python_name() {  # whether $1 names one of the venv's own Pythons (python-tool, python3-config are commands)
    [[ $1 =~ ^python(3(\.[0-9]+)?)?$ ]]
}
venv_python_changed() {  # whether the directory $1 (what a change wrote into the venv's bin/) has one of them
    local path
    for path in "$1"/python*; do
        if { [ -e "$path" ] || [ -L "$path" ]; } && venv_python_name "${path##*/}"; then
            return 0
        fi
    done
    return 1
}
venv_python_links() {  # 'name target' of each link in the venv's bin/ ($1)
    local link
    for link in "$1"/python*; do
        if [ -L "$link" ] && venv_python_name "${link##*/}"; then
            echo "${link##*/} $(readlink "$link")"
        fi
    done
}
# (with FILES: in the install dir's venv, unpacked, a member of the project could have put links at fixed names)
keep_venv_python() {  # $1: the venv's bin/, $2: what venv_python_links said before pip ran
    local name target record package new status
    while read -r name target; do
        if [ -z "$name" ] || [ "$(readlink "$1/$name")" = "$target" ]; then
            continue
        fi
        new=$(new_link "$target" "$1" ".$name.")
        rename_into_place "$new" "$1/$name"
        for record in "$1"/../lib/python*/site-packages/*.dist-info/RECORD; do
            # (regular files only: in a project's venv, unpacked, a member could have put a FIFO there)
            if [ ! -f "$record" ] || [ -L "$record" ] || ! grep -qF -- "../../../bin/$name," "$record"; then
                continue
            fi
            package=
            if [ -f "${record%/RECORD}/METADATA" ] && [ ! -L "${record%/RECORD}/METADATA" ]; then
                package=$(sed -n '/^Name: */{s///p;q}' "${record%/RECORD}/METADATA")
            fi
            new=$(new_private_file "${record%/*}" .RECORD.)
            status=0
            grep -vF -- "../../../bin/$name," "$record" >"$new" || status=$?
            if [ "$status" -gt 1 ]; then  # (1: no line left; 2: the old one stays)
                rm -f -- "$new"
                continue
            fi
            chmod --reference="$record" -- "$new"
            rename_into_place "$new" "$record"
            echo "venv-pip: warning: the command $name of ${package:-${record%/RECORD}} was left out: it would" \
                "replace the virtual environment's own Python" >&2
        done
    done <<<"$2"
}