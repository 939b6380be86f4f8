"""Text: quoting user text for each language (bash, Lua, Tcl), and filling templates."""
import re
import shlex


def printable(text):
    """text with what a terminal would not print (escape sequences, newlines) as '?': for what others wrote."""
    return ''.join(char if char.isprintable() else '?' for char in text)


def sh_str(value):
    """Quote a string as one bash word that is taken literally."""
    return shlex.quote(value)


def sh_quoted(value):
    """Quote a string as one bash word in single quotes, also where it needs none (a word shellcheck takes for what
    it says: venv-pip, say)."""
    return "'%s'" % value.replace("'", "'\"'\"'")


def lua_str(value):
    """Quote a string as a Lua string literal."""
    escaped = value.replace('\\', '\\\\').replace('"', '\\"').replace('\n', '\\n').replace('\r', '\\r')
    return '"%s"' % escaped


def tcl_str(value):
    """Quote a string as a Tcl word that is taken literally."""
    escaped = re.sub(r'([\\"$\[\]{}])', r'\\\1', value).replace('\n', '\\n').replace('\r', '\\r')
    return '"%s"' % escaped


PLACEHOLDER = re.compile(r'@([a-z][a-z0-9_]*)@')


def fill_template(template, **values):
    """The template with each @name@ replaced by values[name], which must be quoted for the template's language
    already. A placeholder without a value, or a value without a placeholder, is an error."""
    used = set()

    def substitute(match):
        name = match.group(1)
        if name not in values:
            raise ValueError("Template placeholder @%s@ has no value" % name)
        used.add(name)
        return values[name]

    text = PLACEHOLDER.sub(substitute, template)
    unused = sorted(set(values) - used)
    if unused:
        raise ValueError("Template has no placeholder for %s" % ', '.join('@%s@' % name for name in unused))
    return text
