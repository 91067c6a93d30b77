"""T5X-style command-line flags for the gin-configured entry points.

`--gin_file=F` (repeatable), `--gin.KEY=VALUE` and `--gin_bindings='KEY = VALUE'`
(repeatable, applied after the files), `--gin_search_paths=DIR` (repeatable), and
`--debug` (show tracebacks). Used by `python -m specdec_jax.{decode,train,benchmark}`.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from typing import Sequence


@dataclasses.dataclass
class GinFlags:
  gin_files: list[str]
  bindings: list[str]
  search_paths: list[str]
  debug: bool


def parse_gin_flags(argv: Sequence[str], prog: str, description: str,
                    example: str) -> GinFlags:
  """Parses the flags above; exits with argparse's usage error on anything else.

  Args:
    argv: the arguments (without the program name).
    prog, description: for `--help`.
    example: a sample binding for messages, e.g. '--gin.decode.gamma=5'.
  """
  parser = argparse.ArgumentParser(
      prog=prog, description=description,
      epilog=f'Bindings: --gin.KEY=VALUE, e.g. {example} (strings need inner quotes: '
             "--gin.decode.input_path=\"'in.txt'\").")
  parser.add_argument('--gin_file', action='append', default=[],
                      help='gin file (repeatable)')
  parser.add_argument('--gin_bindings', action='append', default=[],
                      help="gin binding (repeatable), e.g. 'decode.gamma = 5'")
  parser.add_argument('--gin_search_paths', action='append', default=[],
                      help='extra folder for gin includes (repeatable)')
  parser.add_argument('--debug', action='store_true',
                      help='show tracebacks for configuration and input errors')
  args, rest = parser.parse_known_args(list(argv))
  bindings = list(args.gin_bindings)
  for arg in rest:
    if arg.startswith('--gin.') and '=' in arg:
      key, value = arg[len('--gin.'):].split('=', 1)
      bindings.append(f'{key} = {value}')
    else:
      parser.error(f'unrecognized argument {arg!r} (gin bindings are --gin.KEY=VALUE, '
                   f'e.g. {example})')
  return GinFlags(args.gin_file, bindings, args.gin_search_paths, args.debug)


_LITERAL = re.compile(r"""\s*(['"(\[{@%]|[-+]?[\d.]|True\b|False\b|None\b)""")


def gin_error_message(error: Exception, bindings: Sequence[str]) -> str:
  """The gin parse error, plus which binding looks like an unquoted string, if one does.

  A value such as `/data/in.txt` or `out/x` is not a gin literal; the shell strips
  one level of quotes, so it needs inner ones: --gin.decode.input_path="'in.txt'".
  """
  text = str(error)
  for binding in bindings:
    key, _, value = binding.partition('=')
    if value.strip() and not _LITERAL.match(value):
      return (f'{text}\n  binding {binding.strip()!r}: string values need inner quotes, '
              f'e.g. --gin.{key.strip()}="\'{value.strip()}\'"')
  return text
