#!/usr/bin/env bash
# Set up what the benchmarks run on, outside the repository's tracked files:
#   corpora: the installed sources of torch, pytorch-lightning, timm and transformers
#   peers:   torchfix, fixit and ruff, each in its own virtual environment
#   training: real training code from 15 public repositories at pinned commits
#            (bench/training_corpus.toml), taken from the `fetch` tool's mirror under /work/.mirror
#            when it is there, else cloned from GitHub: that needs network access
#   large_train.py: one ~3,000-line training file made from modules of the training corpus
#            (bench/make_large_file.py lists them)
# Usage: bench/setup.sh [DIR]   (default: bench/.work, which git ignores)
set -euo pipefail
dir="${1:-$(dirname "$0")/.work}"
mkdir -p "$dir/corpora" "$dir/peers"
python=${PYTHON:-python3}
for spec in torch==2.13.0 pytorch-lightning==2.6.6 timm==1.0.31 transformers==5.23.0; do
    name=${spec%%==*}
    [ -d "$dir/corpora/$name" ] || "$python" -m pip install --quiet --no-deps --target "$dir/corpora/$name" "$spec"
done
for spec in torchfix==0.7.0 fixit==2.2.1 ruff==0.17.5; do
    name=${spec%%==*}
    if [ ! -x "$dir/peers/$name/bin/$name" ]; then
        "$python" -m venv "$dir/peers/$name"
        "$dir/peers/$name/bin/pip" install --quiet "$spec"
    fi
done
bench=$(dirname "$0")
"$python" "$bench/training_corpus.py" "$dir/training"
"$python" "$bench/make_large_file.py" --corpus "$dir/training" --out "$dir/large_train.py"
echo "corpora, peers and the training corpus are in $dir"
