"""Rendering of validated specs into easyconfig text (jinja2 template + Python-literal helpers).

Every value that ends up in the easyconfig goes through ``repr()`` (directly or via the helpers below), so
quotes, backslashes and non-printable characters are always escaped correctly.
"""

import re
import textwrap
from collections import namedtuple

import jinja2

from generator import easyconfig_names
from singularitycontainer_src.parameters import container_venv_path, venv_name

MAX_LINE = 120
INDENT = '    '


def _environment():
    env = jinja2.Environment(
        loader=jinja2.PackageLoader('generator', 'templates'),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters['py'] = py
    env.filters['docstring'] = docstring
    env.globals['py_list'] = py_list
    env.globals['py_assignment'] = py_assignment
    return env


_ENV = None


def environment():
    global _ENV
    if _ENV is None:
        _ENV = _environment()
    return _ENV


# ---------------------------------------------------------------------------------------------------------------
# Python literal helpers
# ---------------------------------------------------------------------------------------------------------------


def py(value):
    """Python literal for a str/bool/int (repr-based, so always safely quoted)."""
    if isinstance(value, (str, bool, int)) or value is None:
        return repr(value)
    raise TypeError('cannot render %r as a simple Python literal' % (value,))


def _split_string(value, indent, suffix, width=MAX_LINE):
    """Lines of ``indent + repr(piece)`` whose pieces concatenate to ``value`` (implicit concatenation).

    The last line gets ``suffix``.  Splits after spaces when possible, else after '/', else anywhere.
    """
    single = indent + repr(value) + suffix
    if len(single) <= width:
        return [single]
    tokens = re.findall(r'[^ /]*[ /]|[^ /]+$', value)
    pieces = []
    current = ''
    for token in tokens:
        if current and len(indent + repr(current + token) + suffix) > width:
            pieces.append(current)
            current = ''
        while len(indent + repr(current + token) + suffix) > width and len(token) > 1:
            # a single token that does not fit: cut it
            cut = 1
            while cut < len(token) and len(indent + repr(current + token[:cut + 1]) + suffix) <= width:
                cut += 1
            pieces.append(current + token[:cut])
            current, token = '', token[cut:]
        current += token
    if current:
        pieces.append(current)
    lines = [indent + repr(piece) for piece in pieces]
    lines[-1] += suffix
    return lines


def py_list(name, items, one_line=True):
    """``name = [...]`` assignment: on one line if it fits in MAX_LINE characters (and one_line), else one item per
    line (a long string split into pieces on lines of their own)."""
    items = list(items)
    single = '%s = [%s]' % (name, ', '.join(py(item) for item in items))
    if not items or (one_line and len(single) <= MAX_LINE):
        return single
    lines = ['%s = [' % name]
    for item in items:
        lines.extend(_split_string(item, INDENT, ',') if isinstance(item, str) else [INDENT + py(item) + ','])
    lines.append(']')
    return '\n'.join(lines)


def py_dict(name, mapping):
    """``name = {...}`` assignment, one key per line, in the given (spec) order."""
    if not mapping:
        return '%s = {}' % name
    lines = ['%s = {' % name]
    for key, value in mapping.items():
        lines.append('%s%s: %s,' % (INDENT, py(key), py(value)))
    lines.append('}')
    return '\n'.join(lines)


def docstring(text):
    """Triple-quoted string literal with the text on its own lines.

    Backslashes and double quotes are escaped, so any text is safe inside the quotes.
    """
    escaped = text.replace('\\', '\\\\').replace('"', '\\"')
    return '"""\n%s\n"""' % escaped


# ---------------------------------------------------------------------------------------------------------------
# Description
# ---------------------------------------------------------------------------------------------------------------


def _wrap(line, width=MAX_LINE):
    if not line.strip():
        return ['']
    return textwrap.wrap(line, width=width, break_long_words=False, break_on_hyphens=False) or ['']


def _and_join(words):
    words = list(words)
    if len(words) == 1:
        return words[0]
    return '%s and %s' % (', '.join(words[:-1]), words[-1])


def description_text(spec, container):
    """The module description: the spec's description plus a paragraph about the container."""
    c = container
    lines = []
    for line in spec.description.strip().splitlines():
        lines.extend(_wrap(line.rstrip()))
    lines.append('')
    lines.extend(_wrap('Container image: %s' % c.sif))
    about = '(%s %s, %s)' % (c.name, c.version, ', '.join(c.family_module.versions(vars(c))))
    if c.container_components:
        about += ', with ' + ', '.join('%s %s' % item for item in c.container_components.items())
    lines.extend(_wrap(about + '.'))
    about_family = c.family_module.description(vars(c))
    if about_family:
        lines.extend(_wrap(about_family))
    if c.pip_requirements:
        if len(c.pip_requirements) == 1:
            sentence = 'The pip requirement %s is installed' % c.pip_requirements[0]
        else:
            sentence = 'The pip requirements %s are installed' % _and_join(c.pip_requirements)
        venv = container_venv_path(venv_name(c.name, c.container_venv))
        lines.extend(_wrap(sentence + ' in the virtual environment %s.' % venv))
    return '\n'.join(lines)


def whatis_description(spec):
    return 'Description: ' + ' '.join(spec.description.split())


# ---------------------------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------------------------


def _safe_comment(text):
    return ''.join(ch if ch.isprintable() else '?' for ch in text)


# One easyblock parameter that the easyconfig sets
Assignment = namedtuple('Assignment', 'name value comment')
PYTHON_CHECK_OFF = 'python_check: false in the spec; the sanity check skips the version'


def parameter_assignments(container):
    """The easyblock's parameters that the easyconfig sets (container.parameters), in the easyblock's order; the
    comment says why container_python_version is None (python_check: false)."""
    python_check_off = {'container_python_version': PYTHON_CHECK_OFF} if container.python_check is False else {}
    return [Assignment(name, value, python_check_off.get(name)) for name, value in container.parameters.items()]


def py_assignment(name, value, comment=None):
    """``name = value`` for any parameter's value: a list by py_list, a dict by py_dict, else on one line (with
    the comment)."""
    if isinstance(value, (list, tuple)):
        return py_list(name, value)
    if isinstance(value, dict):
        return py_dict(name, value)
    return '%s = %s' % (name, py(value)) + ('  # ' + comment if comment else '')


def render(spec, container):
    """Easyconfig text for one container of a validated spec."""
    template = environment().get_template('easyconfig.eb.j2')
    field = easyconfig_names.names(spec.easybuild)
    text = template.render(
        spec=spec,
        c=container,
        field=field,
        spec_file=_safe_comment(spec.source_name),
        whatis=py_list(field['whatis'], [whatis_description(spec)], one_line=False),
        description=description_text(spec, container),
        parameters=parameter_assignments(container),
    )
    lines = [line.rstrip() for line in text.split('\n')]
    while lines and lines[-1] == '':
        lines.pop()
    return '\n'.join(lines) + '\n'


def style_problems(text):
    """(line number, message) for lines of generated text that break the easyconfig style rules."""
    problems = []
    for number, line in enumerate(text.split('\n'), 1):
        if len(line) > MAX_LINE:
            problems.append((number, 'line longer than %d characters' % MAX_LINE))
        if '\t' in line:
            problems.append((number, 'line contains a tab'))
    return problems
