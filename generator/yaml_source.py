"""A spec's YAML, read with the place of every value: the line of each key path (SourceMap) for messages of the form
``<file>:<line>: <path>: <message>`` (Issue), explicitly duplicated keys, and a guard against alias bombs (aliases of
aliases, or an alias inside its own anchor), refused before anything is expanded."""

import os
import stat
from dataclasses import dataclass
from typing import Optional

import yaml

# ---------------------------------------------------------------------------------------------------------------
# Problems and where they are
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


MAX_SPEC_BYTES = 16 << 20  # far more than any spec: what is larger (/dev/zero, an image given by mistake) is not one


def _file_kind(mode):
    """What a file of this mode is, in words."""
    kinds = [(stat.S_ISDIR, 'a directory'), (stat.S_ISFIFO, 'a FIFO'), (stat.S_ISCHR, 'a character device'),
             (stat.S_ISBLK, 'a block device'), (stat.S_ISSOCK, 'a socket')]
    return next((words for test, words in kinds if test(mode)), 'not a regular file')


def load_yaml(path):
    """Safe-load ``path``; return (data, SourceMap). Raise LoadError for unreadable files or invalid YAML."""
    try:
        # (without waiting: a FIFO would wait for a writer for ever; checked to be a file before it is read)
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            os.close(descriptor)
            raise LoadError(Issue(path, 0, '', 'not a spec file: a spec is a regular file of YAML, this is %s'
                                  % _file_kind(mode)))
        with os.fdopen(descriptor, 'rb') as handle:
            raw = handle.read(MAX_SPEC_BYTES + 1)
    except FileNotFoundError:
        raise LoadError(Issue(path, 0, '', 'no such spec file')) from None
    except OSError as err:
        raise LoadError(Issue(path, 0, '', 'cannot read spec file: %s' % (err.strerror or err))) from None
    if len(raw) > MAX_SPEC_BYTES:
        raise LoadError(Issue(path, 0, '', 'not a spec file: larger than %d MiB (a spec has a few KiB of YAML)'
                              % (MAX_SPEC_BYTES >> 20)))
    try:
        text = raw.decode('utf-8')
    except UnicodeDecodeError as err:
        raise LoadError(Issue(path, 0, '', 'cannot read spec file: not UTF-8 (%s)' % err.reason)) from None

    loader = None
    try:
        loader = _LineLoader(text, path)  # (its reader refuses a control character here: ReaderError)
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
    except yaml.reader.ReaderError as err:
        line = text.count('\n', 0, err.position) + 1
        column = err.position - (text.rfind('\n', 0, err.position) + 1) + 1
        raise LoadError(Issue(path, line, '', 'invalid YAML: the character U+%04X (a control character) is not '
                              'allowed in a spec; remove it' % err.character, column=column)) from None
    except yaml.YAMLError as err:
        raise LoadError(Issue(path, 1, '', 'invalid YAML: %s' % err, column=1)) from None
    finally:
        if loader is not None:
            loader.dispose()
    return data, smap
