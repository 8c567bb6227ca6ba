#!/usr/bin/env python3
"""A sharded kvscope-cli sweep, eval or tune scan as Ray tasks: N tasks each run
`kvscope-cli SUBCOMMAND ARGS... --shard I/N`, then `kvscope-cli merge` joins their files on the driver.

    python packaging/cluster/ray_shards.py --shards 8 --out runs/q4 --cpus 8 -- \\
        eval --text corpus.txt --ctx 512 --cache quanto:nbits=4 --cache fp8

Each task runs on a node that has kvscope-cli (KVSCOPE_CLI or PATH) and sees OUTDIR (a shared file system), as a
Slurm array task would. `--local` runs the same command lines as local processes, N at a time up to --parallel,
without Ray: a check of the command lines, or one big machine. sweep and eval print the merged table (the merge's
stdout); tune writes OUTDIR/scan.json, to solve with `kvscope-cli tune --scan-in`.
"""
import argparse
import concurrent.futures
import os
import subprocess
import sys

OUT_OPTION = {"sweep": "--out", "eval": "--out", "tune": "--scan-out"}


def shard_command(cli, sub, args, i, n, out, threads):
    """The command line of shard i of n (1-based)."""
    return [cli, sub, *args, "--threads", str(threads), "--shard", f"{i}/{n}", OUT_OPTION[sub],
            os.path.join(out, f"shard-{i}-of-{n}.jsonl")]


def run_shard(cmd):
    done = subprocess.run(cmd, capture_output=True, text=True)
    return done.returncode, done.stderr


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shards", type=int, required=True, help="N: how many shards")
    p.add_argument("--out", required=True, help="the folder of the shard files (shared by every node)")
    p.add_argument("--cpus", type=int, default=4, help="CPUs per task (kvscope-cli --threads)")
    p.add_argument("--local", action="store_true", help="run the shards as local processes, without Ray")
    p.add_argument("--parallel", type=int, default=1, help="with --local: shards at a time")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- SUBCOMMAND ARGS (sweep, eval or tune)")
    a = p.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd or cmd[0] not in OUT_OPTION:
        p.error("give the kvscope-cli command after --: sweep, eval or tune and its options")
    if a.shards < 1:
        p.error("--shards must be at least 1")
    cli = os.environ.get("KVSCOPE_CLI", "kvscope-cli")
    os.makedirs(a.out, exist_ok=True)
    lines = [shard_command(cli, cmd[0], cmd[1:], i, a.shards, a.out, a.cpus) for i in range(1, a.shards + 1)]

    if a.local:
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.parallel)) as pool:
            results = list(pool.map(run_shard, lines))
    else:
        import ray  # only the driver and the workers need Ray; --local does not

        ray.init(address=os.environ.get("RAY_ADDRESS", "auto"))
        remote = ray.remote(num_cpus=a.cpus)(run_shard)
        results = ray.get([remote.remote(line) for line in lines])
    failed = [(i + 1, err) for i, (rc, err) in enumerate(results) if rc != 0]
    for i, err in failed:
        print(f"shard {i}/{a.shards} failed: {err.strip().splitlines()[-1] if err.strip() else 'no message'}",
              file=sys.stderr)
    if failed:
        return 1
    files = [line[-1] for line in lines]
    merge = [cli, "merge", *files]
    if cmd[0] == "tune":
        merge += ["--out", os.path.join(a.out, "scan.json")]
    return subprocess.run(merge).returncode


if __name__ == "__main__":
    sys.exit(main())
