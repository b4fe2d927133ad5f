"""cmdline.py: the planner's command-line errors in tpusim's one format (docs/errors.md):
`<command line>:N:COL: error: MESSAGE` for argument N of the whole command (`tpusim` is 0,
`plan` 1), one line, control bytes escaped, exit status 2."""
import argparse
import re
import sys


def escape(s):
    """Control bytes (and DEL) as \\xHH, so that an echoed argument stays on one line and
    never reaches the terminal raw."""
    return "".join(c if (" " <= c and c != "\x7f" and not ("\x80" <= c <= "\x9f")) else "\\x%02x" % ord(c)
                   for c in str(s))


def fail(where, msg):
    """Writes one error line at `where` ("FILE:LINE:COL" or "<command line>:N:COL") and exits 2."""
    sys.stdout.flush()
    sys.stderr.write(escape(f"{where}: error: {msg}") + "\n")
    sys.exit(2)


def at(argv, base, flag, value=True):
    """"<command line>:N:1" for option `flag` in argv (argv[0] is argument `base` of the whole
    command): its value when `value` and the value is a separate argument, else the option;
    "<command line>:0:0" when the option is not there."""
    for i, x in enumerate(argv):
        if x == flag:
            return f"<command line>:{base + i + (1 if value and i + 1 < len(argv) else 0)}:1"
        if x.startswith(flag + "="):
            return f"<command line>:{base + i}:{len(flag) + 2 if value else 1}"
    return "<command line>:0:0"


def arg_fail(argv, base, flag, msg, value=True):
    fail(at(argv, base, flag, value), msg)


class Parser(argparse.ArgumentParser):
    """argparse with its errors as one located line (argparse prints the usage and a second line)."""

    def __init__(self, *args, argv=(), base=2, **kw):
        super().__init__(*args, **kw)
        self._argv, self._base = list(argv), base

    def error(self, message):
        argv, base = self._argv, self._base
        m = re.match(r"argument ([^:]+): (.*)", message, re.S)
        if m:
            names = m.group(1).split("/")
            value = not m.group(2).startswith("expected")
            for n in names:
                if n.startswith("-") and any(x == n or x.startswith(n + "=") for x in argv):
                    fail(at(argv, base, n, value), message)
            positional = [i for i, x in enumerate(argv) if not x.startswith("-")]
            fail(f"<command line>:{base + positional[0]}:1" if positional else "<command line>:0:0", message)
        m = re.match(r"unrecognized arguments: (\S+)", message)
        if m and m.group(1) in argv:
            fail(f"<command line>:{base + argv.index(m.group(1))}:1", message)
        fail("<command line>:0:0", message)
