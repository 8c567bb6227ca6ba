#!/usr/bin/env bash
# Submits a sharded kvscope-cli run to Slurm: N array tasks of kvscope-shard.sbatch, then a merge that starts when all
# of them succeeded and writes OUTDIR/merged.txt (sweep, eval: the unsharded run's table) or OUTDIR/scan.json (tune:
# the scan file, for `kvscope-cli tune --scan-in OUTDIR/scan.json --max-kl ...`).
#
#   packaging/cluster/submit.sh 8 runs/q4 eval --text corpus.txt --ctx 512 --cache quanto:nbits=4 --cache fp8
#
# Extra sbatch options (a partition, an account) go in SBATCH_* variables, e.g. SBATCH_PARTITION=cpu.
set -euo pipefail
if [[ $# -lt 3 ]]; then
  echo "usage: $0 N OUTDIR SUBCOMMAND [ARGS...]   (SUBCOMMAND: sweep, eval or tune)" >&2
  exit 2
fi
n=$1 out=$2 sub=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
cli=${KVSCOPE_CLI:-kvscope-cli}
mkdir -p "$out"
job=$(sbatch --parsable --array="1-$n" --output="$out/shard-%a.log" "$here/kvscope-shard.sbatch" "$out" "$sub" "$@")
if [[ $sub == tune ]]; then
  merge="$cli merge $out/shard-*-of-$n.jsonl --out $out/scan.json"
else
  merge="$cli merge $out/shard-*-of-$n.jsonl > $out/merged.txt"
fi
sbatch --parsable --dependency="afterok:${job%%;*}" --job-name=kvscope-merge --output="$out/merge.log" --wrap "$merge"
echo "submitted array $job ($n shards) and its merge; results in $out" >&2
