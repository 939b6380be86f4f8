##
# This file is an EasyBuild easyblock for LUMI's container modules.
#
# It is self-contained on purpose: LUMI installs single easyblock files through
# EASYBUILD_INCLUDE_EASYBLOCKS, and the Python running EasyBuild there only has
# EasyBuild and the standard library. It runs unchanged on EasyBuild 4.9.x and 5.x.
##
"""
EasyBuild support for installing a Singularity/Apptainer container image (.sif) as a module,
with wrapper commands, run scripts and a Python virtual environment inside the container.

The module sets SIF/SIF<NAME>, CONTAINERROOT, RUNSCRIPTS/RUNSCRIPTS<NAME>, SINGULARITY_BINDPATH and
SINGULARITYENV_* so that `singularity exec $SIF ...` and the wrappers in bin/ just work.
"""
import json
import os
import re
import shlex
import shutil
import struct
import time

from easybuild.framework.easyblock import EasyBlock
from easybuild.framework.easyconfig import CUSTOM
from easybuild.tools.build_log import EasyBuildError, print_msg, print_warning
from easybuild.tools.filetools import adjust_permissions, convert_name, copy_file, mkdir, remove_dir, write_file

try:
    from easybuild.tools.run import run_shell_cmd  # EasyBuild 5.x
    run_cmd = None
except ImportError:
    from easybuild.tools.run import run_cmd  # EasyBuild 4.x
    run_shell_cmd = None


LUMI_BIND_PATHS = ['/var/spool/slurmd', '/opt/cray', '/usr/lib64/libcxi.so.1', '/pfs', '/scratch', '/projappl',
                   '/project', '/flash', '/appl']
LUMI_CENTRAL_SIF_SUBDIR = 'easybuild-sif-images'
LUMI_CENTRAL_SIF_DEFAULT = '/appl/local/containers/easybuild-sif-images'

SIF_MAGIC = b'SIF_MAGIC'
SIF_MAGIC_OFFSET = 32
SIF_HEADER_SIZE = 128
# dataoff and datalen (little-endian int64) in the SIF global header: the file must reach dataoff + datalen
SIF_DATA_FIELDS_OFFSET = 112
# dtotal, descoff and desclen: the number of data object descriptors, where they are and how long
SIF_DESCRIPTOR_FIELDS_OFFSET = 88
# In a descriptor: datatype (int32), used (bool), 3 ids (uint32) and the object's offset (int64); at 201 the
# partition's fstype and parttype (int32 each). A root file system is datatype 0x4004, SquashFS (1), of type
# PrimSys (2) or System (1).
SIF_DESCRIPTOR_FORMAT = '<iBIIIq'
SIF_PARTITION_EXTRA_OFFSET = 201
SIF_PARTITION_DATATYPE, SIF_FS_SQUASHFS, SIF_PARTTYPES_SYSTEM = 0x4004, 1, (2, 1)

USER_SOFTWARE = 'user-software'
USER_SOFTWARE_SQUASHFS = 'user-software.squashfs'
CONTAINER_USER_SOFTWARE = '/user-software'
CONTAINER_RUNSCRIPTS = '/runscripts'

# lines of a failing command's output quoted in the error message
ERROR_TAIL_LINES = 25


def sif_problem(path):
    """Return None if path looks like a complete SIF image, else a description of what it is instead."""
    try:
        size = os.path.getsize(path)
        with open(path, 'rb') as handle:
            head = handle.read(SIF_HEADER_SIZE)
    except OSError as err:
        return "it cannot be read (%s)" % err

    if head[SIF_MAGIC_OFFSET:SIF_MAGIC_OFFSET + len(SIF_MAGIC)] == SIF_MAGIC:
        if len(head) < SIF_HEADER_SIZE:
            return "it is truncated: only %d bytes, less than a SIF header" % size
        dataoff, datalen = struct.unpack_from('<qq', head, SIF_DATA_FIELDS_OFFSET)
        if size < dataoff + datalen:
            return ("it is truncated: %d bytes, but its SIF header says the data ends at byte %d "
                    "(an interrupted download or copy?)" % (size, dataoff + datalen))
        return None

    text = head.decode('ascii', errors='replace')
    if text.startswith('version https://git-lfs'):
        return "it is a Git LFS pointer file, not the image (fetch the real file, e.g. with 'git lfs pull')"
    if '<html' in text.lower() or '<!doctype' in text.lower():
        return "it is an HTML page, not an image (an error page saved by a failed download?)"
    if size < SIF_HEADER_SIZE:
        return "it is only %d bytes long, too short for a SIF image (truncated or empty?)" % size
    return "there is no %s at byte %d (found %r), so it is not a SIF image" % (
        SIF_MAGIC.decode(), SIF_MAGIC_OFFSET, head[SIF_MAGIC_OFFSET:SIF_MAGIC_OFFSET + len(SIF_MAGIC)])


def sif_partition_offset(path):
    """Byte offset of the image's root file system (its SquashFS system partition) in a SIF file."""
    with open(path, 'rb') as handle:
        head = handle.read(SIF_HEADER_SIZE)
        if len(head) < SIF_HEADER_SIZE or head[SIF_MAGIC_OFFSET:SIF_MAGIC_OFFSET + len(SIF_MAGIC)] != SIF_MAGIC:
            raise ValueError("%s is not a SIF image" % path)
        total, descoff, desclen = struct.unpack_from('<qqq', head, SIF_DESCRIPTOR_FIELDS_OFFSET)
        handle.seek(descoff)
        descriptors = handle.read(desclen)
    size = desclen // total if total else 0
    partitions = []
    for start in range(0, total * size, size):
        datatype, used, _, _, _, offset = struct.unpack_from(SIF_DESCRIPTOR_FORMAT, descriptors, start)
        fstype, parttype = struct.unpack_from('<ii', descriptors, start + SIF_PARTITION_EXTRA_OFFSET)
        if used and datatype == SIF_PARTITION_DATATYPE and fstype == SIF_FS_SQUASHFS and \
                parttype in SIF_PARTTYPES_SYSTEM:
            partitions.append((SIF_PARTTYPES_SYSTEM.index(parttype), offset))
    if not partitions:
        raise ValueError("%s has no SquashFS system partition" % path)
    return min(partitions)[1]


def requirement_names(requirement_lines):
    """Distribution names of the requirement lines (options, URLs, comments and blank lines have none)."""
    names = []
    for line in requirement_lines:
        line = re.sub(r'(^|\s)#.*$', '', line).strip()
        match = re.match(r'^([A-Za-z0-9][A-Za-z0-9._-]*)', line)
        if line and not line.startswith('-') and match:
            names.append(match.group(1))
    return names


def lua_str(value):
    """Quote a string as a Lua string literal."""
    escaped = value.replace('\\', '\\\\').replace('"', '\\"').replace('\n', '\\n')
    return '"%s"' % escaped


def tcl_str(value):
    """Quote a string as a Tcl word that is taken literally."""
    return '"%s"' % re.sub(r'([\\"$\[\]{}])', r'\\\1', value).replace('\n', '\\n')


# The module's load-time logic, one template per module syntax. The bind list is set with pushenv on
# top of the user's own value: Lmod's path functions would drop the '/' of 'image-src=/', and pushenv
# restores the user's value exactly on unload.
LUA_MODULE_LOGIC = """
-- SingularityContainer: the image, the bind list and the container environment
local installdir = %(installdir)s
local sif_name = %(sif_name)s
local sif = pathJoin(installdir, sif_name)
if not isFile(sif) then
    local central_dir = %(central_sif_dir)s
    if central_dir == "" then
        local repo_root = os.getenv("LUMI_CONTAINER_REPOSITORY_ROOT") or ""
        if repo_root ~= "" then
            central_dir = pathJoin(repo_root, %(central_subdir)s)
        else
            central_dir = %(central_default)s
        end
    end
    local central_sif = pathJoin(central_dir, sif_name)
    if isFile(central_sif) then
        sif = central_sif
    elseif mode() == "load" then
        LmodError(%(mod_name)s .. ": the container image " .. sif_name .. " is neither in " .. installdir ..
                  " nor in " .. central_dir .. ". Reinstall the module with eb, or restore the image.")
    end
end
setenv("SIF", sif)
setenv(%(sif_var)s, sif)
setenv("CONTAINERROOT", installdir)
setenv("RUNSCRIPTS", pathJoin(installdir, "runscripts"))
setenv(%(runscripts_var)s, pathJoin(installdir, "runscripts"))

local binds = %(binds)s
if isFile(pathJoin(installdir, %(us_squashfs)s)) then
    binds = binds .. "," .. pathJoin(installdir, %(us_squashfs)s) .. ":%(c_us)s:image-src=/"
elseif isDir(pathJoin(installdir, %(us_dir)s)) then
    binds = binds .. "," .. pathJoin(installdir, %(us_dir)s) .. ":%(c_us)s"
end
-- On a reload, leave out what this module added before, so that it is not added twice.
local user_binds = os.getenv("SINGULARITY_BINDPATH") or ""
for _, added_before in ipairs({os.getenv(%(binds_var)s) or "", binds}) do
    if added_before ~= "" and user_binds == added_before then
        user_binds = ""
    elseif added_before ~= "" and user_binds:sub(-#added_before - 1) == "," .. added_before then
        user_binds = user_binds:sub(1, -#added_before - 2)
    end
end
setenv(%(binds_var)s, binds)
if user_binds ~= "" then
    binds = user_binds .. "," .. binds
end
pushenv("SINGULARITY_BINDPATH", binds)
%(container_env)s
"""

TCL_MODULE_LOGIC = """
# SingularityContainer: the image, the bind list and the container environment
# pushenv that also gives the old value back on unload under Lmod 8.6. Lmod runs Tcl modulefiles in its own
# process, and its Tcl pushenv writes the new value into the environment before Lmod saves the old value
# (TACC/Lmod#584), so the unload would keep the new value. Putting the old value back right after pushenv
# lets Lmod save the right one. pushenv's stack is all that sets a value on unload in Lmod 8.6 (setenv
# unsets, unsetenv does nothing). Only under Lmod: Environment Modules keeps its own stack and exports ::env.
proc singularitycontainer_pushenv {var val} {
    set had_value [info exists ::env($var)]
    if { $had_value } {
        set old_value $::env($var)
    }
    pushenv $var $val
    if { [info exists ::env(LMOD_VERSION_MAJOR)] } {
        if { $had_value } {
            set ::env($var) $old_value
        } elseif { [info exists ::env($var)] } {
            unset ::env($var)
        }
    }
}
set installdir %(installdir)s
set sif_name %(sif_name)s
set sif [file join $installdir $sif_name]
if { ![file isfile $sif] } {
    set central_dir %(central_sif_dir)s
    if { $central_dir eq "" } {
        if { [info exists ::env(LUMI_CONTAINER_REPOSITORY_ROOT)] && $::env(LUMI_CONTAINER_REPOSITORY_ROOT) ne "" } {
            set central_dir [file join $::env(LUMI_CONTAINER_REPOSITORY_ROOT) %(central_subdir)s]
        } else {
            set central_dir %(central_default)s
        }
    }
    set central_sif [file join $central_dir $sif_name]
    if { [file isfile $central_sif] } {
        set sif $central_sif
    } elseif { [module-info mode load] } {
        error "%(mod_name_bare)s: the container image $sif_name is neither in $installdir nor in $central_dir.\
 Reinstall the module with eb, or restore the image."
    }
}
setenv SIF $sif
setenv %(sif_var)s $sif
setenv CONTAINERROOT $installdir
setenv RUNSCRIPTS [file join $installdir runscripts]
setenv %(runscripts_var)s [file join $installdir runscripts]

set binds %(binds)s
if { [file isfile [file join $installdir %(us_squashfs)s]] } {
    append binds ",[file join $installdir %(us_squashfs)s]:%(c_us)s:image-src=/"
} elseif { [file isdirectory [file join $installdir %(us_dir)s]] } {
    append binds ",[file join $installdir %(us_dir)s]:%(c_us)s"
}
# On a reload, leave out what this module added before, so that it is not added twice.
set user_binds [expr {[info exists ::env(SINGULARITY_BINDPATH)] ? $::env(SINGULARITY_BINDPATH) : ""}]
foreach added_before [list [expr {[info exists ::env(%(binds_var_bare)s)] ? $::env(%(binds_var_bare)s) : ""}] $binds] {
    set n [string length $added_before]
    if { $n > 0 && $user_binds eq $added_before } {
        set user_binds ""
    } elseif { $n > 0 && [string range $user_binds end-$n end] eq ",$added_before" } {
        set user_binds [string range $user_binds 0 end-[expr {$n + 1}]]
    }
}
setenv %(binds_var)s $binds
if { $user_binds ne "" } {
    set binds "$user_binds,$binds"
}
# As in Lua, unload restores the value from before the load: changes made meanwhile are not kept.
singularitycontainer_pushenv SINGULARITY_BINDPATH $binds
%(container_env)s
"""

# Shared start of the scripts in bin/ that start the container: refuse to nest containers, and find
# the module's image and the runtime.
SCRIPT_HEADER = """#!/bin/bash
# %(script)s: %(purpose)s
# Written by EasyBuild's SingularityContainer easyblock for module %(mod_name)s.
set -euo pipefail

die() {
    echo "%(script)s: error: $*" >&2
    exit 1
}
"""

CONTAINER_PREAMBLE = """
if [ -n "${SINGULARITY_CONTAINER:-}${APPTAINER_CONTAINER:-}" ] || [ -d /.singularity.d/env ]; then
    die "already running inside a container; this command starts the container itself and would nest it"
fi
sif="${%(sif_var)s:-}"
[ -n "$sif" ] || die "module %(mod_name)s is not loaded; run 'module load %(mod_name)s' first"
[ -f "$sif" ] || die "container image $sif not found;" \
    "reload the module (module load %(mod_name)s) or reinstall it with eb"
runtime=$(command -v singularity || command -v apptainer) || die "neither singularity nor apptainer is on PATH"
"""

WRAPPER_DIRECT = """
exec "$runtime" exec "$sif" %(command)s "$@"
"""

# Images that need an initialisation (e.g. conda activation) run the command through init-conda-venv.
WRAPPER_WITH_INIT = """
exec "$runtime" exec "$sif" /bin/bash -c 'source %(c_runscripts)s/init-conda-venv && exec "$@"' %(command)s \\
    %(command)s "$@"
"""

START_SHELL_BODY = """
# With no arguments an interactive shell, else bash with these arguments (e.g. -c 'pip list'); either way
# init-conda-venv has prepared the image's environment and activated the virtual environment first.
if [ "$#" -eq 0 ]; then
    exec "$runtime" exec "$sif" /bin/bash --rcfile %(c_runscripts)s/init-conda-venv -i
fi
SINGULARITYENV_BASH_ENV=%(c_runscripts)s/init-conda-venv exec "$runtime" exec "$sif" /bin/bash "$@"
"""

LIST_PACKAGES_BODY = """
exec "$runtime" exec "$sif" %(c_runscripts)s/list-packages "$@"
"""

# make-squashfs and unmake-squashfs work on the install dir they live in, module loaded or not.
INSTALLDIR_PREAMBLE = """
root=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
dir="$root/%(us_dir)s"
squashfs="$root/%(us_squashfs)s"
"""

MAKE_SQUASHFS_BODY = """
[ ! -e "$squashfs" ] || die "$squashfs already exists; remove it (or run unmake-squashfs and remove it) first"
[ -d "$dir" ] || die "there is no $dir to pack"
command -v mksquashfs >/dev/null || die "mksquashfs not found on PATH"

cpus="${SLURM_CPUS_PER_TASK:-$(nproc)}"
# Written under a temporary name and renamed only on success: an interrupted run leaves no partial image.
tmp="$squashfs.tmp.$$"
trap 'rm -f "$tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
echo "Packing $dir into $squashfs with $cpus processors..."
mksquashfs "$dir" "$tmp" -noappend -no-progress -quiet -processors "$cpus" ||
    die "mksquashfs failed; nothing was changed"
mv "$tmp" "$squashfs"
trap - EXIT
echo "Created $squashfs."
echo "Reload the module (module load %(mod_name)s) to use it as %(c_us)s (read-only)."
echo "$dir can now be removed; unmake-squashfs recreates it from the SquashFS file."
"""

UNMAKE_SQUASHFS_BODY = """
[ -f "$squashfs" ] || die "there is no $squashfs to unpack"
[ ! -e "$dir" ] || die "$dir already exists; move it away first, it is not overwritten"
command -v unsquashfs >/dev/null || die "unsquashfs not found on PATH"

tmp="$dir.tmp.$$"
trap 'rm -rf "$tmp"' EXIT
unsquashfs -no-progress -quiet -dest "$tmp" "$squashfs" >/dev/null || die "unsquashfs failed; nothing was changed"
mv "$tmp" "$dir"
trap - EXIT
echo "Unpacked $squashfs into $dir."
echo "To install into it, remove $squashfs and reload the module (module load %(mod_name)s):"
echo "as long as the SquashFS file exists, it is what the container sees as %(c_us)s."
"""

RUNSCRIPT_INIT = """# shellcheck shell=bash
# init-conda-venv: source this in the container to prepare the image's own Python environment and
# activate the virtual environment %(c_venv)s.
# Written by EasyBuild's SingularityContainer easyblock for module %(mod_name)s.
# No 'set -e' here: this file is sourced into interactive shells.

# start-shell passes this file as BASH_ENV; nested bash processes need not read it again.
unset BASH_ENV

if ! { %(container_init)s
}; then
    echo "init-conda-venv: error: the container initialisation failed: %(container_init_msg)s" >&2
    # shellcheck disable=SC2317  # exit is reached when the file is run instead of sourced
    return 1 2>/dev/null || exit 1
fi
if [ -f %(c_venv)s/bin/activate ]; then
    # shellcheck disable=SC1091
    source %(c_venv)s/bin/activate || { echo "init-conda-venv: error: cannot activate %(c_venv)s" >&2; return 1; }
fi
"""

RUNSCRIPT_PYTHON_SIMPLE = """#!/bin/bash
# conda-python-simple: run python in the container, with the image's environment and the virtual
# environment ready; all arguments go to python. For single-task runs.
# Written by EasyBuild's SingularityContainer easyblock for module %(mod_name)s.
# shellcheck disable=SC1091
source %(c_runscripts)s/init-conda-venv || exit 1
exec python "$@"
"""

RUNSCRIPT_LIST_PACKAGES = """#!/bin/bash
# list-packages: list the Python packages visible in the container (image and virtual environment).
# Written by EasyBuild's SingularityContainer easyblock for module %(mod_name)s.
# shellcheck disable=SC1091
source %(c_runscripts)s/init-conda-venv || exit 1
exec python -m pip list "$@"
"""

RUNSCRIPT_PYTHON_DISTRIBUTED = """#!/bin/bash
# conda-python-distributed: run python as one rank of a torch.distributed job, one rank per Slurm task:
#   srun singularity exec $SIF conda-python-distributed -u train.py
# Written by EasyBuild's SingularityContainer easyblock for module %(mod_name)s.
#
# MASTER_PORT, unless set by the user, is 10000 + (SLURM_JOB_ID * 16 + SLURM_STEP_ID) %% 22000: in
# 10000-31999 (below Linux's ephemeral ports), distinct for concurrent jobs and job steps on a node
# unless their job ids are a multiple of 1375 apart or a job runs more than 16 steps at once.

if [ -z "${SLURM_PROCID:-}" ]; then
    echo "conda-python-distributed: error: not running as a Slurm task (SLURM_PROCID is not set)." >&2
    echo "Start it with srun, e.g.: srun singularity exec \\$SIF conda-python-distributed -u train.py" >&2
    exit 1
fi
# shellcheck disable=SC1091
source %(c_runscripts)s/init-conda-venv || exit 1
set -euo pipefail

# The number of tasks on this node, from Slurm's compressed list such as '2(x3),1'.
tasks_on_this_node() {
    local list="${SLURM_STEP_TASKS_PER_NODE:-${SLURM_TASKS_PER_NODE:-1}}" node="${SLURM_NODEID:-0}" item count repeat
    local IFS=,
    for item in $list; do
        count="${item%%(*}"
        repeat=1
        if [[ "$item" == *"(x"* ]]; then
            repeat="${item#*(x}"
            repeat="${repeat%%)}"
        fi
        if [ "$node" -lt "$repeat" ]; then
            echo "$count"
            return
        fi
        node=$((node - repeat))
    done
    echo 1
}

if [ "${SLURM_LOCALID:-0}" -eq 0 ] && command -v rocm-smi >/dev/null 2>&1; then
    rocm-smi || echo "conda-python-distributed: warning: rocm-smi failed" >&2
fi

# MIOpen's caches cannot live on Lustre (no file locking): one directory per user, job and node in /tmp.
# Every rank creates it (mkdir -p is safe when racing) and none deletes it, as other ranks may use it.
export MIOPEN_USER_DB_PATH="${MIOPEN_USER_DB_PATH:-/tmp/$(id -un)-miopen-cache-${SLURM_JOB_ID:-0}-${SLURM_NODEID:-0}}"
export MIOPEN_CUSTOM_CACHE_DIR="${MIOPEN_CUSTOM_CACHE_DIR:-$MIOPEN_USER_DB_PATH}"
mkdir -p "$MIOPEN_USER_DB_PATH" "$MIOPEN_CUSTOM_CACHE_DIR"

# RCCL must use the Slingshot interfaces, not the management network.
export NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-hsn}"
export NCCL_NET_GDR_LEVEL="${NCCL_NET_GDR_LEVEL:-3}"

# One GPU per rank: the local rank's GPU, or the local rank's entry if several GPUs are visible.
if [ -z "${ROCR_VISIBLE_DEVICES:-}" ]; then
    export ROCR_VISIBLE_DEVICES="$SLURM_LOCALID"
elif [[ "$ROCR_VISIBLE_DEVICES" == *,* ]]; then
    IFS=, read -r -a gpus <<< "$ROCR_VISIBLE_DEVICES"
    export ROCR_VISIBLE_DEVICES="${gpus[$((SLURM_LOCALID %% ${#gpus[@]}))]}"
fi

export MASTER_ADDR="${MASTER_ADDR:-$(%(c_runscripts)s/get-master)}"
export MASTER_PORT="${MASTER_PORT:-$((10000 + (${SLURM_JOB_ID:-0} * 16 + ${SLURM_STEP_ID:-0}) %% 22000))}"
export WORLD_SIZE="${SLURM_NTASKS:-${SLURM_NPROCS:-1}}"
export RANK="$SLURM_PROCID"
export LOCAL_RANK="${SLURM_LOCALID:-0}"
export LOCAL_WORLD_SIZE="${SLURM_NTASKS_PER_NODE:-$(tasks_on_this_node)}"

affinity=$(grep -s Cpus_allowed_list /proc/self/status | cut -f2)
echo "Rank $RANK on $(hostname): CPUs ${affinity:-unknown}, GPU $ROCR_VISIBLE_DEVICES," \\
     "master $MASTER_ADDR:$MASTER_PORT"

exec python "$@"
"""

RUNSCRIPT_GET_MASTER = '''#!/usr/bin/env python3
"""get-master: print the first host of a Slurm host list, the master of a torch.distributed job.

Usage: get-master [HOSTLIST]   (default: $SLURM_JOB_NODELIST, else $SLURM_NODELIST)
Written by EasyBuild's SingularityContainer easyblock; scontrol is not available in the container,
so the host list syntax is parsed here: nid[005000-005003,005007], rack[1-2]-node[01-04], nid[005000]-ib.
"""
import os
import re
import sys


def first_host(hostlist):
    """The first host name of a Slurm host list expression."""
    depth = 0
    for pos, char in enumerate(hostlist):
        depth += {'[': 1, ']': -1}.get(char, 0)
        if depth < 0 or depth > 1:
            raise ValueError("unbalanced brackets")
        if char == ',' and depth == 0:
            hostlist = hostlist[:pos]
            break
    if depth != 0:
        raise ValueError("unbalanced brackets")

    def first_of_range(match):
        first = match.group(1).split(',')[0].split('-')[0]
        if not re.fullmatch(r'[0-9]+', first):
            raise ValueError("'%s' is not a number range" % match.group(1))
        return first

    host = re.sub(r'\\[([^\\]]*)\\]', first_of_range, hostlist.strip())
    if not host or '[' in host or ']' in host:
        raise ValueError("no host name")
    return host


def main(argv):
    hostlist = argv[1] if len(argv) > 1 else os.environ.get('SLURM_JOB_NODELIST') or os.environ.get('SLURM_NODELIST')
    if not hostlist:
        sys.stderr.write("get-master: error: no host list: pass one as argument or run in a Slurm job "
                         "(SLURM_JOB_NODELIST and SLURM_NODELIST are not set)\\n")
        return 1
    try:
        print(first_host(hostlist))
    except ValueError as err:
        sys.stderr.write("get-master: error: cannot parse host list '%s': %s\\n" % (hostlist, err))
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
'''

# Create the venv in the container. An image with pip serves the venv through the system site packages
# (add_pip_scripts): no copy of pip, which is about 1000 files and seconds of install time on Lustre.
CREATE_VENV = """\
if python -c 'import pip' >/dev/null 2>&1; then
    python -m venv --system-site-packages --without-pip %(venv)s
else
    python -m venv --system-site-packages %(venv)s
fi
"""

# bin/pip* of a venv without its own pip: the image's pip, run by the venv's Python so packages go into the venv.
VENV_PIP_SCRIPT = """#!/bin/sh
# The image's pip, run by this virtual environment's Python.
exec "$(dirname "$0")/python" -m pip "$@"
"""

# Run by the sanity check in the container, with the checks as JSON in argv[1]. No single quotes in it,
# so that it stays readable in the log once shell-quoted.
CONTAINER_CHECK_SCRIPT = """
import importlib.metadata, json, subprocess, sys
checks = json.loads(sys.argv[1])
errors = []
version = "%d.%d" % sys.version_info[:2]
if checks["python"] and version != checks["python"]:
    errors.append("Python %s in the container, expected %s" % (version, checks["python"]))
wanted = list(checks["components"].items()) + [(name, None) for name in checks["requirements"]]
for name, want in wanted:
    try:
        have = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        errors.append("%s is not installed" % name)
        continue
    if want and have != want:
        errors.append("%s is version %s, expected %s" % (name, have, want))
if checks["requirements"]:
    pip_check = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
    if pip_check.returncode:
        errors.append("pip check failed: " + pip_check.stdout + pip_check.stderr)
print("\\n".join(errors) or "container checks passed")
sys.exit(1 if errors else 0)
"""


class SingularityContainer(EasyBlock):
    """
    Install a Singularity/Apptainer image (the easyconfig's first source) as a module: the image,
    wrapper commands in bin/, run scripts for /runscripts, a virtual environment in /user-software.
    """

    @staticmethod
    def extra_options(extra_vars=None):
        """Easyconfig parameters specific to SingularityContainer."""
        extra_vars = EasyBlock.extra_options(extra_vars)
        extra_vars.update({
            'central_sif_dir': [None, "Directory with a central copy of the image, used when the user deleted the "
                                      "image from the install dir; default: $LUMI_CONTAINER_REPOSITORY_ROOT/"
                                      "easybuild-sif-images if that variable is set when the module loads, "
                                      "else %s" % LUMI_CENTRAL_SIF_DEFAULT, CUSTOM],
            'container_bind': [LUMI_BIND_PATHS, "Host paths bound in the container (SINGULARITY_BINDPATH), "
                                                "each 'path' or 'src:dst[:opts]'", CUSTOM],
            'container_components': [{}, "Python distributions the image ships and their versions "
                                         "({'name': 'version'}), checked in the sanity check", CUSTOM],
            'container_env': [{}, "Environment variables injected in the container, as SINGULARITYENV_<KEY>",
                              CUSTOM],
            'container_init': ['', "Shell code run in the container before Python is used, e.g. "
                                   "'source /opt/miniconda3/bin/activate pytorch' for images before 2025; "
                                   "empty for images that set up their environment themselves", CUSTOM],
            'container_python_version': [None, "Python version (e.g. '3.12') the sanity check expects in the "
                                               "container; not checked if None", CUSTOM],
            'container_venv': [None, "Name of the virtual environment in /user-software/venv; "
                                     "default: the software name in lower case", CUSTOM],
            'pip_install_options': [[], "Extra options for 'pip install', e.g. ['--no-index', "
                                        "'--find-links=/path/to/wheels'] for a site without network", CUSTOM],
            'pip_requirements': [[], "Requirement lines installed with pip in the virtual environment at install "
                                     "time, in pip's requirements file format", CUSTOM],
            'squash_user_software': [True, "Pack user-software/ into user-software.squashfs after installing the "
                                           "pip requirements (without requirements, the empty virtual environment "
                                           "stays a directory, ready for pip install)", CUSTOM],
            'wrapped_commands': [[], "Commands that get a wrapper in bin/ running them in the container, "
                                     "e.g. ['python', 'pip', 'torchrun']", CUSTOM],
        })
        return extra_vars

    def __init__(self, *args, **kwargs):
        """Initialise the names derived from the easyconfig."""
        super(SingularityContainer, self).__init__(*args, **kwargs)
        self.var_suffix = convert_name(self.name, upper=True)
        self.venv_name = self.cfg['container_venv'] or self.name.lower()
        self.container_venv = '%s/venv/%s' % (CONTAINER_USER_SOFTWARE, self.venv_name)

    # Names and paths

    @property
    def sif_name(self):
        """File name of the image: the first source's name."""
        if not self.cfg['sources']:
            raise EasyBuildError("%s: no sources; the container image (.sif) must be the first source",
                                 self.cfg.path)
        source = self.cfg['sources'][0]
        return os.path.basename(source['filename'] if isinstance(source, dict) else source)

    def source_sif(self):
        """Path of the image found by the fetch step (in a dry run it may not have been located)."""
        if self.src:
            return self.src[0]['path']
        return os.path.join('<source path>', self.sif_name)

    def installed_sif(self):
        """The image in the install dir."""
        return os.path.join(self.installdir, self.sif_name)

    def script_values(self):
        """Values substituted in the script and module templates."""
        return {
            'mod_name': self.full_mod_name,
            'sif_var': 'SIF' + self.var_suffix,
            'c_us': CONTAINER_USER_SOFTWARE,
            'c_venv': self.container_venv,
            'c_runscripts': CONTAINER_RUNSCRIPTS,
            'us_dir': USER_SOFTWARE,
            'us_squashfs': USER_SOFTWARE_SQUASHFS,
        }

    def bind_list(self):
        """The easyconfig's bind list plus the run scripts; user-software is added when the module loads."""
        binds = []
        for bind in self.cfg['container_bind']:
            if not isinstance(bind, str) or not bind.startswith('/') or ',' in bind:
                raise EasyBuildError("container_bind entry %r is not valid: give an absolute host path or "
                                     "'src:dst[:opts]' with absolute paths, one bind per list entry", bind)
            binds.append(bind)
        binds.append('%s:%s' % (os.path.join(self.installdir, 'runscripts'), CONTAINER_RUNSCRIPTS))
        return binds

    def container_environment(self):
        """The SINGULARITYENV_* variables the module sets, in order."""
        env = [
            ('SINGULARITYENV_PREPEND_PATH', '%s:%s/bin' % (CONTAINER_RUNSCRIPTS, self.container_venv)),
            ('SINGULARITYENV_VIRTUAL_ENV', self.container_venv),
        ]
        for key, value in self.cfg['container_env'].items():
            if not re.match(r'^[A-Za-z_][A-Za-z0-9_]*$', str(key)):
                raise EasyBuildError("container_env key %r is not a valid environment variable name", key)
            env.append(('SINGULARITYENV_%s' % key, str(value)))
        return env

    # Steps

    def fetch_step(self, *args, **kwargs):
        """Locate the image like any source, then check that it is a SIF file."""
        # fetch_step reads every source to log its checksums (EasyBuild 4.9: MD5 and SHA256, two reads), on top
        # of checksum_step's verification: for a 10-20 GB image on Lustre that is minutes of I/O for a log line.
        # checksum_step still verifies the checksums the easyconfig gives.
        kwargs['skip_checksums'] = True
        super(SingularityContainer, self).fetch_step(*args, **kwargs)
        if self.dry_run:
            return
        path = self.source_sif()
        problem = sif_problem(path)
        if problem:
            raise EasyBuildError("The source %s is not a usable container image: %s. Put the real .sif file in "
                                 "the source path (eb --sourcepath) and try again.", path, problem)

    def extract_step(self):
        """Nothing to extract: the image is copied straight into the install dir by the install step."""
        if self.src:
            self.src[0]['finalpath'] = self.builddir

    def configure_step(self):
        """Nothing to configure."""
        pass

    def build_step(self):
        """Nothing to build."""
        pass

    def make_installdir(self, dontcreate=None):
        """Move software that users installed in the container aside before EasyBuild wipes the install dir."""
        self.back_up_user_software()
        super(SingularityContainer, self).make_installdir(dontcreate=dontcreate)

    def back_up_user_software(self):
        """Move user-software(.squashfs) of a previous installation next to the install dir, and say so."""
        if self.dry_run or not os.path.isdir(self.installdir):
            return
        stamp = time.strftime('%Y%m%d-%H%M%S')
        for entry in (USER_SOFTWARE_SQUASHFS, USER_SOFTWARE):
            path = os.path.join(self.installdir, entry)
            if not os.path.lexists(path):
                continue
            backup = '%s.%s.backup-%s' % (self.installdir, entry, stamp)
            try:
                os.rename(path, backup)
            except OSError as err:
                raise EasyBuildError("Cannot move %s aside before reinstalling (to %s): %s. Nothing was removed; "
                                     "move it yourself and run eb again.", path, backup, err)
            print_warning("Software installed in the container was kept: %s was moved to %s. To use it with the "
                          "new installation, move it back: mv %s %s" % (path, backup, backup, path), silent=False)

    def install_step(self):
        """Copy the image, write the scripts, create the virtual environment and install the requirements."""
        self.install_image()
        self.write_scripts()
        self.create_venv()
        if self.cfg['pip_requirements']:
            self.install_requirements()
        if self.cfg['squash_user_software'] and self.cfg['pip_requirements']:
            self.squash_user_software()

    def install_image(self):
        """Copy the image into the install dir, once, following symlinks."""
        copy_file(self.source_sif(), self.installed_sif())

    def write_scripts(self):
        """Write bin/ (commands for outside the container) and runscripts/ (seen as /runscripts inside)."""
        values = self.script_values()

        def header(script, purpose):
            return SCRIPT_HEADER % dict(values, script=script, purpose=purpose)

        preamble = CONTAINER_PREAMBLE % values
        scripts = {
            'bin/start-shell': header('start-shell', 'start bash in the container') + preamble +
            START_SHELL_BODY % values,
            'bin/list-packages': header('list-packages', 'list the Python packages in the container') + preamble +
            LIST_PACKAGES_BODY % values,
            'bin/make-squashfs': header('make-squashfs', 'pack user-software/ into user-software.squashfs') +
            INSTALLDIR_PREAMBLE % values + MAKE_SQUASHFS_BODY % values,
            'bin/unmake-squashfs': header('unmake-squashfs', 'unpack user-software.squashfs into user-software/') +
            INSTALLDIR_PREAMBLE % values + UNMAKE_SQUASHFS_BODY % values,
            'runscripts/init-conda-venv': RUNSCRIPT_INIT % dict(
                values, container_init=self.cfg['container_init'] or ':',
                container_init_msg=self.cfg['container_init'].replace('"', '\\"').replace('$', '\\$')),
            'runscripts/conda-python-simple': RUNSCRIPT_PYTHON_SIMPLE % values,
            'runscripts/conda-python-distributed': RUNSCRIPT_PYTHON_DISTRIBUTED % values,
            'runscripts/get-master': RUNSCRIPT_GET_MASTER,
            'runscripts/list-packages': RUNSCRIPT_LIST_PACKAGES % values,
        }
        wrapper = WRAPPER_WITH_INIT if self.cfg['container_init'] else WRAPPER_DIRECT
        for command in self.cfg['wrapped_commands']:
            if not re.match(r'^[A-Za-z0-9_][A-Za-z0-9_.+-]*$', command):
                raise EasyBuildError("wrapped_commands entry %r is not a plain command name", command)
            purpose = 'run %s in the container; all arguments are passed on' % command
            scripts['bin/' + command] = header(command, purpose) + preamble + wrapper % dict(
                values, command=shlex.quote(command))

        for relpath, text in sorted(scripts.items()):
            path = os.path.join(self.installdir, relpath)
            write_file(path, text)
            if not self.dry_run:
                adjust_permissions(path, 0o755, add=True)

    def run_in_container(self, script, what, extra_binds=None):
        """
        Run a bash script in the container with the module's binds and environment.
        The script reaches bash as one argument: nothing in it is expanded on the host.
        """
        binds = self.bind_list() + (extra_binds or [])
        env = ['SINGULARITY_BINDPATH=' + ','.join(binds)]
        env += ['%s=%s' % item for item in self.container_environment()]
        cmd = ' '.join(['env'] + [shlex.quote(x) for x in env] +
                       [shlex.quote(self.container_runtime()), 'exec', shlex.quote(self.installed_sif()),
                        '/bin/bash', '-c', shlex.quote(script)])
        return self.run_checked(cmd, what)

    def run_checked(self, cmd, what):
        """Run a shell command with EasyBuild, log its output; fail with its last lines if it fails."""
        if self.dry_run:
            self.dry_run_msg("  %s: %s\n", what, cmd)
            return ''
        self.log.info("%s: %s", what, cmd)
        if run_shell_cmd:
            res = run_shell_cmd(cmd, fail_on_error=False, hidden=True)
            output, exit_code = res.output, res.exit_code
        else:
            output, exit_code = run_cmd(cmd, log_ok=False, log_all=False, simple=False, trace=False)
        self.log.info("Output of %s (exit code %s):\n%s", what, exit_code, output)
        if exit_code:
            lines = [line for line in output.rstrip().splitlines() if line.strip()] or ['(no output)']
            # EasyBuild 4.9 shows only the first 300 characters of an error: the cause goes first.
            errors = [line for line in lines if re.match(r'\s*(error|fatal|\S+: error)\b', line, re.I)]
            raise EasyBuildError("%s failed (exit code %s): %s\nLast lines of its output (all of it is in the "
                                 "log):\n%s\nCommand: %s", what, exit_code, (errors or lines)[-1].strip(),
                                 '\n'.join(lines[-ERROR_TAIL_LINES:]), cmd)
        return output

    def container_runtime(self):
        """The container runtime on PATH: singularity, else apptainer."""
        for runtime in ('singularity', 'apptainer'):
            path = shutil.which(runtime)
            if path:
                return path
        if self.dry_run:
            return 'singularity'
        raise EasyBuildError("Neither singularity nor apptainer found on PATH; they are needed to create the "
                             "virtual environment in the container. Load or install a container runtime.")

    def init_shell_code(self):
        """Bash code running container_init, failing loudly (sourced activate scripts dislike 'set -eu')."""
        init = self.cfg['container_init']
        if not init:
            return 'set -euo pipefail\n'
        return ('if ! { %s\n}; then echo "container_init failed: %s" >&2; exit 1; fi\nset -euo pipefail\n' %
                (init, init.replace('"', '\\"').replace('$', '\\$').replace('`', '\\`')))

    def create_venv(self):
        """Create the virtual environment /user-software/venv/<name> in the container."""
        us_dir = os.path.join(self.installdir, USER_SOFTWARE)
        mkdir(os.path.join(us_dir, 'venv'), parents=True)
        script = self.init_shell_code() + CREATE_VENV % {'venv': self.container_venv}
        self.run_in_container(script, "Creating the virtual environment %s in the container" % self.container_venv,
                              extra_binds=['%s:%s' % (us_dir, CONTAINER_USER_SOFTWARE)])
        self.add_pip_scripts()

    def add_pip_scripts(self):
        """Give a venv created without pip the commands pip, pip3 and pip3.X, running the image's pip."""
        venv = os.path.join(self.installdir, USER_SOFTWARE, 'venv', self.venv_name)
        if self.dry_run or os.path.exists(os.path.join(venv, 'bin', 'pip')):
            return
        # pyvenv.cfg, written by venv, has 'version = 3.12.4': the Python in the image
        with open(os.path.join(venv, 'pyvenv.cfg')) as cfg:
            version = re.search(r'^version\s*=\s*(\d+)\.(\d+)', cfg.read(), re.M)
        names = ['pip', 'pip3'] + (['pip%s.%s' % version.groups()] if version else [])
        for name in names:
            path = os.path.join(venv, 'bin', name)
            write_file(path, VENV_PIP_SCRIPT)
            adjust_permissions(path, 0o755, add=True)

    def install_requirements(self):
        """Install pip_requirements in the virtual environment, from a requirements file written here."""
        us_dir = os.path.join(self.installdir, USER_SOFTWARE)
        requirements = os.path.join(us_dir, 'requirements.txt')
        write_file(requirements, '\n'.join(self.cfg['pip_requirements']) + '\n')
        options = ' '.join(shlex.quote(opt) for opt in self.cfg['pip_install_options'])
        script = self.init_shell_code() + (
            '%(venv)s/bin/python -m pip install --no-input --disable-pip-version-check %(options)s '
            '-r %(us)s/requirements.txt\n' % {'venv': self.container_venv, 'options': options,
                                              'us': CONTAINER_USER_SOFTWARE})
        self.run_in_container(script, "Installing the pip requirements in %s" % self.container_venv,
                              extra_binds=['%s:%s' % (us_dir, CONTAINER_USER_SOFTWARE)])

    def squash_user_software(self):
        """Pack user-software/ with bin/make-squashfs, check the result, and only then remove the directory."""
        make_squashfs = os.path.join(self.installdir, 'bin', 'make-squashfs')
        self.run_checked(shlex.quote(make_squashfs), "Packing user-software with make-squashfs")
        if self.dry_run:
            return
        squashfs = os.path.join(self.installdir, USER_SOFTWARE_SQUASHFS)
        listing = self.run_checked('unsquashfs -l %s' % shlex.quote(squashfs), "Listing %s" % squashfs)
        expected = 'squashfs-root/venv/%s/bin/python' % self.venv_name
        if expected not in listing.split():
            raise EasyBuildError("%s does not contain venv/%s/bin/python; %s/ was kept. Remove the SquashFS file "
                                 "and run make-squashfs again.", squashfs, self.venv_name, USER_SOFTWARE)
        remove_dir(os.path.join(self.installdir, USER_SOFTWARE))

    # Module

    def make_module_step(self, *args, **kwargs):
        """Describe the variables and commands in the module's help, unless the easyconfig has a usage text."""
        if not self.cfg['usage']:
            self.cfg['usage'] = self.usage_text()
        return super(SingularityContainer, self).make_module_step(*args, **kwargs)

    def usage_text(self):
        """Module help: what the module sets and which commands it offers."""
        suffix = self.var_suffix
        wrapped = ', '.join(self.cfg['wrapped_commands']) or 'none'
        return '\n'.join([
            "The container image is in $SIF and $SIF%s: run software in it with 'singularity exec $SIF <command>'." %
            suffix,
            "$CONTAINERROOT is the install dir; $RUNSCRIPTS and $RUNSCRIPTS%s hold the run scripts, seen as "
            "/runscripts in the container." % suffix,
            "SINGULARITY_BINDPATH (added to your own value) binds the host file systems, /runscripts and "
            "/user-software; SINGULARITYENV_PREPEND_PATH, SINGULARITYENV_VIRTUAL_ENV and SINGULARITYENV_* set up "
            "the environment in the container, with the virtual environment %s active." % self.container_venv,
            "",
            "Commands outside the container: start-shell (bash in the container), list-packages, make-squashfs, "
            "unmake-squashfs, and wrappers that run in the container: %s." % wrapped,
            "Run scripts in the container: conda-python-simple, conda-python-distributed (with srun, one task per "
            "GPU), get-master, init-conda-venv, list-packages.",
            "",
            "To add packages: unmake-squashfs, remove $CONTAINERROOT/user-software.squashfs, reload the module, "
            "pip install in the container, make-squashfs, reload the module.",
        ])

    def make_module_extra(self, *args, **kwargs):
        """Add the load-time container logic, in the syntax of the module generator."""
        txt = super(SingularityContainer, self).make_module_extra(*args, **kwargs)
        lua = self.module_generator.SYNTAX == 'Lua'
        quote = lua_str if lua else tcl_str
        env_lines = []
        for key, value in self.container_environment():
            env_lines.append(('pushenv(%s, %s)' if lua else 'singularitycontainer_pushenv %s %s')
                             % (quote(key), quote(value)))
        central = self.cfg['central_sif_dir'] or ''
        values = {
            'installdir': quote(self.installdir),
            'sif_name': quote(self.sif_name),
            'central_sif_dir': quote(central),
            'central_subdir': quote(LUMI_CENTRAL_SIF_SUBDIR),
            'central_default': quote(LUMI_CENTRAL_SIF_DEFAULT),
            'mod_name': quote(self.full_mod_name),
            'mod_name_bare': self.full_mod_name.replace('"', '').replace('$', '').replace('[', '').replace(']', ''),
            'sif_var': quote('SIF' + self.var_suffix),
            'runscripts_var': quote('RUNSCRIPTS' + self.var_suffix),
            'binds_var': quote('SINGULARITYCONTAINER_BINDS_' + self.var_suffix),
            'binds_var_bare': 'SINGULARITYCONTAINER_BINDS_' + self.var_suffix,
            'binds': quote(','.join(self.bind_list())),
            'us_squashfs': quote(USER_SOFTWARE_SQUASHFS),
            'us_dir': quote(USER_SOFTWARE),
            'c_us': CONTAINER_USER_SOFTWARE,
            'container_env': '\n'.join(env_lines),
        }
        return txt + (LUA_MODULE_LOGIC if lua else TCL_MODULE_LOGIC) % values

    # Sanity check

    def sanity_check_step(self, *args, **kwargs):
        """Check the scripts, and, when the image is there, the container's Python and packages."""
        bash_scripts = ['bin/start-shell', 'bin/list-packages', 'bin/make-squashfs', 'bin/unmake-squashfs',
                        'runscripts/conda-python-simple', 'runscripts/conda-python-distributed',
                        'runscripts/init-conda-venv', 'runscripts/list-packages']
        bash_scripts += ['bin/' + cmd for cmd in self.cfg['wrapped_commands']]
        custom_paths = {'files': bash_scripts + ['runscripts/get-master'], 'dirs': []}
        custom_commands = ['bash -n %s' % shlex.quote(os.path.join(self.installdir, s)) for s in bash_scripts]

        if os.path.isfile(self.installed_sif()) or self.dry_run:
            custom_commands.append(self.container_check_command())
            for cmd in self.cfg['wrapped_commands']:
                if cmd.startswith('python'):
                    custom_commands.append('%s -c pass' % cmd)
        else:
            self.log.warning("%s not found: container checks skipped", self.installed_sif())

        return super(SingularityContainer, self).sanity_check_step(custom_paths=custom_paths,
                                                                   custom_commands=custom_commands)

    def container_check_command(self):
        """Shell command checking in the container: the Python version, the components, the requirements."""
        checks = {
            'python': self.cfg['container_python_version'] or '',
            'components': dict(self.cfg['container_components']),
            'requirements': requirement_names(self.cfg['pip_requirements']),
        }
        return 'start-shell -c %s check %s %s' % (shlex.quote('python -c "$1" "$2"'),
                                                  shlex.quote(CONTAINER_CHECK_SCRIPT), shlex.quote(json.dumps(checks)))
