bad_usage() {
    die "$* (usage: $jupyter_usage)"
}
# jupyter-container-kernel: its arguments (into the globals action, kernel_name, display_name, kernels_dir,
# kernels_prefix, force, connection_file), all checked before anything is started or written
jupyter_kernel_arguments() {
    action=${1:-}
    [ "$#" -eq 0 ] || shift
    kernel_name=$kernel_name_default
    display_name=$display_name_default
    kernels_dir=
    kernels_prefix=
    force=
    connection_file=
    case "$action" in
        install | remove | list) ;;
        start) ;;  # what kernel.json runs
        -h | --help | help) print_help ;;
        '') bad_usage "no command given" ;;
        *) bad_usage "unknown command '$action'" ;;
    esac
    if [ "$action" = start ]; then
        jupyter_kernel_start_arguments "$@"
    else
        jupyter_kernel_options "$@"
    fi
    # Jupyter's own rule for kernel names (it lower-cases what it is given: a name is taken as written here)
    [[ $kernel_name =~ ^[a-z0-9._-]+$ ]] ||
        bad_usage "kernel name '$kernel_name' may only have lower-case letters, digits, '.', '_' and '-'"
    case "$kernel_name" in
        . | ..) bad_usage "kernel name '$kernel_name' is a directory's own name, not a kernel's: give another --name" ;;
        *) ;;
    esac
    if [ -z "$display_name" ] || [[ $display_name == *[[:cntrl:]]* ]]; then
        bad_usage "the display name must be one line of text, not empty"
    fi
    kernels_dir=${kernels_dir:-${JUPYTER_DATA_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/jupyter}/kernels}
}
# The options of install, remove and list ($@): into the globals
jupyter_kernel_options() {
    while [ "$#" -gt 0 ] && [ "$action" != start ]; do
        option=$1
        case "$option" in
            --name | --display-name | --prefix)
                [ "$#" -ge 2 ] || bad_usage "$option needs a value"
                value=$2
                shift
                ;;
            --name=* | --display-name=* | --prefix=*)
                value=${option#*=}
                option=${option%%=*}
                ;;
        esac
        case "$action $option" in
            'install --name' | 'remove --name') kernel_name=$value ;;
            'install --display-name') display_name=$value ;;
            'install --prefix' | 'remove --prefix')
                [ -z "$kernels_dir" ] || bad_usage "give one of --user and --prefix"
                [ -n "$value" ] || bad_usage "--prefix needs a directory"
                case "$value" in /*) ;; *) value=$PWD/$value ;; esac
                kernels_dir=$value/share/jupyter/kernels
                kernels_prefix=$value
                ;;
            'install --user' | 'remove --user')
                [ -z "$kernels_dir" ] || bad_usage "give one of --user and --prefix"
                kernels_dir=${JUPYTER_DATA_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/jupyter}/kernels
                ;;
            'install --force') force=yes ;;
            *' -h' | *' --help') print_help ;;
            *) bad_usage "'$option' is not an option of jupyter-container-kernel $action" ;;
        esac
        shift
    done
}
# The arguments of start ($@: -f CONNECTION_FILE, what kernel.json runs), and the module loaded where Jupyter started
# the kernel without it
jupyter_kernel_start_arguments() {
    if [ "$#" -ne 2 ] || [ "$1" != -f ]; then
        die "usage: jupyter-container-kernel start -f CONNECTION_FILE (what kernel.json runs)"
    fi
    connection_file=$2
    case "$connection_file" in /*) ;; *) connection_file=$PWD/$connection_file ;; esac
    # Jupyter may start the kernel without the module loaded (a server of LUMI's web interface, or in a job): the
    # kernel loads it, so that it gets the binds, overlays, environment and caches that python gets after the load
    case ":${LOADEDMODULES:-}:" in
        *":$module:"*) ;;
        *)
            lmod=${LMOD_CMD:-$lmod_cmd}
            [ -x "$lmod" ] || die "Lmod is not found (LMOD_CMD is not set, and $lmod is missing): start Jupyter" \
                "with 'module load $module' done, or with Lmod initialised"
            set +eu  # what Lmod writes is for interactive shells; the check below says if it failed
            eval "$("$lmod" bash use "$modules_dir")"
            eval "$("$lmod" bash load "$module")"
            set -eu
            case ":${LOADEDMODULES:-}:" in
                *":$module:"*) ;;
                *) die "'module load $module' failed (Lmod said why, above): the kernel cannot start" ;;
            esac
            ;;
    esac
}
