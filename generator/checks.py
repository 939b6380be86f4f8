"""The checker primitives of spec validation: a Checker collects the Issues of one spec file (with the line of each
value from its SourceMap), and validators check a value of some kind (a string, one matching a pattern, a boolean, a
list of strings, a mapping of strings, a date, a file name), saying what YAML made of a value that is not one. The
field table (spec.py) builds on them."""

import datetime
import difflib
import re

from generator.easyblock import easyblock
from generator.yaml_source import Issue, format_path

# Matched from the start, as the easyblock's patterns are (pattern_problem): \Z, as $ would take a newline at the
# end; [0-9], as \d takes any Unicode digit.
DATE_RE = re.compile(r'[0-9]{8}\Z')
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
        raw = self.smap.raw.get(tuple(path))
        if raw is not None and value is not None and not isinstance(value, (list, dict)):
            reads = kind(value)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                reads += ' %r' % value
            self.error(path, 'must be a string, quote it: "%s" (unquoted, YAML reads it as %s)' % (raw, reads))
        else:
            self.error(path, 'must be a string, got %s' % kind(value))
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
        self.error(path, 'must be true or false, got %s' % kind(value))
        return False

    def string_list(self, path, value, item_check=None, unique=False):
        if not isinstance(value, list):
            self.error(path, 'must be a list of strings, got %s' % kind(value))
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
            self.error(path, 'must be a mapping, got %s' % kind(value))
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
