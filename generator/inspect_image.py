"""Reading an image for generate-ec inspect: the facts of its spec entry, read from the image without a container
runtime, for the image families that say what to read (their INSPECT: the LUMI AI Factory images). spec_edit.py
writes the entry.

The image's file name gives the entry's keys of its family.  The image's root file system is the SquashFS partition
of the SIF file; unsquashfs reads its software list (LAIF's /.sbom.json, plain JSON: {"apt": [{name, version}],
"pip": [pip list --format=json]}).  Images without one are asked for ``pip list`` through singularity (or
apptainer) instead.
"""

import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
from typing import Any

from generator import families
from singularitycontainer_src.sif import sif_partition_offset, sif_problem
from singularitycontainer_src.parameters import VERSION
from generator.errors import GenerateError

CHUNK = 16 * 1024 * 1024
ERROR_TAIL = 2000
SHOWN = 50  # characters of a refused value in the message


@dataclasses.dataclass
class ImageFacts:
    """What inspect found out about one image."""

    path: str
    family: Any  # the family's module
    keys: dict  # the entry's keys that the file name gives, in the entry's order
    checksum: str
    version: str
    python: str
    platform: str  # the version of the family's platform (e.g. ROCm's), or None for a family without one
    platform_note: Any  # where that version comes from, when it is not the image's own word for it (a comment)
    components: dict
    left_out: list  # (name, version) of main components whose version the spec cannot take
    commands: list

    @property
    def filename(self):
        return os.path.basename(self.path)

    @property
    def inspect(self):
        return self.family.INSPECT


def _normalise(name):
    return re.sub(r'[-_.]+', '-', name).lower()


def spec_version(pip_version):
    """A pip version without its +local label, if the spec accepts it as a version; else None."""
    public = pip_version.split('+', 1)[0]
    return public if VERSION.match(public) else None


# ---------------------------------------------------------------------------------------------------------------
# Reading the image
# ---------------------------------------------------------------------------------------------------------------


def image_name(path):
    """(family module, the entry's keys) from the file name of an image of a family that inspect reads."""
    for family in families.inspected():
        keys = family.INSPECT.image_keys(os.path.basename(path))
        if keys is not None:
            return family, keys
    raise GenerateError('%s: the file name is not %s' % (path, ', or '.join(
        'a %s image name: expected %s' % (family.TITLE, family.INSPECT.IMAGE_NAME) for family in families.inspected())))


def root_offset(path):
    """Byte offset of the image's root file system in the SIF file."""
    if not os.path.isfile(path):
        raise GenerateError('%s: no such image file' % path)
    problem = sif_problem(path)
    if problem:
        raise GenerateError('%s is not a SIF image: %s' % (path, problem))
    try:
        return sif_partition_offset(path)
    except ValueError:
        raise GenerateError('%s has no SquashFS root file system partition, so there is nothing to read in it'
                            % path) from None


def _unsquashfs(path, offset, *args):
    """Run unsquashfs on the image's root file system; return its CompletedProcess."""
    tool = shutil.which('unsquashfs')
    if tool is None:
        raise GenerateError('%s: cannot read the image: unsquashfs is missing (install squashfs-tools, 4.5 or '
                            'later, or put unsquashfs on PATH)' % path)
    return subprocess.run([tool, '-o', str(offset)] + list(args), capture_output=True)


def list_paths(path, offset, inspect):
    """The paths of the software list (/.sbom.json) and of the Python's lib (/opt/venv/lib) entries two levels down
    that exist in the image."""
    proc = _unsquashfs(path, offset, '-l', '-max-depth', '4', path, inspect.SBOM, inspect.VENV_LIB)
    if proc.returncode:
        raise GenerateError('%s: unsquashfs cannot read its root file system: %s'
                            % (path, proc.stderr.decode('utf-8', 'replace').strip()[-ERROR_TAIL:]))
    lines = proc.stdout.decode('utf-8', 'replace').splitlines()
    return {line.split('/', 1)[1] for line in lines if line.startswith('squashfs-root/')}


def read_sbom(path, offset, sbom_path):
    """The image's software list (/.sbom.json) as a dict."""
    proc = _unsquashfs(path, offset, '-cat', path, sbom_path)
    if proc.returncode:
        raise GenerateError('%s: unsquashfs cannot read its /%s: %s'
                            % (path, sbom_path, proc.stderr.decode('utf-8', 'replace').strip()[-ERROR_TAIL:]))
    try:
        sbom = json.loads(proc.stdout.decode('utf-8'))
    except ValueError as err:
        raise GenerateError('%s: its /%s is not valid JSON (%s)' % (path, sbom_path, err)) from None
    if not isinstance(sbom, dict):
        raise GenerateError('%s: its /%s is not a JSON object with "apt" and "pip" lists' % (path, sbom_path))
    return sbom


def runtime_pip_list(path, sbom_path):
    """``pip list --format=json`` run in the image by singularity or apptainer (it has no software list)."""
    runtime = shutil.which('singularity') or shutil.which('apptainer')
    if runtime is None:
        raise GenerateError('%s has no /%s, and neither singularity nor apptainer is on PATH to run pip list in it'
                            % (path, sbom_path))
    cmd = [runtime, 'exec', path, 'python', '-m', 'pip', 'list', '--format=json']
    proc = subprocess.run(cmd, capture_output=True)
    if proc.returncode:
        raise GenerateError('%s has no /%s, and %s failed (exit code %d): %s'
                            % (path, sbom_path, ' '.join(cmd), proc.returncode,
                               proc.stderr.decode('utf-8', 'replace').strip()[-ERROR_TAIL:]))
    try:
        return json.loads(proc.stdout.decode('utf-8'))
    except ValueError as err:
        raise GenerateError('%s: pip list in the image did not print JSON (%s)' % (path, err)) from None


def _shown(value):
    return repr(value[:SHOWN]) + ('...' if len(value) > SHOWN else '')


def _packages(path, where, key, entries):
    """{name: version} of the list ``key`` of {"name": ..., "version": ...} that ``where`` in the image has (other
    entries are skipped). Names and versions go into the spec, some into comments, which a line break would end: the
    image is refused when one is not one line of printable text."""
    packages = {}
    for index, entry in enumerate(entries if isinstance(entries, list) else []):
        if isinstance(entry, dict) and isinstance(entry.get('name'), str) and isinstance(entry.get('version'), str):
            for field in ('name', 'version'):
                if not entry[field].isprintable():
                    raise GenerateError('%s: %s has %s[%d].%s %s, which is not one line of printable text; refused: a '
                                        'broken or crafted software list (check where the image comes from)'
                                        % (path, where, key, index, field, _shown(entry[field])))
            packages[entry['name']] = entry['version']
    return packages


def sha256(path):
    digest = hashlib.sha256()
    with open(path, 'rb') as handle:
        for chunk in iter(lambda: handle.read(CHUNK), b''):
            digest.update(chunk)
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------------------------------
# From packages to versions
# ---------------------------------------------------------------------------------------------------------------


def python_version(path, apt, paths, venv_lib):
    """major.minor of the image's Python: its apt python3.X package, else <venv_lib>/pythonX.Y."""
    found = set()
    for name in apt:
        match = re.fullmatch(r'python(3\.[0-9]+)', name)
        if match:
            found.add(match.group(1))
    if len(found) != 1:
        found = set()
        for entry in paths:
            match = re.fullmatch(r'%s/python([0-9]+\.[0-9]+)' % re.escape(venv_lib), entry)
            if match:
                found.add(match.group(1))
    if len(found) != 1:
        raise GenerateError('%s: cannot tell its Python version: no single python3.X package in its SBOM and no '
                            'single /%s/pythonX.Y directory' % (path, venv_lib))
    return found.pop()


def main_components(path, pip, inspect):
    """(components {name: version}, left out [(name, version)], commands) of the main components in ``pip``; the
    distribution that gives the entry's version must be there."""
    by_name = {_normalise(name): name for name in pip}
    if _normalise(inspect.VERSION_FROM) not in by_name:
        raise GenerateError('%s: %s is not in its pip list, so there is no %s version for the entry'
                            % (path, inspect.VERSION_FROM, inspect.SOFTWARE))
    components, left_out, commands = {}, [], []
    for wanted in inspect.MAIN_COMPONENTS:
        name = by_name.get(wanted)
        if name is None:
            continue
        version = spec_version(pip[name])
        if version is None:
            left_out.append((name, pip[name]))
        else:
            components[name] = version
        if wanted in inspect.COMMANDS:
            commands.append(inspect.COMMANDS[wanted])
    return components, left_out, commands


def entry_version(path, pip, distribution):
    """The distribution's version without a +local label (only its release numbers if the rest is not a spec
    version)."""
    version = next(pip[name] for name in pip if _normalise(name) == _normalise(distribution))
    match = re.match(r'[0-9]+(\.[0-9]+)*', version)
    if match is None:
        raise GenerateError('%s: %s has the version %r in its pip list, which is not a version'
                            % (path, distribution, version))
    return spec_version(version) or match.group(0)


def software_lists(path, offset, paths, inspect):
    """({apt name: version}, {pip name: version}) of the image: from its software list, else pip list run in it."""
    if inspect.SBOM in paths:
        sbom = read_sbom(path, offset, inspect.SBOM)
        where = 'its /%s' % inspect.SBOM
        apt, pip = _packages(path, where, 'apt', sbom.get('apt')), _packages(path, where, 'pip', sbom.get('pip'))
        if not pip:
            raise GenerateError('%s: no pip list: its /%s has no "pip" entries (%s)'
                                % (path, inspect.SBOM, inspect.NO_PIP_LIST))
        return apt, pip
    pip = _packages(path, 'its pip list (run in the image)', 'pip', runtime_pip_list(path, inspect.SBOM))
    if not pip:
        raise GenerateError('%s: no pip list: pip list in the image printed no packages' % path)
    return {}, pip


def inspect_image(path, checksum=None):
    """All facts for the spec entry of the image at ``path``. ``checksum``: the image's SHA256 when it is known
    already (published beside the image), which saves reading the whole image (10-20 GB) for it."""
    family, keys = image_name(path)
    inspect = family.INSPECT
    offset = root_offset(path)
    paths = list_paths(path, offset, inspect)
    apt, pip = software_lists(path, offset, paths, inspect)
    components, left_out, commands = main_components(path, pip, inspect)
    platform, platform_note = inspect.platform(apt, keys) if family.PLATFORM else (None, None)
    return ImageFacts(path=path, family=family, keys=keys, checksum=checksum or sha256(path),
                      version=entry_version(path, pip, inspect.VERSION_FROM),
                      python=python_version(path, apt, paths, inspect.VENV_LIB), platform=platform,
                      platform_note=platform_note, components=components, left_out=left_out, commands=commands)
