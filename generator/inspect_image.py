"""generate-ec inspect: the spec entry of an image, read from the image without a container runtime, for the image
families that say what to read (their INSPECT: the LUMI AI Factory images).

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

from generator import families, files
from generator.easyblock import easyblock
from generator.spec import load_spec

CHUNK = 16 * 1024 * 1024
ERROR_TAIL = 2000
SHOWN = 50  # characters of a refused value in the message


class InspectError(Exception):
    """A problem with the image or the spec; the message names it and says what is missing."""


@dataclasses.dataclass
class ImageFacts:
    """What inspect found out about one image."""

    path: str
    family: Any  # the family's module
    keys: dict  # the entry's keys that the file name gives, in the entry's order
    checksum: str
    version: str
    python: str
    rocm: str
    rocm_from_name: bool
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
    return public if easyblock.VERSION.match(public) else None


# ---------------------------------------------------------------------------------------------------------------
# Reading the image
# ---------------------------------------------------------------------------------------------------------------


def image_name(path):
    """(family module, the entry's keys) from the file name of an image of a family that inspect reads."""
    for family in families.inspected():
        keys = family.INSPECT.image_keys(os.path.basename(path))
        if keys is not None:
            return family, keys
    raise InspectError('%s: the file name is not %s' % (path, ', or '.join(
        'a %s image name: expected %s' % (family.TITLE, family.INSPECT.IMAGE_NAME) for family in families.inspected())))


def root_offset(path):
    """Byte offset of the image's root file system in the SIF file."""
    if not os.path.isfile(path):
        raise InspectError('%s: no such image file' % path)
    problem = easyblock.sif_problem(path)
    if problem:
        raise InspectError('%s is not a SIF image: %s' % (path, problem))
    try:
        return easyblock.sif_partition_offset(path)
    except ValueError:
        raise InspectError('%s has no SquashFS root file system partition, so there is nothing to read in it'
                           % path) from None


def _unsquashfs(path, offset, *args):
    """Run unsquashfs on the image's root file system; return its CompletedProcess."""
    tool = shutil.which('unsquashfs')
    if tool is None:
        raise InspectError('%s: cannot read the image: unsquashfs is missing (install squashfs-tools, 4.5 or '
                           'later, or put unsquashfs on PATH)' % path)
    return subprocess.run([tool, '-o', str(offset)] + list(args), capture_output=True)


def list_paths(path, offset, inspect):
    """The paths of the software list (/.sbom.json) and of the Python's lib (/opt/venv/lib) entries two levels down
    that exist in the image."""
    proc = _unsquashfs(path, offset, '-l', '-max-depth', '4', path, inspect.SBOM, inspect.VENV_LIB)
    if proc.returncode:
        raise InspectError('%s: unsquashfs cannot read its root file system: %s'
                           % (path, proc.stderr.decode('utf-8', 'replace').strip()[-ERROR_TAIL:]))
    lines = proc.stdout.decode('utf-8', 'replace').splitlines()
    return {line.split('/', 1)[1] for line in lines if line.startswith('squashfs-root/')}


def read_sbom(path, offset, sbom_path):
    """The image's software list (/.sbom.json) as a dict."""
    proc = _unsquashfs(path, offset, '-cat', path, sbom_path)
    if proc.returncode:
        raise InspectError('%s: unsquashfs cannot read its /%s: %s'
                           % (path, sbom_path, proc.stderr.decode('utf-8', 'replace').strip()[-ERROR_TAIL:]))
    try:
        sbom = json.loads(proc.stdout.decode('utf-8'))
    except ValueError as err:
        raise InspectError('%s: its /%s is not valid JSON (%s)' % (path, sbom_path, err)) from None
    if not isinstance(sbom, dict):
        raise InspectError('%s: its /%s is not a JSON object with "apt" and "pip" lists' % (path, sbom_path))
    return sbom


def runtime_pip_list(path, sbom_path):
    """``pip list --format=json`` run in the image by singularity or apptainer (it has no software list)."""
    runtime = shutil.which('singularity') or shutil.which('apptainer')
    if runtime is None:
        raise InspectError('%s has no /%s, and neither singularity nor apptainer is on PATH to run pip list in it'
                           % (path, sbom_path))
    cmd = [runtime, 'exec', path, 'python', '-m', 'pip', 'list', '--format=json']
    proc = subprocess.run(cmd, capture_output=True)
    if proc.returncode:
        raise InspectError('%s has no /%s, and %s failed (exit code %d): %s'
                           % (path, sbom_path, ' '.join(cmd), proc.returncode,
                              proc.stderr.decode('utf-8', 'replace').strip()[-ERROR_TAIL:]))
    try:
        return json.loads(proc.stdout.decode('utf-8'))
    except ValueError as err:
        raise InspectError('%s: pip list in the image did not print JSON (%s)' % (path, err)) from None


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
                    raise InspectError('%s: %s has %s[%d].%s %s, which is not one line of printable text; refused: a '
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
        raise InspectError('%s: cannot tell its Python version: no single python3.X package in its SBOM and no '
                           'single /%s/pythonX.Y directory' % (path, venv_lib))
    return found.pop()


def rocm_version(apt, keys, inspect):
    """(ROCm version, taken from the file name?): rocm-core's version from apt, else major.minor from the file name
    (a LAIF image's digest)."""
    match = re.match(r'[0-9]+\.[0-9]+\.[0-9]+', apt.get('rocm-core', ''))
    if match:
        return match.group(0), False
    return inspect.rocm(keys), True


def main_components(path, pip, inspect):
    """(components {name: version}, left out [(name, version)], commands) of the main components in ``pip``; the
    distribution that gives the entry's version must be there."""
    by_name = {_normalise(name): name for name in pip}
    if _normalise(inspect.VERSION_FROM) not in by_name:
        raise InspectError('%s: %s is not in its pip list, so there is no %s version for the entry'
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
        raise InspectError('%s: %s has the version %r in its pip list, which is not a version'
                           % (path, distribution, version))
    return spec_version(version) or match.group(0)


def software_lists(path, offset, paths, inspect):
    """({apt name: version}, {pip name: version}) of the image: from its software list, else pip list run in it."""
    if inspect.SBOM in paths:
        sbom = read_sbom(path, offset, inspect.SBOM)
        where = 'its /%s' % inspect.SBOM
        apt, pip = _packages(path, where, 'apt', sbom.get('apt')), _packages(path, where, 'pip', sbom.get('pip'))
        if not pip:
            raise InspectError('%s: no pip list: its /%s has no "pip" entries (%s)'
                               % (path, inspect.SBOM, inspect.NO_PIP_LIST))
        return apt, pip
    pip = _packages(path, 'its pip list (run in the image)', 'pip', runtime_pip_list(path, inspect.SBOM))
    if not pip:
        raise InspectError('%s: no pip list: pip list in the image printed no packages' % path)
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
    rocm, rocm_from_name = rocm_version(apt, keys, inspect)
    return ImageFacts(path=path, family=family, keys=keys, checksum=checksum or sha256(path),
                      version=entry_version(path, pip, inspect.VERSION_FROM),
                      python=python_version(path, apt, paths, inspect.VENV_LIB), rocm=rocm,
                      rocm_from_name=rocm_from_name, components=components, left_out=left_out, commands=commands)


# ---------------------------------------------------------------------------------------------------------------
# The entry, and appending it to a spec
# ---------------------------------------------------------------------------------------------------------------


YAML_WORDS = ('true', 'false', 'yes', 'no', 'on', 'off', 'null', 'y', 'n')


def _scalar(value):
    """A YAML scalar: plain for a word that YAML reads back as the same string, else double-quoted."""
    if re.fullmatch(r'[A-Za-z][A-Za-z0-9_.-]*', value) and value.lower() not in YAML_WORDS:
        return value
    return json.dumps(value)


def entry_text(facts, indent=2):
    """The container entry, as YAML lines of a list item indented by ``indent``. The image's values are YAML scalars
    (_scalar), or, in comments, its file name (a name of its family) and package names and versions (one line of
    printable text each, _packages)."""
    pad, key = ' ' * indent, ' ' * (indent + 2)
    lines = ['%s# %s, read by generate-ec inspect' % (pad, facts.filename), '%s- family: %s' % (pad, facts.family.NAME)]
    for name, value in (('version', facts.version), ('container_python_version', facts.python), ('rocm', facts.rocm)):
        lines.append('%s%s: %s' % (key, name, _scalar(value)))
    if facts.rocm_from_name:
        lines[-1] += '  # from %s: the image lists no rocm-core package' % facts.inspect.ROCM_FROM
    lines.append('%sdate: %s' % (key, _scalar(facts.inspect.date(facts.keys))))
    lines += ['%s%s: %s' % (key, name, _scalar(value)) for name, value in facts.keys.items()]
    lines.append('%schecksum: %s' % (key, _scalar(facts.checksum)))
    if facts.components:
        lines.append('%scontainer_components:' % key)
        lines += ['%s  %s: %s' % (key, _scalar(name), _scalar(version)) for name, version in facts.components.items()]
    for name, version in facts.left_out:
        lines.append('%s# not a component: %s %s is not a version the spec takes' % (key, name, version))
    if facts.commands:
        lines.append('%s# the image has the commands %s: list them in wrapped_commands to get wrappers'
                     % (key, ', '.join(facts.commands)))
    return '\n'.join(lines) + '\n'


def _containers_end(spec_path, lines):
    """(index of the line after the top-level containers list, indent of its items)."""
    starts = [i for i, line in enumerate(lines) if re.fullmatch(r'containers:[ \t]*(#.*)?', line.rstrip('\r\n'))]
    if len(starts) != 1:
        raise InspectError('%s: no block list "containers:" (the key on a line of its own, its entries below) to '
                           'append the entry to; add it by hand' % spec_path)
    end, indent = starts[0] + 1, None
    for i in range(starts[0] + 1, len(lines)):
        line = lines[i].rstrip('\r\n')
        if not line.strip() or line.startswith('#'):
            continue
        if not line.startswith((' ', '-')):
            break  # the next top-level key
        end = i + 1
        if indent is None and line.lstrip().startswith('-'):
            indent = len(line) - len(line.lstrip())
    return end, 2 if indent is None else indent


def same_image(container, family, keys):
    """Whether a spec's container entry is the image of ``family`` whose file name gives ``keys``."""
    return container.family == family.NAME and all(getattr(container, name) == keys[name]
                                                   for name in family.INSPECT.SAME_IMAGE)


def check_spec(spec_path, image):
    """Refuse (before the image is read) when the spec has errors or has the image already (the same values of its
    family's SAME_IMAGE keys, e.g. tag and image_variant), or is a file generate-ec must not replace (read-only, a
    link: files.check_replaceable)."""
    family, keys = image_name(image)
    files.check_replaceable(spec_path)
    spec, issues = load_spec(spec_path)
    if issues:
        raise InspectError('%s has errors, so nothing was appended; fix them first:\n%s'
                           % (spec_path, '\n'.join(str(issue) for issue in issues)))
    for container in spec.containers:
        if same_image(container, family, keys):
            raise InspectError('%s:%d: %s is this image already (%s); nothing appended'
                               % (spec_path, container.line, container.path,
                                  ', '.join('%s %s' % (name, keys[name]) for name in family.INSPECT.SAME_IMAGE)))


def _added(spec, facts):
    """The containers of a loaded spec that are the image of ``facts`` (same_image: e.g. same tag and
    image_variant)."""
    return [c for c in (spec.containers if spec else []) if same_image(c, facts.family, facts.keys)]


def append_entries(spec_path, all_facts):
    """Append the images' entries to the containers of the spec file, as text (comments and layout stay): all of
    them, or none when the spec has one of the images already or would not load with them. Returns their
    containers."""
    for facts in all_facts:
        check_spec(spec_path, facts.path)
    with open(spec_path, encoding='utf-8', newline='') as handle:
        lines = handle.read().splitlines(keepends=True)
    end, indent = _containers_end(spec_path, lines)
    if end and not lines[end - 1].endswith('\n'):
        lines[end - 1] += '\n'
    entries = ''.join(entry_text(facts, indent) for facts in all_facts)
    tmp = files.stage(spec_path, ''.join(lines[:end]) + entries + ''.join(lines[end:]))
    spec, issues = load_spec(tmp)
    added = [_added(spec, facts) for facts in all_facts]
    if issues or any(len(found) != 1 for found in added):
        files.discard(tmp)
        found = [str(dataclasses.replace(issue, file=spec_path)) for issue in issues]
        raise InspectError('%s: with the %s appended the spec would not load, so nothing was appended:\n%s'
                           % (spec_path, 'entry' if len(all_facts) == 1 else 'entries',
                              '\n'.join(found) or 'an entry is not among its containers'))
    files.commit(tmp, spec_path)
    return [found[0] for found in added]


def append_entry(spec_path, facts):
    """Append the image's entry to the containers of the spec file, as text (comments and layout stay)."""
    return append_entries(spec_path, [facts])[0]
