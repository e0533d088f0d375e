"""``#SBATCH`` lines read the way sbatch reads them (Slurm 22.05), for the ``dmlstudy slurm --sbatch`` guard.

The guard must see the options sbatch will set, no more and no fewer: a second reading (``shlex``, say) that differs
from sbatch's lets a line pass the guard and still set what the guard refuses. sbatch's own reading has two steps,
both copied here rather than approximated:

- the words (``get_argument`` in src/sbatch/opt.c): white space is ASCII's; ``'`` and ``"`` group, and inside either a
  backslash still escapes the next character (so ``'don\\'t'`` is one word, and ``'\\' #'`` does not end at the
  second quote); an unquoted, unescaped ``#`` ends the line; an empty word (``''``) or a ``hetjob`` word ends the
  line too; a word that starts with ``:`` or an unclosed quote makes sbatch refuse the script;
- the options (``getopt_long`` with sbatch's table, src/common/slurm_opt.c): all the script's lines are one argument
  list, so an option missing its value takes the next line's first word; short options cluster (``-Ht5`` is
  ``-H -t 5``, ``-Qa0-3`` is ``-Q -a 0-3``); a long option may be any unique prefix (``--arr``), and an alias is its
  option (``--tasks-per-node`` is ``--ntasks-per-node``); the first word that is no option ends the options, and
  sbatch then refuses the script.

tests/study/deploy/test_sbatch_reader.py feeds hostile lines to a real sbatch 22.05 and checks that it read what
:func:`read_options` reads.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EARLY_PASS", "SbatchOption", "SbatchReadError", "read_options"]

#: sbatch 22.05's options (from src/common/slurm_opt.c): ``name`` or ``name/x`` with its short letter ``x``.
_NO_VALUE = (
    "contiguous help/h hold/H ignore-pbs no-requeue overcommit/O oversubscribe/s parsable quiet/Q reboot requeue "
    "spread-job test-only use-min-nodes verbose/v version/V usage wait/W"
)
_OPTIONAL_VALUE = "exclusive get-user-env nice no-kill/k propagate"  # a value only after "=" (or attached, -kVALUE)
_VALUE = (
    "account/A acctg-freq array/a batch begin/b bb bbf cluster-constraint chdir/D cluster clusters/M comment container "
    "context constraint/C core-spec/S cores-per-socket cpu-freq cpus-per-gpu cpus-per-task/c deadline delay-boot "
    "dependency/d distribution/m error/e exclude/x export export-file extra-node-info/B gid gpu-bind gpu-freq gpus/G "
    "gpus-per-node gpus-per-socket gpus-per-task gres gres-flags hint input/i job-name/J kill-on-invalid-dep "
    "licenses/L mail-type mail-user mcs-label mem mem-bind mem-per-cpu mem-per-gpu mincpus network nodefile/F "
    "nodelist/w nodes/N ntasks/n ntasks-per-core ntasks-per-gpu ntasks-per-node ntasks-per-socket ntasks-per-tres "
    "open-mode output/o partition/p power prefer priority profile qos/q reservation signal sockets-per-node switches "
    "tasks-per-node thread-spec threads-per-core time/t time-min tmp uid wait-all-nodes wckey wrap"
)
#: Two names of one option (one ``val`` in sbatch's table): the second is read as the first.
_ALIASES = {"tasks-per-node": "ntasks-per-node"}
#: Options sbatch acts on only on its own command line: in a script it reads them (and their values) and ignores them.
EARLY_PASS = frozenset({"--help", "--usage", "--verbose", "--version", "--wrap", "--quiet"})
#: What sbatch reads its words as separated by: C's ``isspace`` (ASCII only; U+00A0 is part of a word).
_BLANKS = " \t\n\v\f\r"


def _table() -> tuple[dict[str, str], dict[str, tuple[str, str]]]:
    """Long name -> its kind ("", ":" or "::", as in getopt), and short letter -> (long name, kind)."""
    long: dict[str, str] = {}
    short: dict[str, tuple[str, str]] = {}
    for kind, names in (("", _NO_VALUE), ("::", _OPTIONAL_VALUE), (":", _VALUE)):
        for entry in names.split():
            name, _, letter = entry.partition("/")
            long[name] = kind
            if letter:
                short[letter] = (name, kind)
    return long, short


_LONG, _SHORT = _table()


class SbatchReadError(ValueError):
    """sbatch would refuse the script at this line (the message says why, naming no line: the caller does)."""

    def __init__(self, line: str, why: str) -> None:
        super().__init__(why)
        self.line = line
        self.why = why


@dataclass(frozen=True)
class SbatchOption:
    """One option as sbatch reads it: ``name`` its long name (``--time``), ``value`` (``None`` for none),
    ``written`` as the line wrote it (``-t``, ``--tim``) and ``line`` the line it is on."""

    name: str
    value: str | None
    written: str
    line: str


def read_options(lines: list[str]) -> list[SbatchOption]:
    """The options that ``#SBATCH`` ``lines`` (without their ``#SBATCH``) set, in order, as sbatch 22.05 reads them.

    Raises :class:`SbatchReadError` where sbatch would refuse the script. A long option sbatch 22.05 does not have is
    read as a site's plugin option (SPANK, e.g. ``--container-image``) if its value follows ``=``; without one, whether
    it takes the next word is unknown, so it is refused."""
    words = [(word, line) for line in lines for word in _line_words(line)]
    options: list[SbatchOption] = []
    i = 0
    while i < len(words):
        word, line = words[i]
        if word == "--":
            raise SbatchReadError(line, "-- ends sbatch's options, and sbatch refuses any word after it")
        if not word.startswith("-") or word == "-":
            raise SbatchReadError(line, f"{word!r} is not an sbatch option (sbatch stops there and refuses the script)")
        read, i = _long_option(words, i) if word.startswith("--") else _short_options(words, i)
        options += read
    return options


def _line_words(line: str) -> list[str]:
    """The words sbatch reads on one line (``get_argument``, called until it returns none)."""
    words: list[str] = []
    i = 0
    while True:
        while i < len(line) and line[i] in _BLANKS:
            i += 1
        if _separator_at(line, i):
            if not words:
                raise SbatchReadError(line, "a line starting with hetjob starts a heterogeneous job's next component")
            return words  # sbatch blanks the word out, and get_argument then returns nothing: the line ends
        if line[i : i + 1] == ":":
            raise SbatchReadError(line, "sbatch refuses a word that starts with ':'")
        word, i = _word(line, i)
        if word is None:
            return words
        words.append(word)


def _separator_at(line: str, i: int) -> bool:
    """``hetjob`` or ``packjob`` (any case, ASCII) at ``i``, ending the line or followed by white space."""
    for separator in ("hetjob", "packjob"):
        text = line[i : i + len(separator)]
        end = i + len(separator)
        if text.isascii() and text.lower() == separator and (end == len(line) or line[end] in _BLANKS):
            return True
    return False


def _word(line: str, i: int) -> tuple[str | None, int]:
    """One word from ``i`` and where reading stopped; ``None`` when it has no character (``''``, ``#``, the end)."""
    chars: list[str] = []
    quote = ""
    escaped = False
    while i < len(line) and (quote or line[i] not in _BLANKS):
        c = line[i]
        i += 1
        if escaped:
            escaped = False
        elif c == "\\":
            escaped = True  # inside quotes too: sbatch's rule, not the shell's
            continue
        elif quote:
            if c == quote:
                quote = ""
                continue
        elif c in "'\"":
            quote = c
            continue
        elif c == "#":
            return ("".join(chars) or None), i - 1  # the rest of the line is a comment
        chars.append(c)
    if quote:
        raise SbatchReadError(line, f"an unmatched {quote} (sbatch refuses the script)")
    return ("".join(chars) or None), i


def _long_option(words: list[tuple[str, str]], i: int) -> tuple[list[SbatchOption], int]:
    """``--name``, ``--name=value`` or ``--name value`` at ``words[i]`` (glibc's ``process_long_option``)."""
    word, line = words[i]
    written, eq, value = word[2:].partition("=")
    name = _long_name(written, line)
    if name is None:  # not sbatch's: a site's plugin option, if anything
        if not eq:
            raise SbatchReadError(
                line,
                f"--{written} is no sbatch 22.05 option, and a site's plugin option is read only as --{written}=VALUE",
            )
        return [SbatchOption(f"--{written}", value, f"--{written}", line)], i + 1
    kind = _LONG[name]
    if eq and not kind:
        raise SbatchReadError(line, f"--{written} takes no value (sbatch refuses --{written}=)")
    if not eq and kind == ":":
        if i + 1 == len(words):
            raise SbatchReadError(line, f"--{written} needs a value")
        return [SbatchOption(f"--{_ALIASES.get(name, name)}", words[i + 1][0], f"--{written}", line)], i + 2
    found = SbatchOption(f"--{_ALIASES.get(name, name)}", value if eq else None, f"--{written}", line)
    return [found], i + 1


def _long_name(written: str, line: str) -> str | None:
    """The option ``--written`` names: its exact name, else the one option it is a prefix of (two names of one
    option count once); ``None`` for none."""
    if written in _LONG:
        return written
    if not written:
        raise SbatchReadError(line, "--= names no option: sbatch refuses it")
    meant = sorted({_ALIASES.get(n, n) for n in _LONG if n.startswith(written)})
    if len(meant) > 1:
        named = " or ".join(f"--{m}" for m in meant[:4]) + (f" ({len(meant)} options)" if len(meant) > 4 else "")
        raise SbatchReadError(line, f"--{written} abbreviates {named}: sbatch refuses it")
    return meant[0] if meant else None


def _short_options(words: list[tuple[str, str]], i: int) -> tuple[list[SbatchOption], int]:
    """One word of short options, clustered (``-Ht5``: ``-H``, then ``-t`` with ``5``), as getopt reads them."""
    word, line = words[i]
    found: list[SbatchOption] = []
    for at in range(1, len(word)):
        letter, rest = word[at], word[at + 1 :]
        if letter not in _SHORT:
            raise SbatchReadError(line, f"-{letter} is no sbatch option")
        name, kind = _SHORT[letter]
        if not kind:
            found.append(SbatchOption(f"--{name}", None, f"-{letter}", line))
            continue
        if rest or kind == "::":
            found.append(SbatchOption(f"--{name}", rest or None, f"-{letter}", line))
            return found, i + 1
        if i + 1 == len(words):
            raise SbatchReadError(line, f"-{letter} needs a value")
        found.append(SbatchOption(f"--{name}", words[i + 1][0], f"-{letter}", line))
        return found, i + 2
    return found, i + 1
