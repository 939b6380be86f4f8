
# venv-pip's decisions, pure: each says what to do from what was found, given as arguments (yes or no for a fact);
# nothing is read, run or written here (the tests call them on every case, tests/test_library.py).
# How a change of the venv of the form $1 is made, where you own its SquashFS file ($2) and its layer ($3): "layers"
# (pip on the packed layers with a writable one on top, the change a new layer) or "repack" (pip on the whole venv,
# unpacked, packed again: the only way for the form "file", or where the files are another member's)
change_method() {
    if [ "$1" = layers ] && [ "$2" = yes ] && [ "$3" = yes ]; then
        echo layers
    else
        echo repack
    fi
}
# What follows pip on the layers that ended with the status $1 (the overlay's refusal is $2), where pip changed the
# venv's own Python ($3), wrote or removed a name with a newline ($4), and changed anything at all ($5): "failed"
# (stop as pip did), "refused" (repack: the overlay said why), "python" (repack, to keep the venv's Python), "newline"
# (repack: a layer's lists cannot hold such a name), "unchanged" (nothing to do) or "layer" (put the change together)
layers_outcome() {
    if [ "$1" = "$2" ]; then
        echo refused
    elif [ "$1" -ne 0 ]; then
        echo failed
    elif [ "$3" = yes ]; then
        echo python
    elif [ "$4" = yes ]; then
        echo newline
    elif [ "$5" = no ]; then
        echo unchanged
    else
        echo layer
    fi
}
# Whether a new layer of $1 bytes on the SquashFS file of $2 bytes stays a layer ("layer": the new generation shares
# the SquashFS file) or both are merged into a new SquashFS file ("merge": the layer grew beyond a quarter of the
# SquashFS file, and 16 MiB)
layer_or_merge_choice() {
    local limit=$(( $2 / 4 ))
    (( limit > (16 << 20) )) || limit=$(( 16 << 20 ))
    if [ "$1" -le "$limit" ]; then
        echo layer
    else
        echo merge
    fi
}
