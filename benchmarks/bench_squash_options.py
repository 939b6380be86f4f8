"""Squash options: mksquashfs of a real venv with candidate options, side by side (benchmarks/README.md).

Per variant: the pack time, the image's size, unsquashfs into tmpfs and into a dir on disk, and for the compressors
the time to read every file through squashfuse_ll mounted unprivileged, as Apptainer reads the SquashFS at job time.
"""
import dataclasses
import os
import shutil
import subprocess
import sysconfig
import time
from pathlib import Path

import real_venv
from harness import (BenchError, bench_user, checked, count_entries, failure, figure, measure_io, progress, repeat,
                     rotated)
from testkit.install import TOOLS
from testkit.users import as_user, give

SYSTEM_PYTHON = '/usr/bin/python3'
WHEELS = TOOLS / 'bench-wheels'
SHM = Path('/dev/shm')

# name: (label, options besides -processors); -processors is nproc, but for processors_1
VARIANTS = {
    'gzip': ('gzip (the default, level 9)', []),
    'gzip_1': ('gzip -Xcompression-level 1', ['-comp', 'gzip', '-Xcompression-level', '1']),
    'lz4': ('lz4', ['-comp', 'lz4']),
    'zstd_1': ('zstd -Xcompression-level 1', ['-comp', 'zstd', '-Xcompression-level', '1']),
    'zstd_3': ('zstd -Xcompression-level 3', ['-comp', 'zstd', '-Xcompression-level', '3']),
    'block_1m': ('gzip -b 1M', ['-b', '1M']),
    'no_duplicates': ('gzip -no-duplicates', ['-no-duplicates']),
    'no_xattrs': ('gzip -no-xattrs', ['-no-xattrs']),
    'processors_1': ('gzip -processors 1', []),
}
# --quick: enough to go through every step (the smoke test's time is short)
QUICK_VARIANTS = ['gzip', 'zstd_1']
# Read through squashfuse: the compressors, and the block size (a small file is read from a whole fragment block)
READ_CHECKED = ['gzip', 'gzip_1', 'lz4', 'zstd_1', 'zstd_3', 'block_1m']
# Mount with squashfuse_ll (the one Apptainer runs) in a user namespace: no fusermount, no root
READ_SCRIPT = '''squashfuse_ll "$1" "$2" || exit
find "$2" -type f -exec cat {} + >/dev/null; status=$?
umount "$2"; exit $status'''


def source_tree(ctx):
    """The tree to pack: the real venv (cached in the work dir), or in quick mode a few stdlib packages."""
    if ctx.settings.quick:
        tree = ctx.scratch / 'options-tree'
        stdlib = Path(sysconfig.get_paths()['stdlib'])
        for package in ('json', 'email', 'http'):
            shutil.copytree(stdlib / package, tree / package)
        give(tree, bench_user())
        return tree
    venv = ctx.cache / ('real-venv-%s' % real_venv.fingerprint())
    if not venv.exists():
        build_real_venv(ctx, venv)
    return venv


def build_real_venv(ctx, venv):
    if not (WHEELS / 'fetched.stamp').exists():
        raise BenchError('the real wheels are not in %s: make bench downloads them (or: %s %s fetch %s)' % (
            WHEELS, SYSTEM_PYTHON, real_venv.__file__, WHEELS))
    progress('installing the real venv from %s into %s (kept as a cache for the next runs)' % (WHEELS, venv))
    build = ctx.scratch / 'real-venv'
    paths = sysconfig.get_paths(vars={'base': str(build), 'platbase': str(build)}, scheme='venv')
    for cmd in real_venv.install_commands(SYSTEM_PYTHON, WHEELS, build, paths['purelib']):
        checked(cmd, env=ctx.env(), what='building the real venv')
    venv.parent.mkdir(parents=True, exist_ok=True)
    os.replace(build, venv)  # complete or absent


def read_all(image, mountpoint, env):
    """Seconds to mount image with squashfuse_ll unprivileged, read every file, unmount."""
    cmd = ['unshare', '--user', '--map-root-user', '--mount', 'sh', '-c', READ_SCRIPT, 'sh', str(image),
           str(mountpoint)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, **as_user(bench_user(), env, mountpoint.parent))
    seconds = time.perf_counter() - start
    if proc.returncode:
        raise failure('reading %s through squashfuse_ll' % image, cmd, proc)
    return seconds


def one_variant(ctx, name, tree, nproc):
    """{key: value} of one pack of tree with the variant's options, its unpacks and read."""
    image = ctx.scratch / ('%s.squashfs' % name)
    processors = 1 if name == 'processors_1' else nproc
    cmd = ['mksquashfs', tree, image, '-noappend', '-no-progress', '-quiet', '-processors', str(processors)]
    data = measure_io(cmd + VARIANTS[name][1], ctx.env(), ctx.scratch, 'mksquashfs ' + name)
    values = {name: data['seconds'], name + '_cpu': data['cpu_seconds'], name + '_bytes': image.stat().st_size}
    for where, parent in (('shm', SHM), ('disk', ctx.scratch)):
        dest = Path(parent) / ('unsquashed-%s-%d' % (name, os.getpid()))
        unpack = measure_io(['unsquashfs', '-no-progress', '-d', dest, image], ctx.env(), ctx.scratch,
                            'unsquashfs %s into %s' % (name, parent))
        values['%s_unsquash_%s' % (name, where)] = unpack['seconds']
        shutil.rmtree(dest)
    if name in READ_CHECKED:
        values[name + '_read'] = read_all(image, ctx.scratch / 'mnt', ctx.env())
    image.unlink()
    return values


def bench_squash_options(ctx):
    tree = source_tree(ctx)
    entries = count_entries(tree) + 1
    size = sum(f.stat().st_size for f in tree.rglob('*') if f.is_file() and not f.is_symlink())
    nproc = len(os.sched_getaffinity(0))
    (ctx.scratch / 'mnt').mkdir()
    give(ctx.scratch / 'mnt', bench_user())
    progress('squash options: reading the tree once, into the page cache')
    checked(['sh', '-c', 'find "$1" -type f -exec cat {} + >/dev/null', 'sh', tree], what='reading the tree')

    variants = {name: VARIANTS[name] for name in (QUICK_VARIANTS if ctx.settings.quick else VARIANTS)}

    def one_run(index):
        values = {}
        for name in rotated(list(variants), index):
            values.update(one_variant(ctx, name, tree, nproc))
        return values

    # No warm-up run: the tree is in the page cache, and each run packs every variant in turn
    v = repeat(dataclasses.replace(ctx.settings, warmup=0), 'squash options', one_run)
    figures = []
    for name, (label, _) in variants.items():
        label += '' if name == 'processors_1' else ', -processors %d' % nproc
        figures += [figure(name, '%s: pack' % label, 's', v[name]),
                    # what other work on the machine does not change much: compare these when it was busy
                    figure(name + '_cpu', '%s: pack, CPU time' % label, 's', v[name + '_cpu']),
                    figure(name + '_bytes', '%s: image size' % label, 'bytes', v[name + '_bytes']),
                    figure(name + '_unsquash_shm', '%s: unsquashfs into tmpfs' % label, 's',
                           v[name + '_unsquash_shm']),
                    figure(name + '_unsquash_disk', '%s: unsquashfs into a dir on disk' % label, 's',
                           v[name + '_unsquash_disk'])]
        if name in READ_CHECKED:
            figures.append(figure(name + '_read', '%s: read every file through squashfuse_ll' % label, 's',
                                  v[name + '_read']))
    return {
        'name': 'squash_options',
        'title': 'mksquashfs options on a venv of %d files and dirs, %d bytes (no warm-up run)' % (entries, size),
        'figures': figures,
        'info': {'venv_entries': entries, 'venv_bytes': size, 'nproc': nproc,
                 'image_bytes': {name: v[name + '_bytes'][0] for name in variants},
                 'mksquashfs': subprocess.run(['mksquashfs', '-version'], capture_output=True,
                                              text=True).stdout.splitlines()[0]},
    }
