"""Where a command's time goes: each tool that it starts by name (found on PATH) is timed by a shim in front of it,
and the time of each kind of work is summed; what is left is the shell's own (bash, the module's Lua, forks).

A shim runs its tool as a child, not by exec, and appends one line to the log when the tool ends: the kind of work,
its start and its end. Tools that a timed tool starts itself (the runtime's mkfs.ext3, say) are not timed again:
the shim passes them straight on. The shims cost one bash start each (about 2 ms), which the shell's share carries.
"""
import shutil
import statistics
from pathlib import Path

# The kinds of work, and the tools (and the runtime's subcommands) of each
RUNTIMES = ('singularity', 'apptainer')
KINDS = {
    'container': 'container starts (the runtime, and what runs in it: pip, the image\'s commands)',
    'layer': 'the writable layer (an EXT3 image under a setuid runtime)',
    'export': 'the change read out of the EXT3 image',
    'pack': 'mksquashfs',
    'unpack': 'unsquashfs (the earlier layer, listings)',
    'flush': 'the flush (sync)',
}
TOOLS = {'mksquashfs': 'pack', 'unsquashfs': 'unpack', 'sync': 'flush', 'mkfs.ext3': 'layer', 'truncate': 'layer',
         'debugfs': 'export'}

SHIM = """#!/bin/bash
if [ -n "${BENCH_PROFILE_LOG:-}" ] && [ -z "${BENCH_PROFILE_INSIDE:-}" ]; then
    kind=%(kind)s
    case "%(tool)s:${1:-}" in
        *:overlay) kind=layer ;;
    esac
    start=$EPOCHREALTIME
    BENCH_PROFILE_INSIDE=1 %(real)s "$@"
    status=$?
    echo "$kind $start $EPOCHREALTIME" >>"$BENCH_PROFILE_LOG"
    exit "$status"
fi
exec %(real)s "$@"
"""


def make_shims(directory, path):
    """A shim in directory for each tool found on path (a PATH string); the directory, to put first on PATH."""
    directory.mkdir(parents=True, exist_ok=True)
    tools = dict(TOOLS, **dict.fromkeys(RUNTIMES, 'container'))
    for tool, kind in tools.items():
        real = shutil.which(tool, path=path)
        if real:
            shim = directory / tool
            shim.write_text(SHIM % {'kind': kind, 'tool': tool, 'real': real})
            shim.chmod(0o755)
    return directory


def read_log(log, total):
    """{kind: seconds} from a shims' log, with 'shell' what the total (seconds) leaves."""
    spent = dict.fromkeys(KINDS, 0.0)
    if Path(log).exists():
        for line in Path(log).read_text().splitlines():
            kind, start, end = line.split()
            spent[kind] += float(end) - float(start)
    spent['shell'] = total - sum(spent.values())
    return spent


def medians(profiles):
    """The median of each kind over several profiles ({kind: seconds} each)."""
    return {kind: statistics.median(p[kind] for p in profiles) for kind in profiles[0]}
