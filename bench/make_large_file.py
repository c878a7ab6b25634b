"""Build the ~3,000-line training file of issue 16 from real training modules of the corpus.

    python bench/make_large_file.py [--corpus bench/.work/training] [--out bench/.work/large_train.py]

The speed targets of issue 16 need one large training file with findings, the kind a researcher
keeps open in an editor. It is made, not committed: the modules listed in SOURCES (from the
training corpus that bench/training_corpus.py materialises) are concatenated at module level, in
that order, so that the file still reads as one training script and its whole-script rules
(cudnn-benchmark, channels-last) still see training loops and `__main__` blocks. To keep it
valid Python with the same definitions, `from __future__` imports move to the top, and a
top-level `def` or `class` whose name an earlier module already defined is renamed (with its
uses in that module) by a suffix, `_2`, `_3`..., so that no definition silently replaces another.
"""

from __future__ import annotations

import argparse
import ast
import io
import keyword
import tokenize
from pathlib import Path

from training_corpus import BENCH, folder_name, load_manifest

# (repository, path) in the order they are concatenated; about 3,000 lines in all.
SOURCES = [
    ("akamaster/pytorch_resnet_cifar10", "resnet.py"),
    ("akamaster/pytorch_resnet_cifar10", "trainer.py"),
    ("dome272/Diffusion-Models-pytorch", "modules.py"),
    ("dome272/Diffusion-Models-pytorch", "ddpm.py"),
    ("Zeleni9/pytorch-wgan", "models/dcgan.py"),
    ("vwxyzjn/cleanrl", "cleanrl/ppo_atari.py"),
    ("sthalles/SimCLR", "simclr.py"),
    ("sthalles/SimCLR", "run.py"),
    ("karpathy/nanoGPT", "model.py"),
    ("karpathy/nanoGPT", "train.py"),
    ("rosinality/stylegan2-pytorch", "train.py"),
    ("facebookresearch/maskrcnn-benchmark", "maskrcnn_benchmark/engine/trainer.py"),
]
FUTURE = "from __future__ import"


def top_level_names(tree: ast.Module) -> set[str]:
    """Names a module binds with a top-level `def` or `class`."""
    return {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                 ast.ClassDef))}


def rename(source: str, renames: dict[str, str]) -> str:
    """The module with each renamed name replaced where it is a name, not an attribute or a keyword."""
    if not renames:
        return source
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    edits, depth = [], 0
    for index, token in enumerate(tokens):
        if token.type == tokenize.OP and token.string in "([{":
            depth += 1
        elif token.type == tokenize.OP and token.string in ")]}":
            depth -= 1
        if token.type != tokenize.NAME or token.string not in renames or keyword.iskeyword(token.string):
            continue
        previous = next((t for t in reversed(tokens[:index]) if t.type not in (tokenize.NL, tokenize.COMMENT)), None)
        following = next((t for t in tokens[index + 1:] if t.type not in (tokenize.NL, tokenize.COMMENT)), None)
        attribute = previous is not None and previous.string == "."
        keyword_argument = depth > 0 and following is not None and following.string == "="
        if not attribute and not keyword_argument:
            edits.append((token.start, token.end, renames[token.string]))
    lines = source.splitlines(keepends=True)
    for (row, start), (_, end), new in reversed(edits):
        lines[row - 1] = lines[row - 1][:start] + new + lines[row - 1][end:]
    return "".join(lines)


def build(corpus: Path) -> tuple[str, list[str]]:
    """The concatenated file and the header lines that name its sources."""
    commits = {repo["name"]: (repo["commit"], repo["license"], repo["url"]) for repo in load_manifest()}
    futures, chunks, header, defined = set(), [], [], {}
    for repo, path in SOURCES:
        source = (corpus / folder_name(repo) / path).read_text(encoding="utf-8")
        futures.update(line.strip() for line in source.splitlines() if line.startswith(FUTURE))
        source = "".join(line for line in source.splitlines(keepends=True) if not line.startswith(FUTURE))
        renames = {}
        for name in sorted(top_level_names(ast.parse(source))):
            count = defined.get(name, 0)
            if count:
                renames[name] = f"{name}_{count + 1}"
            defined[name] = count + 1
        commit, license_name, url = commits[repo]
        header.append(f"#   {url}/blob/{commit}/{path} ({license_name}, {len(source.splitlines())} lines)")
        chunks.append(f"# ---- {repo} {path} at {commit[:12]} ----\n" + rename(source, renames).rstrip() + "\n")
    preamble = ["# Made by bench/make_large_file.py for the speed rows of issue 16 (bench/speed.py): real training",
                "# modules concatenated at module level, clashing top-level names renamed. Third-party code under",
                "# the licenses named below; not committed (bench/.work is ignored). Sources, in order:", *header]
    text = "\n".join([*sorted(futures), *preamble, "", "\n\n".join(chunks)])
    ast.parse(text)  # the file must stay valid Python
    return text, header


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=BENCH / ".work" / "training")
    parser.add_argument("--out", type=Path, default=BENCH / ".work" / "large_train.py")
    args = parser.parse_args(argv)
    text, header = build(args.corpus)
    args.out.write_text(text, encoding="utf-8")
    print(f"{args.out}: {len(text.splitlines())} lines from {len(header)} modules")


if __name__ == "__main__":
    main()
