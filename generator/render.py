"""Rendering of validated specs into easyconfig text (jinja2 template + Python-literal helpers).

Every value that ends up in the easyconfig goes through ``repr()`` (directly or via the helpers below), so
quotes, backslashes and non-printable characters are always escaped correctly.
"""

import re
import textwrap

import jinja2

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
    env.globals['py_dict'] = py_dict
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


def py_list(name, items, flow=False):
    """``name = [...]`` assignment.

    Block style (default): one item per line.  Flow style: a single line if it fits in MAX_LINE characters,
    otherwise items are filled into indented lines.
    """
    items = list(items)
    if not items:
        return '%s = []' % name
    literals = [py(item) for item in items]
    one_line = '%s = [%s]' % (name, ', '.join(literals))
    if flow and len(one_line) <= MAX_LINE:
        return one_line
    lines = ['%s = [' % name]
    if flow:
        current = ''
        for lit in literals:
            candidate = (current + ' ' if current else '') + lit + ','
            if current and len(INDENT + candidate) > MAX_LINE:
                lines.append(INDENT + current)
                candidate = lit + ','
            current = candidate
        lines.append(INDENT + current)
    else:
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
    about = '(%s %s, ROCm %s, Python %s)' % (c.name, c.version, c.rocm, c.python)
    if c.components:
        about += ', with ' + ', '.join('%s %s' % item for item in c.components.items())
    lines.extend(_wrap(about + '.'))
    if c.release_dir:
        lines.extend(_wrap('A LUMI AI Factory image: the %s variant of the release in %s.'
                           % (c.image_variant, c.release_dir)))
    if c.pip_requirements:
        if len(c.pip_requirements) == 1:
            sentence = 'The pip requirement %s is installed' % c.pip_requirements[0]
        else:
            sentence = 'The pip requirements %s are installed' % _and_join(c.pip_requirements)
        sentence += ' in the virtual environment /user-software/venv/%s.' % c.venv
        lines.extend(_wrap(sentence))
    return '\n'.join(lines)


def whatis_description(spec):
    return 'Description: ' + ' '.join(spec.description.split())


# ---------------------------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------------------------


def _safe_comment(text):
    return ''.join(ch if ch.isprintable() else '?' for ch in text)


def render(spec, container):
    """Easyconfig text for one container of a validated spec."""
    template = environment().get_template('easyconfig.eb.j2')
    whatis = py_list('whatis', [whatis_description(spec)])
    text = template.render(
        spec=spec,
        c=container,
        spec_file=_safe_comment(spec.source_name),
        whatis=whatis,
        description=description_text(spec, container),
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
