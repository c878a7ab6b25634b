"""Configuration: ``[tool.torchlint]`` in pyproject.toml, or ``torchlint.yaml``/``.torchlint.yaml``,
found from the linted path upwards, then command-line overrides. An unknown key or a bad value is
an error that names the key and the file."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import reprlib
import sys
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any


from torchlint import __version__
from torchlint.rule import Rule, all_rules, plugin_problems, rule_plugin
from torchlint.analysis.gpus import ACCEPTED as GPU_FORMS, Gpu, parse_gpu
from torchlint.analysis.versions import parse_version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

NEWEST_TORCH = (2, 13)
NEWEST_LIGHTNING = (2, 6)
CONFIG_FILES = (".torchlint.yaml", "torchlint.yaml", "pyproject.toml")
DEFAULT_EXCLUDE = (
    ".bzr", ".direnv", ".eggs", ".git", ".git-rewrite", ".hg", ".ipynb_checkpoints", ".mypy_cache",
    ".nox", ".pants.d", ".pytype", ".ruff_cache", ".svn", ".tox", ".venv", ".torchlint_cache",
    "__pypackages__", "_build", "buck-out", "dist", "node_modules", "site-packages", "venv",
)
LIST_KEYS = ("select", "ignore", "extend-select", "extend-ignore", "exclude", "extend-exclude", "src")


class ConfigError(Exception):
    """A problem the user must fix in their configuration or command line (exit 2)."""


# A value shown in an error is cut short: a YAML alias bomb of 600 bytes expands to billions.
_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong = 2, 80, 80, 40
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = _SHORT.maxset = 4


def _shown(value: Any) -> str:
    """``repr(value)``, bounded whatever the value holds."""
    return _SHORT.repr(value)


def _named(name: Any) -> str:
    """A key or a selector in backticks, bounded."""
    text = name if isinstance(name, str) else _shown(name)
    return f"`{text[:80]}...`" if len(text) > 80 else f"`{text}`"


def _version_key(value: Any, key: str, where: str) -> tuple[int, ...]:
    if isinstance(value, (float, bool)):  # TOML and YAML read an unquoted 2.10 as the number 2.1
        raise ConfigError(f"{where}: `{key}` must be a version in quotes, such as \"2.10\", not the number "
                          f"{_shown(value)} (unquoted, 2.10 reads as 2.1)")
    try:
        return parse_version(str(value))
    except ValueError:
        raise ConfigError(f"{where}: `{key}` must be a version like \"2.1\", got {_shown(value)}") from None


def _gpu_key(value: Any, key: str, where: str) -> Gpu:
    if not isinstance(value, str):  # an unquoted 8.0 is a number, and 8.10 would read as 8.1
        raise ConfigError(f"{where}: `{key}` must be text in quotes, such as \"sm_80\" or \"a100\", "
                          f"got {_shown(value)}")
    try:
        return parse_gpu(value)
    except ValueError:
        raise ConfigError(f"{where}: `{key}` names no GPU torchlint knows: {_shown(value)}; "
                          f"write {GPU_FORMS}") from None


def resolve_selectors(selectors: list[str], where: str) -> set[str]:
    """Codes, code prefixes (``TL1``), rule names (``retained-graph``) or ``ALL`` -> rule codes."""
    codes: set[str] = set()
    for raw in selectors:
        text = str(raw).strip()
        if text.upper() == "ALL":
            codes |= {r.code for r in all_rules()}
            continue
        matched = {r.code for r in all_rules() if r.code.startswith(text.upper()) or r.name == text.lower()}
        if text.upper() == "TL000" or text.upper() == "TL0":
            continue  # syntax errors are always reported
        if not matched:
            skipped = "; a plugin was skipped: " + "; ".join(plugin_problems()) if plugin_problems() else ""
            raise ConfigError(f"{where}: unknown rule selector {_named(text)} (see `torchlint rules`){skipped}")
        codes |= matched
    return codes


DEFAULT_MAX_FILE_SIZE = 1 << 20  # 1 MiB: `max-file-size`


@dataclass(frozen=True)
class Settings:
    selected: frozenset[str]
    unsafe_fixes: bool = False
    target_torch: tuple[int, ...] = NEWEST_TORCH
    target_lightning: tuple[int, ...] = NEWEST_LIGHTNING
    # The GPU the code runs on (``target-gpu``); None: unknown, and rules advise for any GPU.
    target_gpu: Gpu | None = None
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE
    per_file_ignores: tuple[tuple[str, frozenset[str]], ...] = ()
    respect_gitignore: bool = True
    # Folders (relative to ``root``) where the project's own packages live besides the root, as
    # Ruff's ``src``: imports of modules found there are followed into their summaries.
    src: tuple[str, ...] = ("src",)
    # Files larger than this (bytes) get only Python's syntax check and a TL000 that says so: the
    # analysis costs about 10-20 s per MB on one core, and machine-made files of many MB exist.
    max_file_size: int = DEFAULT_MAX_FILE_SIZE
    rule_options: dict = field(default_factory=dict, hash=False, compare=False)
    config_path: Path | None = None
    root: Path = field(default_factory=Path.cwd)

    @cached_property
    def _enabled(self) -> tuple[type[Rule], ...]:
        return tuple(r for r in all_rules() if r.code in self.selected
                     and r.applies_to(self.target_torch, self.target_lightning))

    def rules_for(self, path: str) -> tuple[type[Rule], ...]:
        ignored = self.ignored_for(path)
        return tuple(r for r in self._enabled if r.code not in ignored) if ignored else self._enabled

    def ignored_for(self, path: str) -> frozenset[str]:
        if not self.per_file_ignores:
            return frozenset()
        relative = _relative(path, self._resolved_root)
        ignored: set[str] = set()
        for pattern, codes in self.per_file_ignores:
            if _glob_match(relative, pattern):
                ignored |= codes
        return frozenset(ignored)

    def rule_option(self, rule_name: str, option: str, default: Any) -> Any:
        return self.rule_options.get(rule_name, {}).get(option, default)

    @cached_property
    def fingerprint(self) -> str:
        """What a cached result depends on besides the file's bytes."""
        state = {
            "version": __version__, "code": code_stamp(), "selected": sorted(self.selected), "torch": self.target_torch,
            "lightning": self.target_lightning, "gpu": str(self.target_gpu) if self.target_gpu else None,
            "ignores": [[p, sorted(c)] for p, c in self.per_file_ignores],
            "options": self.rule_options, "src": self.src, "max_file_size": self.max_file_size,
            # a plugin's rules change with its version
            "rules": [r.code if rule_plugin(r) is None else f"{r.code} {rule_plugin(r).origin}" for r in all_rules()],
        }
        return hashlib.sha256(json.dumps(state, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def is_excluded(self, path: Path, resolved: Path | None = None) -> bool:
        """Whether an ``exclude`` glob matches the path (relative to the root, or a trailing part of
        it) or its name. ``resolved``: the path with its links resolved, when the caller knows it
        (discovery walks resolved folders), which spares resolving it again."""
        if not self.exclude:
            return False
        relative = _relative(str(path), self._resolved_root) if resolved is None else \
            _relative_resolved(resolved, path, self._resolved_root)
        return bool(self._excluded.fullmatch(relative) or self._excluded_name.fullmatch(path.name))

    @cached_property
    def _excluded(self) -> re.Pattern:
        return _glob("|".join(fnmatch.translate(pattern) for pattern in self.exclude))

    @cached_property
    def _excluded_name(self) -> re.Pattern:
        return re.compile("|".join(fnmatch.translate(pattern) for pattern in self.exclude))

    @cached_property
    def _resolved_root(self) -> Path:
        return self.root.resolve()


def code_stamp(folders: tuple[Path, ...] | None = None) -> str:
    """torchlint's own code as installed, by the name, size and modification time of each of its
    files (about a millisecond): a version number does not change between the commits of a
    checkout installed in editable mode, and results cached by other code must not come back."""
    import torchlint.rules

    folders = folders or (Path(__file__).resolve().parent, Path(torchlint.rules.__file__).resolve().parent)
    paths = []
    for folder in folders:
        for directory, names, files in os.walk(folder):
            names[:] = [name for name in names if name != "__pycache__"]
            paths += [os.path.join(directory, name) for name in files if name.endswith((".py", ".yaml"))]
    stamp = hashlib.sha256()
    for path in sorted(paths):
        try:
            status = os.stat(path)
        except OSError:
            continue
        stamp.update(f"{path}\0{status.st_size}\0{status.st_mtime_ns}\n".encode("utf-8", "surrogateescape"))
    return stamp.hexdigest()[:16]


def _relative(path: str, root: Path) -> str:
    """``path`` relative to ``root`` (already resolved), else as given."""
    try:
        return Path(path).resolve().relative_to(root).as_posix()
    except ValueError:
        return Path(path).as_posix()


def _relative_resolved(resolved: Path, path: Path, root: Path) -> str:
    """``_relative(path, root)`` for a path whose resolved form is known, by string operations
    (discovery asks it of every entry of the tree)."""
    name, base = resolved.as_posix(), root.as_posix()
    if name == base:
        return "."
    prefix = base if base.endswith("/") else base + "/"
    return name[len(prefix):] if name.startswith(prefix) else path.as_posix()


@lru_cache(maxsize=256)
def _glob(translated: str) -> re.Pattern:
    """The translated glob(s), matched against a whole path or any part after one of its slashes."""
    return re.compile(f"(?s:.*/)?(?:{translated})")


def _glob_match(relative: str, pattern: str) -> bool:
    """A glob against the path relative to the project root, or against any trailing part."""
    return _glob(fnmatch.translate(pattern)).fullmatch(relative) is not None


# --- finding and reading the configuration ------------------------------------------------------

def find_config(start: Path) -> Path | None:
    directory = start.resolve()
    if not directory.is_dir():
        directory = directory.parent
    for folder in (directory, *directory.parents):
        for name in CONFIG_FILES:
            candidate = folder / name
            if candidate.is_file():
                if name != "pyproject.toml" or "torchlint" in _tool_table(candidate):
                    return candidate
    return None


def _not_utf8(path: Path, error: UnicodeDecodeError) -> ConfigError:
    byte = error.object[error.start:error.start + 1]
    return ConfigError(f"{path}: not UTF-8 text (byte {byte!r} at offset {error.start}); save it as UTF-8")


def _read_toml(path: Path) -> dict:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except UnicodeDecodeError as error:
        raise _not_utf8(path, error) from None
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"{path}: cannot read TOML: {error}") from None


def _table(data: dict, key: str, where: Path) -> dict:
    """``data[key]``, which must be a table if it is there."""
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: `{key}` must be a table, got {_shown(value)}")
    return value


def _tool_table(pyproject: Path) -> dict:
    """The ``[tool]`` table of a pyproject.toml."""
    return _table(_read_toml(pyproject), "tool", pyproject)


def read_config(path: Path) -> dict:
    if path.name == "pyproject.toml" or path.suffix == ".toml":
        table = _tool_table(path).get("torchlint", {}) if path.name == "pyproject.toml" else _read_toml(path)
    else:
        import yaml  # here, not at the top: most projects have no YAML configuration, and it costs start-up

        try:
            table = yaml.safe_load(path.read_text(encoding="utf-8")) or {}  # never yaml.load: tags run code
        except UnicodeDecodeError as error:
            raise _not_utf8(path, error) from None
        except yaml.MarkedYAMLError as error:  # one line: where, and what
            mark = error.problem_mark
            where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
            refused = " (tags that build Python objects are refused)" if "python/" in str(error.problem) else ""
            raise ConfigError(f"{path}{where}: cannot read YAML: {error.problem}{refused}") from None
        except (OSError, yaml.YAMLError) as error:
            raise ConfigError(f"{path}: cannot read YAML: {error}") from None
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: the configuration must be a table of keys, got {_shown(table)}")
    return table


def torch_requirement(root: Path) -> tuple[int, ...] | None:
    """The lower bound of the project's own ``torch`` requirement, if it declares one: in
    pyproject.toml's dependencies, a requirements*.txt, or a conda environment.yml."""
    pattern = re.compile(r"^\s*torch\s*(?:\[[^\]]*\])?\s*(?:==|>=|~=|>|===)\s*v?(\d+(?:\.\d+)*)", re.IGNORECASE)
    lines: list[str] = []
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        dependencies = _table(_read_toml(pyproject), "project", pyproject).get("dependencies", [])
        lines += _string_list(dependencies, "project.dependencies", str(pyproject))
    for requirements in sorted(root.glob("requirements*.txt")):
        try:
            lines += requirements.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
    for line in lines:
        match = pattern.match(line)
        if match:
            return parse_version(match.group(1))
    # a conda environment: `- pytorch=1.12.1` (or `pytorch::pytorch`, `>=`), or `- torch==1.12` under `pip:`
    conda = re.compile(r"^\s*-\s*(?:[\w.-]+::)?(?:py)?torch\s*(?:==|=|>=|~=|>)\s*v?(\d+(?:\.\d+)*)", re.IGNORECASE)
    for environment in (root / "environment.yml", root / "environment.yaml"):
        try:
            text = environment.read_text(encoding="utf-8", errors="replace") if environment.is_file() else ""
        except OSError:
            continue
        for line in text.splitlines():
            match = conda.match(line)
            if match:
                return parse_version(match.group(1))
    return None


def _string_list(value: Any, key: str, where: str) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: `{key}` must be a list of strings, got {_shown(value)}")
    return value


def _rule_options(table: dict, where: str) -> dict:
    options: dict[str, dict] = {}
    by_name = {r.name: r for r in all_rules()}
    for key, value in table.items():
        if key in by_name:
            rule = by_name[key]
            if not isinstance(value, dict):
                raise ConfigError(f"{where}: `{key}` must be a table of options for rule {rule.code}")
            for option, setting in value.items():
                if option not in rule.options:
                    known = ", ".join(sorted(rule.options)) or "none"
                    raise ConfigError(f"{where}: unknown option {_named(f'{key}.{option}')} "
                                      f"(options of {rule.code}: {known})")
                expected = rule.options[option][0]
                if expected is list:
                    setting = _string_list(setting, f"{key}.{option}", where)
                elif not isinstance(setting, expected):
                    raise ConfigError(f"{where}: `{key}.{option}` must be {expected.__name__}, got {_shown(setting)}")
                options.setdefault(key, {})[option] = setting
    return options


KNOWN_KEYS = set(LIST_KEYS) | {"per-file-ignores", "target-torch", "target-lightning", "target-gpu",
                               "unsafe-fixes", "respect-gitignore", "max-file-size"}
_SIZE = re.compile(r"\s*(\d+)\s*(KB|MB|KiB|MiB|B)?\s*", re.IGNORECASE)
_SIZE_UNITS = {None: 1, "b": 1, "kb": 1 << 10, "kib": 1 << 10, "mb": 1 << 20, "mib": 1 << 20}


def _file_size(value, where: str) -> int:
    """``max-file-size``: a number of bytes, or a string such as "2MB" or "512KB" (units of 1,024)."""
    match = _SIZE.fullmatch(value) if isinstance(value, str) else None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    if match is not None and int(match.group(1)) > 0:
        return int(match.group(1)) * _SIZE_UNITS[match.group(2) and match.group(2).lower()]
    raise ConfigError(f"{where}: `max-file-size` must be a positive number of bytes or a size such as \"2MB\" "
                      f"or \"512KB\", got {_shown(value)}")


def resolve_settings(
    path: Path | None = None, *, config: Path | None = None, select: list[str] | None = None,
    ignore: list[str] | None = None, extend_select: list[str] | None = None,
    unsafe_fixes: bool | None = None, target_torch: str | None = None,
    target_lightning: str | None = None, target_gpu: str | None = None, isolated: bool = False,
) -> Settings:
    """Settings for linting ``path``: its configuration file, then the command line's overrides."""
    start = Path(path) if path is not None else Path.cwd()
    config_path = None if isolated else (config or find_config(start))
    table: dict = {}
    if config_path is not None:
        if not config_path.is_file():
            raise ConfigError(f"{config_path}: configuration file not found")
        table = read_config(config_path)
    where = str(config_path) if config_path else "defaults"
    rule_names = {r.name for r in all_rules()}
    for key in table:
        if key not in KNOWN_KEYS and key not in rule_names:
            raise ConfigError(f"{where}: unknown key {_named(key)} (known keys: {', '.join(sorted(KNOWN_KEYS))}, "
                              "or a rule name for its options)")
    lists = {key: _string_list(table[key], key, where) for key in LIST_KEYS if key in table}
    root = config_path.parent if config_path else (start.resolve() if start.is_dir() else start.resolve().parent)

    if select is not None:
        selected = resolve_selectors(select, "--select")
    elif "select" in lists:
        selected = resolve_selectors(lists["select"], where)
    else:
        selected = {r.code for r in all_rules() if r.default_enabled}
    selected |= resolve_selectors(lists.get("extend-select", []), where)
    selected |= resolve_selectors(extend_select or [], "--extend-select")
    selected -= resolve_selectors(lists.get("ignore", []) + lists.get("extend-ignore", []), where)
    selected -= resolve_selectors(ignore or [], "--ignore")

    per_file = table.get("per-file-ignores", {})
    if not isinstance(per_file, dict) or not all(isinstance(pattern, str) for pattern in per_file):
        raise ConfigError(f"{where}: `per-file-ignores` must map glob patterns to lists of rules")
    per_file_ignores = tuple(
        (pattern, frozenset(resolve_selectors(_string_list(codes, f"per-file-ignores.{pattern}", where), where)))
        for pattern, codes in sorted(per_file.items()))

    for key in ("unsafe-fixes", "respect-gitignore"):
        if key in table and not isinstance(table[key], bool):
            raise ConfigError(f"{where}: `{key}` must be true or false, got {_shown(table[key])}")

    if target_torch is not None:
        torch_version = _version_key(target_torch, "--target-torch", "command line")
    elif "target-torch" in table:
        torch_version = _version_key(table["target-torch"], "target-torch", where)
    else:
        torch_version = torch_requirement(root) or NEWEST_TORCH
    if target_lightning is not None:
        lightning_version = _version_key(target_lightning, "--target-lightning", "command line")
    elif "target-lightning" in table:
        lightning_version = _version_key(table["target-lightning"], "target-lightning", where)
    else:
        lightning_version = NEWEST_LIGHTNING
    if target_gpu is not None:
        gpu = _gpu_key(target_gpu, "--target-gpu", "command line")
    elif "target-gpu" in table:
        gpu = _gpu_key(table["target-gpu"], "target-gpu", where)
    else:
        gpu = None

    return Settings(
        selected=frozenset(selected),
        unsafe_fixes=table.get("unsafe-fixes", False) if unsafe_fixes is None else unsafe_fixes,
        target_torch=torch_version,
        target_lightning=lightning_version,
        target_gpu=gpu,
        exclude=tuple(lists.get("exclude", DEFAULT_EXCLUDE)) + tuple(lists.get("extend-exclude", [])),
        per_file_ignores=per_file_ignores,
        respect_gitignore=table.get("respect-gitignore", True),
        src=tuple(lists.get("src", ("src",))),
        max_file_size=_file_size(table["max-file-size"], where) if "max-file-size" in table else DEFAULT_MAX_FILE_SIZE,
        rule_options=_rule_options(table, where),
        config_path=config_path,
        root=root,
    )
