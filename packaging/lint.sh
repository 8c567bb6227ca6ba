#!/usr/bin/env bash
# The format and static checks (`make lint`, run by .ci/run):
# - clang-format (Debian 12's, 14) over every C++ and CUDA source of the tree: any difference from .clang-format fails;
# - clang-tidy (.clang-tidy's checks, any finding fails) over the C++ sources a change touches: those that differ from
#   BASE (committed or not), with a changed header standing for the source of the same name. BASE is the first
#   argument, else $KVSCOPE_LINT_BASE, else HEAD~1 (the last commit). It reads the compile commands of ./build
#   (`make build` writes them); a source that no build target compiles (CUDA, the clang-only fuzz targets) is skipped.
#   packaging/lint.sh [BASE]
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in clang-format clang-tidy; do
  command -v "$tool" >/dev/null || { echo "lint: $tool is missing (packaging/setup.sh installs it)" >&2; exit 1; }
done

echo "lint: clang-format over the tree" >&2
git ls-files -z '*.cpp' '*.h' '*.cu' '*.cuh' | xargs -0 clang-format --dry-run -Werror

base=${1:-${KVSCOPE_LINT_BASE:-HEAD~1}}
if ! git rev-parse --verify --quiet "$base^{commit}" >/dev/null; then
  if [[ $(git rev-parse --is-shallow-repository) == true ]]; then
    echo "lint: a shallow clone has no $base: clang-tidy NOT run (give a BASE it has, or clone deeper)" >&2
    exit 0
  fi
  echo "lint: no revision $base to compare with" >&2
  exit 1
fi
db=build/compile_commands.json
[[ -f $db ]] || { echo "lint: $db is missing: run \`make build\` first" >&2; exit 1; }

# The sources to check: changed .cpp files, and the .cpp beside each changed header; only those the build compiles.
mapfile -t changed < <(git diff --name-only --diff-filter=d "$base" -- '*.cpp' '*.h' | sort -u)
mapfile -t compiled < <(python3 -c '
import json, os, sys
root = os.getcwd()
for e in json.load(open(sys.argv[1])):
    f = os.path.realpath(os.path.join(e["directory"], e["file"]))
    if f.startswith(root + os.sep): print(os.path.relpath(f, root))' "$db" | sort -u)
declare -A inBuild=()
for f in "${compiled[@]}"; do inBuild[$f]=1; done
declare -A pick=()
for f in "${changed[@]}"; do
  [[ $f == *.h ]] && f=${f%.h}.cpp
  [[ -n ${inBuild[$f]:-} ]] && pick[$f]=1
done
files=("${!pick[@]}")
if [[ ${#files[@]} -eq 0 ]]; then
  echo "lint: no compiled C++ source changed since $base: nothing for clang-tidy" >&2
  exit 0
fi
echo "lint: clang-tidy over ${#files[@]} source(s) changed since $(git rev-parse --short "$base")" >&2
printf '%s\n' "${files[@]}" | sort | xargs -P "${KVSCOPE_LINT_JOBS:-2}" -n 4 clang-tidy -p build --quiet \
  --warnings-as-errors='*' 2> >(grep -v ' warnings\? generated\.$' >&2)
