"""Requirement lines (pip_requirements): the distribution names they give."""
import re


# A line of a requirements file with a distribution name: 'name[extras] <version> ; <marker>' (PEP 508), or
# 'name @ URL'; a URL or a path has one only in an #egg= fragment. A name that is an archive's file name is a path.
REQUIREMENT_NAME = re.compile(r'([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(?:\[[^\]]*\])?\s*(?=$|[<>=!~;@(])')
EGG_FRAGMENT = re.compile(r'[#&]egg=([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)')
ARCHIVE = re.compile(r'.*\.(whl|zip|tar|tgz|tbz|txz|tlz|tar\.(gz|bz2|xz|lz|lzma))\Z', re.I)
EDITABLE = re.compile(r'(-e|--editable)(\s+|=)')


def requirement_name(line):
    """The distribution name a requirement line gives, or None (an option, a URL or a path without #egg=)."""
    line = re.sub(r'(^|\s)#.*$', '', line).strip()
    editable = EDITABLE.match(line)
    if editable or re.match(r'[^\s@]*[:/]', line):  # an editable, a URL, a path
        egg = EGG_FRAGMENT.search(line)
        return egg.group(1) if egg else None
    name = REQUIREMENT_NAME.match(line)
    if not name or ARCHIVE.match(name.group(1)):
        return None
    return name.group(1)


def requirement_names(requirement_lines):
    """Distribution names of the requirement lines, each once (options, and URLs and paths without #egg=, have
    none)."""
    names, seen = [], set()
    for line in requirement_lines:
        name = requirement_name(line)
        key = name and re.sub(r'[-_.]+', '-', name).lower()  # PEP 503: the same project
        if name and key not in seen:
            seen.add(key)
            names.append(name)
    return names
