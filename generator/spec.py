"""Loading and validation of generate-ec YAML specs.

A spec describes one software name (e.g. PyTorch) and a list of container images; every image becomes one
easyconfig.  Loading never raises for user errors: all problems are collected as :class:`Issue` objects so the
command line can report every one of them (with file, line and key path) before anything is written.
"""

import datetime
import difflib
import os
import re
from dataclasses import dataclass, field, make_dataclass
from typing import Any, Callable, Optional

import yaml

from generator import easyconfig_names, families
from generator.easyblock import easyblock

# ---------------------------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Issue:
    """One problem found in a spec: ``<file>:<line>: <path>: <message>``."""

    file: str
    line: int
    path: str
    message: str
    column: Optional[int] = None

    def __str__(self):
        if self.column is not None:
            return '%s:%d:%d: %s' % (self.file, self.line, self.column, self.message)
        if not self.line:
            return '%s: %s' % (self.file, self.message)
        if self.path:
            return '%s:%d: %s: %s' % (self.file, self.line, self.path, self.message)
        return '%s:%d: %s' % (self.file, self.line, self.message)


def format_path(path):
    """('containers', 1, 'date') -> 'containers[1].date'; () -> '(top level)'."""
    out = ''
    for part in path:
        if isinstance(part, int) and not isinstance(part, bool):
            out += '[%d]' % part
        else:
            out += ('.' if out else '') + str(part)
    return out or '(top level)'


# ---------------------------------------------------------------------------------------------------------------
# Data model
# ---------------------------------------------------------------------------------------------------------------


class _ContainerNames:
    """The names derived from a container's values (the base of :class:`Container`, built from FIELDS below)."""

    @property
    def family_module(self):
        return families.FAMILIES[self.family]

    @property
    def versionsuffix(self):
        suffix = '-rocm-%s-python-%s-singularity' % (self.rocm, self.container_python_version)
        suffix += self.family_module.suffix(vars(self))
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
# YAML loading with line numbers
# ---------------------------------------------------------------------------------------------------------------

_MERGE_TAG = 'tag:yaml.org,2002:merge'
# The YAML nodes that all aliases of a spec may stand for together: far more than a spec needs (PyTorch.yaml's come
# to a few dozen), far fewer than an alias bomb expands to (a "billion laughs": lists of aliases of lists of aliases,
# each level multiplying the last), which is refused at the alias that gets past them, before anything is expanded.
MAX_ALIASED_NODES = 100000
ALIAS_BOMB = ('the alias *%%s takes the spec past %d values copied by aliases (aliases of aliases multiply); a spec '
              'needs far fewer: use fewer or less deeply nested aliases' % MAX_ALIASED_NODES)
# An alias in its own anchor's value makes a value that contains itself: of no use in a spec, and, with aliases of
# the anchors around it, a bomb of its own.
RECURSIVE_ALIAS = ("the alias *%s is inside the value of its own anchor, which would contain itself; a spec has no "
                   "use for that: remove the alias or write the value out")


def _path_part(index):
    """The key path part of a node that the composer composes at ``index``: a list index, the text of a mapping key,
    or None (the document, or a mapping key itself)."""
    if isinstance(index, yaml.Node):
        return index.value if isinstance(index, yaml.ScalarNode) else '?'
    return index


def _children(node):
    if isinstance(node, yaml.MappingNode):
        return [child for pair in node.value for child in pair]
    return node.value if isinstance(node, yaml.SequenceNode) else []


class _LineLoader(yaml.SafeLoader):
    """SafeLoader that remembers explicitly duplicated mapping keys (plain SafeLoader silently keeps the last), and
    refuses an alias bomb."""

    def __init__(self, stream, source):
        super().__init__(stream)
        self.source = source
        self.duplicate_key_nodes = set()
        self.expanded_sizes = {}  # id(node): its nodes, with those of its aliases
        self.aliased_nodes = 0
        self.key_path = []

    def compose_node(self, parent, index):
        """Compose as SafeLoader does, counting the nodes that aliases stand for without expanding them."""
        self.key_path.append(_path_part(index))
        alias = self.peek_event() if self.check_event(yaml.AliasEvent) else None
        node = super().compose_node(parent, index)
        if alias is None:
            self.expanded_sizes[id(node)] = 1 + sum(self.expanded_sizes[id(child)] for child in _children(node))
        elif id(node) not in self.expanded_sizes:  # its anchor's value is still being composed
            self._refuse(alias, RECURSIVE_ALIAS)
        else:
            self.aliased_nodes += self.expanded_sizes[id(node)]
            if self.aliased_nodes > MAX_ALIASED_NODES:
                self._refuse(alias, ALIAS_BOMB)
        self.key_path.pop()
        return node

    def _refuse(self, alias, message):
        path = format_path(part for part in self.key_path if part is not None)
        raise LoadError(Issue(self.source, alias.start_mark.line + 1, path, message % alias.anchor))

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for key_node, _ in node.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.tag != _MERGE_TAG:
                    ident = (key_node.tag, key_node.value)
                    if ident in seen:
                        self.duplicate_key_nodes.add(id(key_node))
                    seen.add(ident)
        return super().construct_mapping(node, deep=deep)


class SourceMap:
    """Line numbers (1-based) and raw scalar text for every key path of a loaded document."""

    def __init__(self):
        self.value_lines = {}
        self.key_lines = {}
        self.raw = {}
        self.duplicates = []  # list of (path, line)

    def line(self, path):
        """Line of the value at ``path`` (falls back to the closest known ancestor)."""
        path = tuple(path)
        while path:
            if path in self.value_lines:
                return self.value_lines[path]
            path = path[:-1]
        return self.value_lines.get((), 1)

    def key_line(self, path):
        """Line of the key naming ``path`` (for mapping entries), else the value line."""
        path = tuple(path)
        return self.key_lines.get(path) or self.line(path)


def _walk(loader, node, path, smap):
    smap.value_lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.ScalarNode):
        smap.raw.setdefault(path, node.value)
    elif isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue
            try:
                key = loader.construct_object(key_node, deep=True)
            except yaml.YAMLError:  # pragma: no cover - the document constructed fine already
                key = key_node.value
            kpath = path + (key,)
            if id(key_node) in loader.duplicate_key_nodes:
                smap.duplicates.append((kpath, key_node.start_mark.line + 1))
            smap.key_lines[kpath] = key_node.start_mark.line + 1
            _walk(loader, value_node, kpath, smap)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(loader, item, path + (i,), smap)


class LoadError(Exception):
    """Spec file could not be read or parsed; ``issue`` holds the message."""

    def __init__(self, issue):
        super().__init__(str(issue))
        self.issue = issue


def load_yaml(path):
    """Safe-load ``path``; return (data, SourceMap). Raise LoadError for unreadable files or invalid YAML."""
    try:
        with open(path, 'rb') as handle:
            raw = handle.read()
    except FileNotFoundError:
        raise LoadError(Issue(path, 0, '', 'no such spec file')) from None
    except OSError as err:
        raise LoadError(Issue(path, 0, '', 'cannot read spec file: %s' % (err.strerror or err))) from None
    try:
        text = raw.decode('utf-8')
    except UnicodeDecodeError as err:
        raise LoadError(Issue(path, 0, '', 'cannot read spec file: not UTF-8 (%s)' % err.reason)) from None

    loader = _LineLoader(text, path)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
        smap = SourceMap()
        if node is not None:
            _walk(loader, node, (), smap)  # the text's nodes, and at most MAX_ALIASED_NODES more from aliases
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        problem = err.problem or err.context or 'cannot parse'
        if err.problem and err.context:
            problem = '%s %s' % (err.context, err.problem)
        line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        raise LoadError(Issue(path, line, '', 'invalid YAML: %s' % problem, column=col)) from None
    except yaml.YAMLError as err:
        raise LoadError(Issue(path, 1, '', 'invalid YAML: %s' % err, column=1)) from None
    finally:
        loader.dispose()
    return data, smap


# ---------------------------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------------------------

TOP_KEYS = ('name', 'homepage', 'description', 'moduleclass', 'easybuild', 'easybuild_4_9', 'defaults',
            'family_defaults', 'containers')
TOP_REQUIRED = ('name', 'homepage', 'description', 'containers')

# Matched from the start, as the easyblock's patterns are (pattern_problem): \Z, as $ would take a newline at the
# end; [0-9], as \d takes any Unicode digit.
DATE_RE = re.compile(r'[0-9]{8}\Z')
SHA256_RE = re.compile(r'[0-9a-f]{64}\Z')
MODULECLASS_RE = re.compile(r'[a-z][a-z0-9_]*\Z')
HOMEPAGE_RE = re.compile(r'https?://\S+\Z')
CONTROL_RE = re.compile(r'[\x00-\x09\x0b-\x1f\x7f]')
# EasyBuild writes the module's help and whatis (with the description and homepage) as Lua long strings [==[...]==]
# and refuses text with either bracket of one, when it makes the module: at the end of the install.
LUA_LONG_STRING_BRACKETS = ('[==[', ']==]')

# The spec's keys for easyblock parameters are the parameter names; these were shorter once
RENAMED_KEYS = {'bind': 'container_bind', 'env': 'container_env', 'env_defaults': 'container_env_defaults',
                'venv': 'container_venv', 'python': 'container_python_version', 'components': 'container_components'}
RENAMED = "%r is now %r: rename it (a spec's keys for the easyblock's parameters are the parameter names)"
# The parameters that name the image and the easyconfig: every entry gives them
NAMING_PARAMETERS = ('container_python_version',)
# Parameters whose values the module's description shows as they are (the others there cannot hold a [ at all)
DESCRIBED_PARAMETERS = ('pip_requirements',)


def module_help_problem(text):
    """None if EasyBuild can show text in the module's help, else what is wrong."""
    for bracket in LUA_LONG_STRING_BRACKETS:
        if bracket in text:
            return ("contains %r, which EasyBuild refuses in the module's help (it writes the help as a Lua string "
                    "[==[...]==]); write it differently, e.g. %r" % (bracket, bracket[0] + ' ' + bracket[1:]))
    return None


def _kind(value):
    if value is None:
        return 'null (an empty value)'
    if isinstance(value, bool):
        return 'a boolean'
    if isinstance(value, int):
        return 'an integer'
    if isinstance(value, float):
        return 'a float'
    if isinstance(value, str):
        return 'a string'
    if isinstance(value, list):
        return 'a list'
    if isinstance(value, dict):
        return 'a mapping'
    if isinstance(value, datetime.datetime):
        return 'a timestamp'
    if isinstance(value, datetime.date):
        return 'a date'
    return 'a %s' % type(value).__name__


class _Checker:
    """Collects issues for one spec file."""

    def __init__(self, source, smap):
        self.source = source
        self.smap = smap
        self.issues = []

    # -- reporting
    def error(self, path, message, line=None, key_line=False):
        if line is None:
            line = self.smap.key_line(path) if key_line else self.smap.line(path)
        self.issues.append(Issue(self.source, line, format_path(path), message))

    # -- scalar checks; each returns True when the value is acceptable
    def string(self, path, value, allow_empty=False):
        if isinstance(value, str):
            if not allow_empty and not value.strip():
                self.error(path, 'must not be empty')
                return False
            return True
        raw = self.smap.raw.get(tuple(path))
        if raw is not None and value is not None and not isinstance(value, (list, dict)):
            reads = _kind(value)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                reads += ' %r' % value
            self.error(path, 'must be a string, quote it: "%s" (unquoted, YAML reads it as %s)' % (raw, reads))
        else:
            self.error(path, 'must be a string, got %s' % _kind(value))
        return False

    def matching(self, path, value, regex, what, allow_empty=False):
        if not self.string(path, value, allow_empty=allow_empty):
            return False
        if allow_empty and value == '':
            return True
        return self.no_problem(path, easyblock.pattern_problem(regex, what)(value))

    def boolean(self, path, value):
        if isinstance(value, bool):
            return True
        self.error(path, 'must be true or false, got %s' % _kind(value))
        return False

    def string_list(self, path, value, item_check=None, unique=False):
        if not isinstance(value, list):
            self.error(path, 'must be a list of strings, got %s' % _kind(value))
            return False
        ok = True
        seen = {}
        for i, item in enumerate(value):
            ipath = tuple(path) + (i,)
            if item_check is not None:
                good = item_check(ipath, item)
            else:
                good = self.string(ipath, item)
            ok = ok and good
            if good and unique:
                if item in seen:
                    self.error(ipath, '%r is listed twice (also at index %d)' % (item, seen[item]))
                    ok = False
                else:
                    seen[item] = i
        return ok

    def string_map(self, path, value, key_problem, value_check):
        if not isinstance(value, dict):
            self.error(path, 'must be a mapping, got %s' % _kind(value))
            return False
        ok = True
        for key, item in value.items():
            kpath = tuple(path) + (key,)
            problem = key_problem(key if isinstance(key, str) else str(key))
            if not isinstance(key, str) and not problem:
                problem = '%r is not a string' % str(key)
            if problem:
                self.error(kpath, problem, key_line=True)
                ok = False
            ok = value_check(kpath, item) and ok
        return ok

    def no_problem(self, path, problem):
        """True if problem (a rule's finding, or None) is None; else report it."""
        if problem:
            self.error(path, problem)
            return False
        return True

    def unknown_keys(self, path, mapping, allowed, forbidden_hint=None):
        ok = True
        for key in mapping:
            if key in allowed:
                continue
            kpath = tuple(path) + (key,)
            skey = str(key)
            if forbidden_hint and key in forbidden_hint:
                msg = forbidden_hint[key]
            else:
                msg = 'unknown key %r' % skey
                close = difflib.get_close_matches(skey, allowed, n=1)
                if close:
                    msg += " (did you mean '%s'?)" % close[0]
                else:
                    msg += ' (allowed: %s)' % ', '.join(sorted(allowed))
            self.error(kpath, msg, key_line=True)
            ok = False
        return ok

    # -- field validators: one per kind of value, used by the FIELDS table below ---------------------------------
    def date(self, path, value):
        if not self.matching(path, value, DATE_RE, 'YYYYMMDD'):
            return False
        try:
            datetime.datetime.strptime(value, '%Y%m%d')
        except ValueError:
            self.error(path, '%r is not a valid date' % value)
            return False
        return True

    def sif(self, path, value):
        if not self.string(path, value):
            return False
        if '/' in value or not value.endswith('.sif') or not value.isprintable() or value != value.strip():
            self.error(path, '%r is not a plain file name ending in .sif' % value)
            return False
        return True


def _pattern(regex, what, allow_empty=False):
    """Validator: a string matching ``regex``; the error says the value is not ``what``."""
    def check(chk, path, value):
        return chk.matching(path, value, regex, what, allow_empty=allow_empty)
    return check


def _problem_check(problem):
    """Validator: a string that ``problem`` (a check of the easyblock's or a family's) finds nothing wrong with."""
    def check(chk, path, value):
        return chk.string(path, value) and chk.no_problem(path, problem(value))
    return check


def _rule(parameter):
    """Validator: the easyblock's rule for the easyconfig parameter that this key becomes (one definition for both,
    easyblock.PARAMETERS), after generate-ec's own type checks, which can tell what YAML made of a value.  An empty
    text is refused as such (but for a dict's values), unless the rule takes it."""
    rule = easyblock.PARAMETERS[parameter]

    def text(chk, path, value, check, empty_ok):
        return chk.string(path, value, allow_empty=empty_ok) and chk.no_problem(path, check(value) if check else None)

    def check(chk, path, value):
        if rule.shape == 'bool':
            return chk.boolean(path, value)
        if rule.shape == 'list':
            return chk.string_list(path, value, lambda ipath, item: text(chk, ipath, item, rule.check, False),
                                   unique=rule.unique)
        if rule.shape == 'dict':
            return chk.string_map(path, value, rule.check,
                                  lambda kpath, item: text(chk, kpath, item, rule.value_check, True))
        return text(chk, path, value, rule.check, rule.check is None or rule.check('') is None)
    return check


def _in_module_help(check):
    """Validator: ``check``, then module_help_problem for a value that the module's description shows (each entry
    of a list)."""
    def checked(chk, path, value):
        if not check(chk, path, value):
            return False
        entries = enumerate(value) if isinstance(value, list) else [(None, value)]
        return all([chk.no_problem(path if index is None else tuple(path) + (index,), module_help_problem(entry))
                    for index, entry in entries])
    return checked


def _one_of(choices, what):
    """Validator: one of the strings ``choices``."""
    regex = re.compile(r'(%s)\Z' % '|'.join(re.escape(choice) for choice in choices))
    return _pattern(regex, '%s (allowed: %s)' % (what, ', '.join(choices)))


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
    written), or a function ``(name, values)`` computing it from the entry's other values.  A key with a
    ``family`` may only be given for images of that family.
    """

    key: str
    where: str
    check: Callable[..., bool]
    required: bool = False
    default: Any = None
    family: Optional[str] = None

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
    check = _rule(name)
    return Field(name, SHARED, _in_module_help(check) if name in DESCRIBED_PARAMETERS else check,
                 required=name in NAMING_PARAMETERS, default=_derived(name))


FIELDS = (
    (Field('version', CONTAINER, _pattern(easyblock.VERSION, 'a valid version (e.g. 2.7.1)'), required=True),
     Field('date', CONTAINER, _Checker.date, default=_derived('date')))
    + tuple(Field(key, CONTAINER, _problem_check(problem), family=family.NAME)
            for family in families.FAMILIES.values() for key, problem in family.KEYS.items())
    + (Field('sif', CONTAINER, _in_module_help(_Checker.sif), default=_derived('sif')),
       Field('checksum', CONTAINER, _pattern(SHA256_RE, 'a sha256 checksum (64 lowercase hex digits)')),
       Field('family', SHARED, _one_of(families.NAMES, 'an image family'), default=families.DEFAULT),
       Field('rocm', SHARED, _pattern(easyblock.VERSION, 'a valid ROCm version (e.g. 6.2.4)'), required=True),
       Field('variant', SHARED, _pattern(easyblock.DISTRIBUTION_NAME,
                                         'a valid variant (letters, digits, _.+-; may be empty)', allow_empty=True),
             default=''),
       Field('python_check', SHARED, _Checker.boolean))
    + tuple(_parameter_field(name) for name in easyblock.PARAMETERS)
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
    name_ok = 'name' in data and chk.matching(('name',), name, easyblock.DISTRIBUTION_NAME, 'a valid software name')
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
        chk.error(('easybuild',), EASYBUILD_5 % (chk.smap.raw.get(('easybuild',)) or _kind(value)))
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
        chk.error(path, 'must be a mapping, got %s' % _kind(raw))
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
        chk.error(('family_defaults',), 'must be a mapping of image families to defaults, got %s' % _kind(raw))
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
        chk.error(('containers',), 'must be a non-empty list of container entries, got %s' % _kind(raw))
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
        if fld.family and fld.key in entry and fld.family != family.NAME:
            chk.error(cpath + (fld.key,), '%r is only for family: %s (this entry is family: %s)'
                      % (fld.key, fld.family, family.NAME), key_line=True)
    for key, message in family.problems(values):
        chk.error(cpath + (key,), message)


def _check_container(chk, index, entry, defaults, family_defaults, name):
    """Validate one container entry; return its Container, or None after an error.

    Its values: the built-in defaults, then ``defaults``, then ``family_defaults`` of its family, then its own.
    """
    cpath = ('containers', index)
    if not isinstance(entry, dict):
        chk.error(cpath, 'must be a mapping, got %s' % _kind(entry))
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
    return Container(name=name, index=index, line=chk.smap.line(cpath), **resolved)


def load_spec(source):
    """Load and validate one spec file.

    Returns ``(spec, issues)``; ``spec`` is None when there are issues.  Unreadable files and invalid YAML are
    reported as a single issue as well.
    """
    try:
        data, smap = load_yaml(source)
    except LoadError as err:
        return None, [err.issue]

    chk = _Checker(source, smap)
    for dpath, dline in smap.duplicates:
        chk.error(dpath, 'duplicate key %r' % str(dpath[-1]), line=dline)
    if not isinstance(data, dict):
        chk.error((), 'the spec must be a mapping with keys %s, got %s' % (', '.join(TOP_REQUIRED), _kind(data)))
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
