"""Loading and validation of generate-ec YAML specs: the data model, the table of a container entry's fields and
the merge of defaults, family_defaults and an entry (yaml_source.py reads the YAML with line numbers, checks.py holds
the checker primitives).

A spec describes one software name (e.g. PyTorch) and a list of container images; every image becomes one
easyconfig.  Loading never raises for user errors: all problems are collected as :class:`Issue` objects so the
command line can report every one of them (with file, line and key path) before anything is written.
"""

import os
import re
from collections import OrderedDict
from dataclasses import dataclass, field, make_dataclass
from typing import Any, Callable, Optional

from generator import easyconfig_names, families
from generator.checks import (Checker, in_module_help, kind, module_help_problem, one_of, pattern, problem_check,
                              rule)
from singularitycontainer_src.parameters import DISTRIBUTION_NAME, PARAMETERS, VERSION, rule_problems
from generator.yaml_source import LoadError, format_path, load_yaml

# ---------------------------------------------------------------------------------------------------------------
# Data model
# ---------------------------------------------------------------------------------------------------------------


class _ContainerNames:
    """The names and the easyconfig's parameter values derived from a container's values (the base of
    :class:`Container`, built from FIELDS below)."""

    @property
    def family_module(self):
        return families.FAMILIES[self.family]

    @property
    def versionsuffix(self):
        suffix = self.family_module.name_part(vars(self))
        if self.variant:
            suffix += '-' + self.variant
        return suffix + '-' + self.date

    @property
    def filename(self):
        return '%s-%s%s.eb' % (self.name, self.version, self.versionsuffix)

    @property
    def path(self):
        return format_path(('containers', self.index))

    @property
    def parameters(self):
        """{name: value} of the easyblock's parameters that the easyconfig sets, in the easyblock's order: those that
        the spec gives (or the image's family derives), and container_python_version = None after python_check:
        false. The others are left out: the easyblock's defaults apply."""
        values = OrderedDict()
        for name in PARAMETERS:
            if name == 'container_python_version' and self.python_check is False:
                values[name] = None
            elif getattr(self, name) is not None:
                values[name] = getattr(self, name)
        return values

    @property
    def release_dir(self):
        """The directory of the image's release on LUMI (None for families that have none)."""
        return self.family_module.release_dir(vars(self))


@dataclass
class Spec:
    """A validated spec file."""

    source: str
    name: str
    homepage: str
    description: str
    moduleclass: str
    containers: list = field(default_factory=list)
    easybuild: Optional[str] = None  # '5': EasyBuild 5's names of easyconfig fields; None: names 4.9 reads too

    @property
    def source_name(self):
        return os.path.basename(self.source)

    @property
    def default_outdir(self):
        return os.path.join('easyconfigs', self.name[0].lower(), self.name)


# ---------------------------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------------------------

TOP_KEYS = ('name', 'homepage', 'description', 'moduleclass', 'easybuild', 'easybuild_4_9', 'defaults',
            'family_defaults', 'containers')
TOP_REQUIRED = ('name', 'homepage', 'description', 'containers')

# Matched from the start, as the easyblock's patterns are (pattern_problem): \Z, as $ would take a newline at the
# end; [0-9], as \d takes any Unicode digit.
SHA256_RE = re.compile(r'[0-9a-f]{64}\Z')
MODULECLASS_RE = re.compile(r'[a-z][a-z0-9_]*\Z')
HOMEPAGE_RE = re.compile(r'https?://\S+\Z')
CONTROL_RE = re.compile(r'[\x00-\x09\x0b-\x1f\x7f]')

# The spec's keys for easyblock parameters are the parameter names; these were shorter once
RENAMED_KEYS = {'bind': 'container_bind', 'env': 'container_env', 'env_defaults': 'container_env_defaults',
                'venv': 'container_venv', 'python': 'container_python_version', 'components': 'container_components'}
RENAMED = "%r is now %r: rename it (a spec's keys for the easyblock's parameters are the parameter names)"
# The parameters that name the image and the easyconfig: every entry gives them
NAMING_PARAMETERS = ('container_python_version',)
# Parameters whose values the module's description shows as they are (the others there cannot hold a [ at all)
DESCRIBED_PARAMETERS = ('pip_requirements',)

# ---------------------------------------------------------------------------------------------------------------
# The fields of a container entry: everything about a key is in its row
# ---------------------------------------------------------------------------------------------------------------

CONTAINER = 'container'  # the key may only appear in a container entry
SHARED = 'shared'  # in a container entry or in defaults


def _derived(key):
    """Default: what the entry's family derives for ``key`` from the entry's other values (None: nothing)."""
    def default(name, values):
        derive = families.family(values).DERIVED.get(key)
        return derive(name, values) if derive else None
    return default


@dataclass(frozen=True)
class Field:
    """One key of a container entry.

    ``check(checker, path, value)`` validates a given value.  ``required``: every entry must give it (the keys its
    family needs are the family's to say).  ``default`` is the value of a key that is not given (None: not
    written), or a function ``(name, values)`` computing it from the entry's other values.  A key with
    ``families`` may only be given in an entry of one of those families.
    """

    key: str
    where: str
    check: Callable[..., bool]
    required: bool = False
    default: Any = None
    families: tuple = ()

    def missing_hint(self):
        if self.where == CONTAINER:
            return 'set it in the container entry'
        return 'set it in the container entry or in defaults'

    def value(self, name, values):
        """This key's value for an entry whose given values are ``values``."""
        if self.key in values:
            value = values[self.key]
        elif callable(self.default):
            value = self.default(name, values)
        else:
            value = self.default
        return type(value)(value) if isinstance(value, (list, dict)) else value


def _parameter_field(name):
    """The key of an easyblock parameter: the parameter's name and rule; given, it goes into the easyconfig."""
    check = rule(name)
    return Field(name, SHARED, in_module_help(check) if name in DESCRIBED_PARAMETERS else check,
                 required=name in NAMING_PARAMETERS, default=_derived(name))


FIELDS = (
    (Field('version', CONTAINER, pattern(VERSION, 'a valid version (e.g. 2.7.1)'), required=True),
     Field('date', CONTAINER, Checker.date, default=_derived('date')))
    + tuple(Field(key, CONTAINER, problem_check(problem), families=(family.NAME,))
            for family in families.FAMILIES.values() for key, problem in family.KEYS.items())
    + (Field('sif', CONTAINER, in_module_help(Checker.sif), default=_derived('sif')),
       Field('checksum', CONTAINER, pattern(SHA256_RE, 'a sha256 checksum (64 lowercase hex digits)')),
       Field('family', SHARED, one_of(families.NAMES, 'an image family'), default=families.DEFAULT))
    # the versions of the families' platforms (rocm), in the entry or in defaults
    + tuple(Field(key, SHARED, problem_check(platform.check), families=names)
            for key, (platform, names) in families.PLATFORMS.items())
    + (Field('variant', SHARED, pattern(DISTRIBUTION_NAME,
                                        'a valid variant (letters, digits, _.+-; may be empty)', allow_empty=True),
             default=''),
       Field('python_check', SHARED, Checker.boolean))
    + tuple(_parameter_field(name) for name in PARAMETERS)
)
FIELDS_BY_KEY = {fld.key: fld for fld in FIELDS}
if len(FIELDS_BY_KEY) != len(FIELDS):  # a family's key under the name of another key: one would hide the other
    raise ImportError('generate-ec: a key of an image family has the name of another key of the spec: %s; name it '
                      'differently' % ', '.join(sorted({f.key for f in FIELDS if f is not FIELDS_BY_KEY[f.key]})))
CONTAINER_ONLY_KEYS = tuple(fld.key for fld in FIELDS if fld.where == CONTAINER)
SHARED_KEYS = tuple(fld.key for fld in FIELDS if fld.where == SHARED)
CONTAINER_KEYS = tuple(fld.key for fld in FIELDS)
DEFAULT_KEYS = SHARED_KEYS
RENAMED_HINTS = {old: RENAMED % (old, new) for old, new in RENAMED_KEYS.items()}

Container = make_dataclass(
    'Container', [('name', str)] + [(fld.key, Any) for fld in FIELDS] + [('index', int, 0), ('line', int, 1)],
    bases=(_ContainerNames,))
Container.__doc__ = 'One fully resolved container entry (defaults merged in, built-in defaults applied).'


# ---------------------------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------------------------


class _Invalid:
    def __repr__(self):  # pragma: no cover
        return '<invalid>'


_INVALID = _Invalid()


def _check_top(chk, data):
    """Check the top-level keys; return (name or None when invalid, moduleclass)."""
    chk.unknown_keys((), data, TOP_KEYS, {
        'toolchain': "unknown key 'toolchain' (the toolchain is always SYSTEM)",
    })
    for key in TOP_REQUIRED:
        if key not in data:
            chk.error((key,), 'missing required key', line=chk.smap.line(()))

    name = data.get('name')
    name_ok = 'name' in data and chk.matching(('name',), name, DISTRIBUTION_NAME, 'a valid software name')
    if 'homepage' in data and chk.matching(('homepage',), data['homepage'], HOMEPAGE_RE, 'an http(s) URL'):
        chk.no_problem(('homepage',), module_help_problem(data['homepage']))
    if 'description' in data and chk.string(('description',), data['description']):
        if CONTROL_RE.search(data['description']):
            chk.error(('description',), 'must not contain tabs or control characters')
        chk.no_problem(('description',), module_help_problem(data['description']))
    moduleclass = data.get('moduleclass', 'devel')
    if 'moduleclass' in data:
        chk.matching(('moduleclass',), moduleclass, MODULECLASS_RE, 'a valid module class (e.g. devel)')
    return (name if name_ok else None), moduleclass


EASYBUILD_5 = ("must be 5, for EasyBuild 5's names of easyconfig fields (%s), or left out, for names that "
               "EasyBuild 4.9 and 5 both read; not %%s" % easyconfig_names.renamed_fields())
EASYBUILD_5_WITH_4_9 = ("5 writes EasyBuild 5's names of easyconfig fields (%s), which EasyBuild 4.9 "
                        "does not read, but easybuild_4_9: true (line %%d) says the easyconfigs must work with "
                        "EasyBuild 4.9 too: remove one of the two" % easyconfig_names.renamed_fields())


def _check_easybuild(chk, data):
    """The EasyBuild whose names the easyconfigs use: '5' (easybuild: 5), or None: names that 4.9 and 5 both read
    (easybuild_4_9: true says they must)."""
    if 'easybuild_4_9' in data:
        chk.boolean(('easybuild_4_9',), data['easybuild_4_9'])
    if 'easybuild' not in data:
        return None
    value = data['easybuild']
    if str(value) != '5':
        chk.error(('easybuild',), EASYBUILD_5 % (chk.smap.raw.get(('easybuild',)) or kind(value)))
        return None
    if not chk.no_problem(('easybuild',), easyconfig_names.easybuild_5_problem()):
        return None
    if data.get('easybuild_4_9') is True:
        chk.error(('easybuild',), EASYBUILD_5_WITH_4_9 % chk.smap.key_line(('easybuild_4_9',)))
    return '5'


def _given_values(chk, path, mapping, allowed):
    """Validate the allowed keys of ``mapping``: {key: value, or _INVALID when the value is not valid}; a key under
    its old name counts as an invalid one under its new name (it is reported as renamed, and only so)."""
    values = {}
    for key, value in mapping.items():
        if key in allowed:
            values[key] = value if FIELDS_BY_KEY[key].check(chk, path + (key,), value) else _INVALID
        elif key in RENAMED_KEYS and RENAMED_KEYS[key] in allowed:
            values.setdefault(RENAMED_KEYS[key], _INVALID)
    return values


def _defaults_block(chk, path, raw, allowed, hints):
    """A validated mapping of defaults at ``path`` ({} when null or not a mapping)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        chk.error(path, 'must be a mapping, got %s' % kind(raw))
        return {}
    hints = dict(hints, **{k: '%r is not allowed in %s (set it per container)' % (k, path[0])
                           for k in CONTAINER_ONLY_KEYS})
    chk.unknown_keys(path, raw, allowed, dict(RENAMED_HINTS, **hints))
    return _given_values(chk, path, raw, allowed)


def _check_defaults(chk, data):
    """The validated ``defaults`` mapping ({} when absent or not a mapping)."""
    return _defaults_block(chk, ('defaults',), data.get('defaults'), DEFAULT_KEYS, {})


def _check_family_defaults(chk, data):
    """The validated ``family_defaults``: {family: {key: value}}."""
    raw = data.get('family_defaults')
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        chk.error(('family_defaults',), 'must be a mapping of image families to defaults, got %s' % kind(raw))
        return {}
    allowed = tuple(key for key in DEFAULT_KEYS if key != 'family')
    hints = {'family': "'family' is not allowed in family_defaults (set it in the container entry or in defaults)"}
    result = {}
    for family, block in raw.items():
        path = ('family_defaults', family)
        if family not in families.NAMES:
            chk.error(path, '%r is not an image family (allowed: %s)' % (str(family), ', '.join(families.NAMES)),
                      key_line=True)
            continue
        result[family] = _defaults_block(chk, path, block, allowed, hints)
    return result


def _container_entries(chk, data):
    """The raw container entries (a list; empty after an error)."""
    if 'containers' not in data:
        return []
    raw = data['containers']
    if not isinstance(raw, list):
        chk.error(('containers',), 'must be a non-empty list of container entries, got %s' % kind(raw))
        return []
    if not raw:
        chk.error(('containers',), 'must be a non-empty list of container entries')
    return raw


def _check_required(chk, cpath, values):
    """Every entry's required keys, and those its family needs (when the family is valid)."""
    needed = {fld.key for fld in FIELDS if fld.required}
    if values.get('family') is not _INVALID:
        needed.update(families.family(values).required(values))
    for fld in FIELDS:
        if fld.key in needed and fld.key not in values:
            chk.error(cpath + (fld.key,), 'missing required key (%s)' % fld.missing_hint(), line=chk.smap.line(cpath))


def _check_family_keys(chk, cpath, entry, values):
    """Keys of another image family than the entry's; then what the family finds wrong between the values."""
    family = families.family(values)
    for fld in FIELDS:
        if fld.families and fld.key in entry and family.NAME not in fld.families:
            chk.error(cpath + (fld.key,), '%r is only for family: %s (this entry is family: %s)'
                      % (fld.key, ', '.join(fld.families), family.NAME), key_line=True)
    for key, message in family.problems(values):
        chk.error(cpath + (key,), message)


def _check_container(chk, index, entry, defaults, family_defaults, name):
    """Validate one container entry; return its Container, or None after an error.

    Its values: the built-in defaults, then ``defaults``, then ``family_defaults`` of its family, then its own.
    """
    cpath = ('containers', index)
    if not isinstance(entry, dict):
        chk.error(cpath, 'must be a mapping, got %s' % kind(entry))
        return None
    before = len(chk.issues)
    chk.unknown_keys(cpath, entry, CONTAINER_KEYS, RENAMED_HINTS)
    given = _given_values(chk, cpath, entry, CONTAINER_KEYS)
    values = dict(defaults)
    values.update(family_defaults.get(given.get('family', defaults.get('family', families.DEFAULT)), {}))
    values.update(given)
    _check_required(chk, cpath, values)
    if values.get('family') is not _INVALID:
        _check_family_keys(chk, cpath, entry, values)
    if len(chk.issues) != before or name is None or _INVALID in values.values():
        return None
    resolved = {fld.key: fld.value(name, values) for fld in FIELDS}
    container = Container(name=name, index=index, line=chk.smap.line(cpath), **resolved)
    return container if _check_parameter_rules(chk, cpath, container) else None


def _check_parameter_rules(chk, cpath, container):
    """The easyblock's rules between its parameters, over the values the container's easyconfig gives them (and
    the easyblock's defaults): True if they find nothing wrong."""
    values = {name: parameter.default for name, parameter in PARAMETERS.items()}
    values.update(container.parameters)
    found = rule_problems(values)
    for name, problem in found:
        chk.error(cpath + (name,), problem)
    return not found


def load_spec(source):
    """Load and validate one spec file.

    Returns ``(spec, issues)``; ``spec`` is None when there are issues.  Unreadable files and invalid YAML are
    reported as a single issue as well.
    """
    try:
        data, smap = load_yaml(source)
    except LoadError as err:
        return None, [err.issue]

    chk = Checker(source, smap)
    for dpath, dline in smap.duplicates:
        chk.error(dpath, 'duplicate key %r' % str(dpath[-1]), line=dline)
    if not isinstance(data, dict):
        chk.error((), 'the spec must be a mapping with keys %s, got %s' % (', '.join(TOP_REQUIRED), kind(data)))
        return None, chk.issues

    name, moduleclass = _check_top(chk, data)
    easybuild_version = _check_easybuild(chk, data)
    defaults = _check_defaults(chk, data)
    family_defaults = _check_family_defaults(chk, data)
    containers, seen_files = [], {}
    for index, entry in enumerate(_container_entries(chk, data)):
        cont = _check_container(chk, index, entry, defaults, family_defaults, name)
        if cont is None:
            continue
        if cont.filename in seen_files:
            chk.error(('containers', index), 'would produce the same file %s as %s'
                      % (cont.filename, format_path(('containers', seen_files[cont.filename]))))
            continue
        seen_files[cont.filename] = index
        containers.append(cont)

    if chk.issues:
        return None, sorted(chk.issues, key=lambda issue: issue.line)
    spec = Spec(source=source, name=name, homepage=data['homepage'], description=data['description'],
                moduleclass=moduleclass, containers=containers, easybuild=easybuild_version)
    return spec, []


def load_specs(sources):
    """Load several spec files; return (specs, issues) with issues from all of them."""
    specs, issues = [], []
    for source in sources:
        spec, found = load_spec(source)
        issues.extend(found)
        if spec is not None:
            specs.append(spec)
    return specs, issues
