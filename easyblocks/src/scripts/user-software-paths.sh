# The install dir this script lives in (module loaded or not), with the venv
# unpacked in @us_dir@/ or packed in @us_squashfs@ (with the changes on top, see LAYERS).
root=$(readlink -f "${BASH_SOURCE[0]}")
root=${root%/*/*}
dir="$root/@us_dir@"
squashfs="$root/@us_squashfs@"