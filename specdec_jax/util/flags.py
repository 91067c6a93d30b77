"""The command line of every gin-configured entry point: flags, `--help`, one error path.

`python -m specdec_jax.{decode,train,benchmark}` all take T5X-style flags:
`--gin_file=F` (repeatable), `--gin.KEY=VALUE` and `--gin_bindings='KEY = VALUE'`
(repeatable, applied after the files), `--gin_search_paths=DIR` (repeatable), and
`--debug` (show Python tracebacks for configuration errors too); the decode job and
the benchmark also take `--compilation_cache_dir=DIR` / `--no_compilation_cache` (JAX's
persistent compilation cache, `specdec_jax.generate.compile_cache`). `--help` prints
the entry point's own examples and the parameters of its gin configurable.

`run_cli` is the one error path they share:

| what | exit status | stderr |
|---|---|---|
| success | 0 | (the job's own output) |
| an unknown flag | 2 | argparse's usage line and `error: unrecognized argument …` |
| a gin file that does not exist, a gin syntax error, an unknown configurable or parameter, an unquoted string value | 2 | `<prog>: error: invalid gin configuration: …` (with a quoting hint when a value looks like an unquoted string) |
| a configuration or input error found before the work starts (bad value, missing file, empty input line, …) | 2 | `<prog>: error: …` naming the binding / file / line and the fix |
| an entry-point-specific condition (e.g. the demo pair is not shipped) | its own code (decode, benchmark: 3) | `<prog>: error: …` |
| Ctrl-C (SIGINT) | 130 | `<prog>: interrupted; …` (one line, e.g. "no output written") |

With `--debug` the errors above are raised with their tracebacks instead.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import logging
import os
import pathlib
import re
import sys
import textwrap
from typing import Any, Callable, Mapping, Optional, Sequence

EXIT_OK = 0
EXIT_CONFIG_ERROR = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, the shell's convention.


@dataclasses.dataclass
class GinFlags:
  gin_files: list[str]
  bindings: list[str]
  search_paths: list[str]
  debug: bool
  # The jobs that compile (decode, benchmark): a folder for JAX's persistent compilation
  # cache, 'off', or None (`$SPECDEC_COMPILATION_CACHE`, else the per-user default);
  # `specdec_jax.generate.compile_cache.enable` takes it.
  compilation_cache: Optional[str] = None


def parameters_help(configurable: Callable, name: Optional[str] = None,
                    denylist: Sequence[str] = ()) -> str:
  """`--help` text listing a gin configurable's parameters, defaults and descriptions.

  Descriptions come from the Google-style `Args:` section of its docstring (an entry
  such as `a, b: text` describes several parameters, listed together); parameters
  without one are listed with their default only.
  """
  name = name or configurable.__name__
  docs = _args_docs(inspect.getdoc(configurable) or '')
  lines = [f'parameters (bind as --gin.{name}.PARAM=VALUE):']
  params = [p for p in inspect.signature(configurable).parameters.values()
            if p.name not in denylist and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
  i = 0
  while i < len(params):
    group_id, text = docs.get(params[i].name, (None, ''))
    group = [params[i]]
    while (group_id is not None and i + len(group) < len(params)
           and docs.get(params[i + len(group)].name, (None,))[0] == group_id):
      group.append(params[i + len(group)])
    i += len(group)
    lines.append(textwrap.fill(', '.join(f'{name}.{p.name} ({_default(p)})' for p in group),
                               width=88, initial_indent='  ', subsequent_indent='    '))
    if text:
      lines.append(textwrap.fill(text, width=88, initial_indent=' ' * 6,
                                 subsequent_indent=' ' * 6))
  return '\n'.join(lines)


def _default(param: inspect.Parameter) -> str:
  import gin  # pylint: disable=g-import-not-at-top
  default = param.default
  if default is inspect.Parameter.empty or default is gin.REQUIRED:
    return 'required'
  return f'default {default!r}'


def _args_docs(doc: str) -> dict[str, tuple[int, str]]:
  """{parameter: (entry number, description)} from a docstring's `Args:` section."""
  out: dict[str, tuple[int, str]] = {}
  m = re.search(r'^Args:\n((?:[ \t]+.*\n?|\n)*)', doc, re.M)
  if not m:
    return out
  current: list[str] = []
  entry = 0
  for line in m.group(1).splitlines():
    head = re.match(r'^ {2}(\w+(?:, \w+)*):\s*(.*)$', line)
    if head:
      entry += 1
      current = head.group(1).split(', ')
      for n in current:
        out[n] = (entry, head.group(2).strip())
    elif line.strip() and current:
      for n in current:
        out[n] = (entry, (out[n][1] + ' ' + line.strip()).strip())
  return out


def parse_gin_flags(argv: Sequence[str], prog: str, description: str, example: str, *,
                    examples: Sequence[str] = (), parameters: str = '',
                    exit_status: str = '', compilation_cache_flags: bool = False) -> GinFlags:
  """Parses the flags above; exits with status 2 and argparse's usage line on anything else.

  Args:
    argv: the arguments (without the program name).
    prog, description: for `--help`.
    example: a sample binding for messages, e.g. '--gin.decode.gamma=5'.
    examples: full command lines shown by `--help`.
    parameters: the configurable's parameter list for `--help` (`parameters_help`).
    exit_status: extra exit codes for `--help`, e.g. '3 the demo pair is missing'.
    compilation_cache_flags: also take `--compilation_cache_dir=DIR` (a folder, or
      'off') and `--no_compilation_cache` (JAX's persistent compilation cache).
  """
  epilog = []
  if examples:
    epilog.append('examples:\n' + '\n'.join(f'  {e}' for e in examples))
  epilog.append(f'bindings: --gin.KEY=VALUE, e.g. {example}; strings need inner quotes: '
                "--gin.decode.input_path=\"'in.txt'\".")
  if parameters:
    epilog.append(parameters)
  epilog.append('exit status: 0 success, 2 configuration or input error (one message on '
                'stderr), ' + (f'{exit_status}, ' if exit_status else '')
                + '130 interrupted (Ctrl-C).')
  parser = argparse.ArgumentParser(prog=prog, description=description,
                                   epilog='\n\n'.join(epilog),
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--gin_file', action='append', default=[],
                      help='gin file (repeatable)')
  parser.add_argument('--gin_bindings', action='append', default=[],
                      help="gin binding (repeatable), e.g. 'decode.gamma = 5'")
  parser.add_argument('--gin_search_paths', action='append', default=[],
                      help='extra folder for gin includes (repeatable)')
  parser.add_argument('--debug', action='store_true',
                      help='show tracebacks for configuration and input errors')
  if compilation_cache_flags:
    parser.add_argument('--compilation_cache_dir', default=None, metavar='DIR',
                        help="folder of JAX's persistent compilation cache ('off': none; "
                        'default: $SPECDEC_COMPILATION_CACHE, else '
                        '~/.cache/specdec_jax/jax_compilation_cache)')
    parser.add_argument('--no_compilation_cache', action='store_true',
                        help='compile everything anew (no persistent compilation cache)')
  args, rest = parser.parse_known_args(list(argv))
  bindings = list(args.gin_bindings)
  for arg in rest:
    if arg.startswith('--gin.') and '=' in arg:
      key, value = arg[len('--gin.'):].split('=', 1)
      bindings.append(f'{key} = {value}')
    else:
      parser.error(f'unrecognized argument {arg!r} (gin bindings are --gin.KEY=VALUE, '
                   f'e.g. {example})')
  cache = None
  if compilation_cache_flags:
    cache = 'off' if args.no_compilation_cache else args.compilation_cache_dir
  return GinFlags(args.gin_file, bindings, args.gin_search_paths, args.debug, cache)


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


# ---------------------------------------------------------------------------- gin parsing

def _is_url(path: str) -> bool:
  return '://' in str(path)


def resolve_path(path) -> Optional[str]:
  """An existing local path (made absolute); else the same relative path under the
  repository root if it exists there; else the path as given. URLs are unchanged."""
  from specdec_jax.util import paths  # pylint: disable=g-import-not-at-top
  if path is None:
    return None
  path = os.fspath(path)
  if _is_url(path):
    return path
  p = pathlib.Path(path).expanduser()
  if p.exists():
    return str(p.resolve())
  in_repo = paths.REPO_ROOT / p
  return str(in_repo.resolve()) if not p.is_absolute() and in_repo.exists() else str(p)


def parse_gin(files: Sequence[str], bindings: Sequence[str],
              search_paths: Sequence[str] = (), *, skip_unknown: Sequence[str] = (),
              finalize: bool = True) -> None:
  """Clears gin's config and parses `files` then `bindings` (T5X's order).

  Gin files are looked up in the working directory, then the repository root;
  `include`s also in `search_paths`. `skip_unknown` (configurable names) and
  `finalize` are passed to gin as `skip_unknown` / `finalize_config`.

  Raises:
    FileNotFoundError: a gin file that does not exist (named).
    Any gin parse error (ValueError, SyntaxError, ...) as gin raises it.
  """
  import gin  # pylint: disable=g-import-not-at-top
  from specdec_jax.util import paths  # pylint: disable=g-import-not-at-top
  gin.clear_config()
  for p in ['.', *search_paths, str(paths.REPO_ROOT)]:
    gin.add_config_file_search_path(p)
  resolved = []
  for f in files:
    r = resolve_path(f)
    if not _is_url(r) and not pathlib.Path(r).is_file():
      raise FileNotFoundError(f'gin file {f!r} not found (looked in the working directory '
                              f'and {paths.REPO_ROOT}); check the --gin_file spelling.')
    resolved.append(r)
  # gin's optional package-resource reader logs "Path not found" for every search
  # path an `include` is not under before the one it is found in; that is noise here.
  root_logger = logging.getLogger()
  quiet = _DropMessages('Path not found:')
  root_logger.addFilter(quiet)
  try:
    gin.parse_config_files_and_bindings(resolved, bindings,
                                        skip_unknown=list(skip_unknown) or False,
                                        finalize_config=finalize)
  finally:
    root_logger.removeFilter(quiet)


class _DropMessages(logging.Filter):

  def __init__(self, prefix: str):
    super().__init__()
    self.prefix = prefix

  def filter(self, record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(self.prefix)


# ---------------------------------------------------------------------------- errors

def clean_message(error: BaseException) -> str:
  """An exception's message without gin's "In call to configurable …" lines."""
  msg = str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error)
  lines = [line for line in msg.splitlines()
           if not re.match(r"\s*In call to configurable '[^']*' \(<", line)]
  return '\n'.join(lines).strip()


def print_warning(msg: str) -> None:
  """One `warning: …` line on stderr (the jobs' style for a problem that is not an error)."""
  print(f'warning: {msg}', file=sys.stderr, flush=True)


def print_error(prog: str, msg: str) -> None:
  print(f'{prog}: error: {msg}', file=sys.stderr, flush=True)


CONFIG_ERRORS = (ValueError, FileNotFoundError, PermissionError, KeyError)


def run_cli(f: GinFlags, prog: str, *, parse: Callable[[], None],
            configure: Callable[[], Any], run: Optional[Callable[[Any], Any]] = None,
            config_errors: tuple = CONFIG_ERRORS,
            exit_codes: Optional[Mapping[type, int]] = None,
            interrupted: str = 'no output written',
            hint: str = '') -> int:
  """Runs an entry point's stages with the shared error handling (module docstring).

  Args:
    f: the parsed flags (`parse_gin_flags`).
    prog: the program name for messages, e.g. 'specdec_jax.decode'.
    parse: parses the gin configuration; any exception is a configuration error.
    configure: validates the configuration and inputs and does the work that may
      still fail on bad input; returns what `run` needs. An exception of a type in
      `exit_codes` exits with that code, one in `config_errors` with 2.
    run: the work itself, after everything was checked (errors there propagate
      with their tracebacks: they are bugs or environment failures, not bad input).
    interrupted: the text after "interrupted; " printed on Ctrl-C.
    hint: appended to configuration-error messages (e.g. "rerun with --debug …").
  Returns:
    The exit status.
  """
  exit_codes = dict(exit_codes or {})
  try:
    try:
      parse()
    except Exception as e:  # pylint: disable=broad-except  (any gin parse failure)
      if f.debug:
        raise
      print_error(prog, f'invalid gin configuration: {gin_error_message(e, f.bindings)}')
      return EXIT_CONFIG_ERROR
    try:
      state = configure()
    except tuple(exit_codes) + tuple(config_errors) as e:  # pylint: disable=catching-non-exception
      if f.debug:
        raise
      code = next((c for t, c in exit_codes.items() if isinstance(e, t)), EXIT_CONFIG_ERROR)
      print_error(prog, clean_message(e) + hint)
      return code
    if run is not None:
      run(state)
    return EXIT_OK
  except KeyboardInterrupt:
    if f.debug:
      raise
    print(f'{prog}: interrupted; {interrupted}', file=sys.stderr, flush=True)
    return EXIT_INTERRUPTED


# ---------------------------------------------------------------------------- progress

class _NullStream:
  """A write-only stream that discards everything (for progress bars not shown)."""

  def write(self, s):
    return len(s)

  def flush(self):
    pass

  def isatty(self):
    return False


def show_progress(asked: Optional[bool] = None) -> bool:
  """Whether to draw a progress bar: `asked` when given (True / False), else when stderr
  is a terminal; the environment variable SPECDEC_PROGRESS=1 / 0 overrides `None`."""
  if asked is not None:
    return bool(asked)
  env = os.environ.get('SPECDEC_PROGRESS', '').strip().lower()
  if env in ('1', 'true', 'yes'):
    return True
  if env in ('0', 'false', 'no'):
    return False
  try:
    return sys.stderr.isatty()
  except (AttributeError, ValueError):
    return False


def progress_file(asked: Optional[bool] = None):
  """The stream a tqdm bar should draw on: stderr when `show_progress(asked)`, else a
  stream that discards it (the bar never mixes with a job's output on stdout)."""
  return sys.stderr if show_progress(asked) else _NullStream()
