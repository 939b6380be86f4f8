"""The checker primitives of spec validation: a Checker collects the Issues of one spec file (with the line of each
value from its SourceMap), and validators check a value of some kind (a string, one matching a pattern, a date, a
file name, a value of one of the easyblock's shapes), saying what YAML made of a value that is not one. The field
table (spec.py) builds on them."""

import datetime
import difflib
import re

from singularitycontainer_src.parameters import BOOL, Bool, DICT, PARAMETERS, STRING, pattern_problem
from generator.yaml_source import Issue, format_path

# Matched from the start, as the easyblock's patterns are (pattern_problem): \Z, as $ would take a newline at the
# end; [0-9], as \d takes any Unicode digit.
DATE_RE = re.compile(r'[0-9]{8}\Z')
# What the easyblock's shapes expect, in YAML's words where they differ from Python's
YAML_WORDS = {BOOL: 'true or false', DICT: 'a mapping'}
# EasyBuild writes the module's help and whatis (with the description and homepage) as Lua long strings [==[...]==]
# and refuses text with either bracket of one, when it makes the module: at the end of the install.
LUA_LONG_STRING_BRACKETS = ('[==[', ']==]')


def module_help_problem(text):
    """None if EasyBuild can show text in the module's help, else what is wrong."""
    for bracket in LUA_LONG_STRING_BRACKETS:
        if bracket in text:
            return ("contains %r, which EasyBuild refuses in the module's help (it writes the help as a Lua string "
                    "[==[...]==]); write it differently, e.g. %r" % (bracket, bracket[0] + ' ' + bracket[1:]))
    return None


def kind(value):
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


class Checker:
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
        self.not_a_string(path, value)
        return False

    def not_a_string(self, path, value):
        """Report that value is not a string, and what YAML made of it (quoted, it would be one)."""
        raw = self.smap.raw.get(tuple(path))
        if raw is not None and value is not None and not isinstance(value, (list, dict)):
            reads = kind(value)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                reads += ' %r' % value
            self.error(path, 'must be a string, quote it: "%s" (unquoted, YAML reads it as %s)' % (raw, reads))
        else:
            self.error(path, 'must be a string, got %s' % kind(value))

    def matching(self, path, value, regex, what, allow_empty=False):
        if not self.string(path, value, allow_empty=allow_empty):
            return False
        if allow_empty and value == '':
            return True
        return self.no_problem(path, pattern_problem(regex, what)(value))

    def boolean(self, path, value):
        return self.shape(path, value, Bool())

    # -- a value of one of the easyblock's shapes: the shape decides what is wrong, and where; this says it
    def shape(self, path, value, shape):
        """True if shape's walk finds nothing wrong with value; else report each problem it finds."""
        problems = shape.walk(value)
        for problem in problems:
            self.shape_problem(tuple(path) + problem.path, problem)
        return not problems

    def shape_problem(self, path, problem):
        """Report a problem of a shape's walk (Problem) at path, in YAML's words; a dict's key at its line."""
        if problem.text is not None:
            self.error(path, problem.text, key_line=problem.in_key)
        elif problem.in_key:
            self.error(path, '%r is not a string' % str(problem.value), key_line=True)
        elif problem.expected == STRING:
            self.not_a_string(path, problem.value)
        else:
            self.error(path, 'must be %s, got %s' % (YAML_WORDS.get(problem.expected, problem.expected),
                                                     kind(problem.value)))

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


def pattern(regex, what, allow_empty=False):
    """Validator: a string matching ``regex``; the error says the value is not ``what``."""
    def check(chk, path, value):
        return chk.matching(path, value, regex, what, allow_empty=allow_empty)
    return check


def problem_check(problem):
    """Validator: a string that ``problem`` (a check of the easyblock's or a family's) finds nothing wrong with."""
    def check(chk, path, value):
        return chk.string(path, value) and chk.no_problem(path, problem(value))
    return check


def rule(parameter):
    """Validator: the shape of the easyblock's parameter (one definition for both, PARAMETERS), for a value
    that a spec gives: null is none (a spec leaves the key out instead)."""
    shape = PARAMETERS[parameter].shape.given

    def check(chk, path, value):
        return chk.shape(path, value, shape)
    return check


def in_module_help(check):
    """Validator: ``check``, then module_help_problem for a value that the module's description shows (each entry
    of a list)."""
    def checked(chk, path, value):
        if not check(chk, path, value):
            return False
        entries = enumerate(value) if isinstance(value, list) else [(None, value)]
        return all([chk.no_problem(path if index is None else tuple(path) + (index,), module_help_problem(entry))
                    for index, entry in entries])
    return checked


def one_of(choices, what):
    """Validator: one of the strings ``choices``."""
    regex = re.compile(r'(%s)\Z' % '|'.join(re.escape(choice) for choice in choices))
    return pattern(regex, '%s (allowed: %s)' % (what, ', '.join(choices)))
