"""Spec editing: a spec entry as YAML text, and appending entries to a spec file as text (its comments and layout
stay), all or none, refused when the spec has an image already (same_image) or would not load with them."""

import dataclasses
import json
import re

from generator import files
from generator.errors import GenerateError
from generator.inspect_image import image_name
from generator.spec import load_spec


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
    for name, value in (('version', facts.version), ('container_python_version', facts.python)):
        lines.append('%s%s: %s' % (key, name, _scalar(value)))
    if facts.family.PLATFORM:
        lines.append('%s%s: %s' % (key, facts.family.PLATFORM.key, _scalar(facts.platform)))
        if facts.platform_note:
            lines[-1] += '  # ' + facts.platform_note
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
        raise GenerateError('%s: no block list "containers:" (the key on a line of its own, its entries below) to '
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
        raise GenerateError('%s has errors, so nothing was appended; fix them first:\n%s'
                            % (spec_path, '\n'.join(str(issue) for issue in issues)))
    for container in spec.containers:
        if same_image(container, family, keys):
            raise GenerateError('%s:%d: %s is this image already (%s); nothing appended'
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
        raise GenerateError('%s: with the %s appended the spec would not load, so nothing was appended:\n%s'
                            % (spec_path, 'entry' if len(all_facts) == 1 else 'entries',
                               '\n'.join(found) or 'an entry is not among its containers'))
    files.commit(tmp, spec_path)
    return [found[0] for found in added]


def append_entry(spec_path, facts):
    """Append the image's entry to the containers of the spec file, as text (comments and layout stay)."""
    return append_entries(spec_path, [facts])[0]
