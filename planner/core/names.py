"""The one rule for names read from user files (models, clusters, node groups, GPUs).

Names are data that end up in other formats: Megatron's flag file (and its ``#`` lines), the
torchtitan TOML and command line, JSON, the terminal (rich markup). The exports escape every
string with the target format's own writer; this rule is the first defence, at load time:

    1 to 128 characters of ASCII letters, digits and ``. _ + / : @ = -``,
    starting with a letter, a digit, ``_``, ``.`` or ``/``.

That admits every catalog name (``A100-SXM4-80GB``, ``llama-3.1-405b``), hub ids
(``meta-llama/Meta-Llama-3-8B``, ``org/model@rev``) and the local paths Hugging Face writes
into ``_name_or_path`` (``/data/models/llama-2-7b``, ``./ckpt``). It refuses whitespace and
control characters (a new line would end a comment or a TOML line), quotes, ``#`` (comments),
brackets (TOML sections, rich markup), ``,`` (list separator), ``$ ; & | < > ` \\`` (shell),
and ``- + : @ =`` as the first character (a leading ``-`` reads as a flag).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .errors import BadInput

NAME_MAX = 128
NAME_PATTERN = re.compile(r"[A-Za-z0-9_./][A-Za-z0-9._+/:@=-]{0,%d}" % (NAME_MAX - 1))
NAME_RULE = (f"1-{NAME_MAX} characters of letters, digits and . _ + / : @ = -, "
             "starting with a letter, digit, _, . or /")


def name_from_file(path: str | Path) -> str:
    """The name of a model or cluster that declares none: its file name's stem, made a name
    (the rule is for names, not file names): each character the rule refuses becomes ``_``, a
    ``_`` goes in front of a first character that cannot start a name, and the result is cut
    to NAME_MAX characters."""
    name = re.sub(r"[^A-Za-z0-9._+/:@=-]", "_", Path(path).stem)
    if not re.match(r"[A-Za-z0-9_./]", name):
        name = "_" + name
    return name[:NAME_MAX]


def is_name(value: Any) -> bool:
    return isinstance(value, str) and NAME_PATTERN.fullmatch(value) is not None


def check_name(value: Any, where: str | None, field: str | None) -> str:
    """`value` if it is a valid name, else BadInput naming `where` and `field` (one line)."""
    if is_name(value):
        return value
    if not isinstance(value, str):
        raise BadInput(f"must be a name ({NAME_RULE}), got {type(value).__name__}", where, field)
    shown = ascii(value[:40]) + ("..." if len(value) > 40 else "")  # ascii(): no raw new line
    raise BadInput(f"must be a name ({NAME_RULE}), got {shown}", where, field)
