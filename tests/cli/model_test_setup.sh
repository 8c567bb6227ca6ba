# Sourced by the CLI tests that need the embedded model: `cli` (the binary, $1), `model`, `py`, `text` (the shipped
# evaluation text), `fail` (0) and a scratch `tmp` removed on exit; exits 77 (ctest: skipped) without the model.
cli=$1
here=$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)
text="$here/../../resources/eval/coriolanus.txt"
model=${KVSCOPE_MODEL:-}
[ -n "$model" ] && [ -f "$model" ] || { echo "embedded model not found ($model): skipped"; exit 77; }
py=${KVSCOPE_PYTHON:-python3}
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
