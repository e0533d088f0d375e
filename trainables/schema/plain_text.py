"""Text that becomes a name, a path or a URL holds no control character: a newline in ``storage`` or a ``--set``
value would end the line of a generated script (an ``#SBATCH`` header, a comment, a shell word) and start another.

The characters refused: C0 (``\\x00``-``\\x1f``: newline, CR, tab, NUL...), DEL, C1 (``\\x80``-``\\x9f``), and the
Unicode line and paragraph separators U+2028/U+2029 (line ends to Python's ``str.splitlines`` and to editors).
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

__all__ = ["CONTROL_CHARACTERS", "control_character", "plain_text", "PlainText"]

CONTROL_CHARACTERS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def control_character(text: str) -> str | None:
    """The first control character of ``text`` as ``U+000A``, or ``None`` when it holds none."""
    m = CONTROL_CHARACTERS.search(text)
    return None if m is None else f"U+{ord(m.group()):04X}"


def plain_text(text: str | None) -> str | None:
    """``text``, or :class:`ValueError` (which pydantic reports under the field's key) when it holds a control
    character."""
    if text is not None and (bad := control_character(text)) is not None:
        # The value is not quoted: it may be a URL with a password.
        raise ValueError(f"holds the control character {bad} (a name, path or URL is one line of plain text)")
    return text


#: A spec string that becomes a name, a path or a URL (pydantic refuses a control character in it).
PlainText = Annotated[str, AfterValidator(plain_text)]
