# -h or --help as the first argument: what this command does and takes, before anything is started
case "${1:-}" in
    -h | --help)
        printf '%s\n' "${command_help[@]}"
        exit 0
        ;;
    *) ;;
esac
