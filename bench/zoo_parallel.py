#!/usr/bin/env python3
"""The model zoo on several GPUs of one host at once (issue 13; bench/zoo_bench.sh with GPUS=N).

One GPU takes the whole zoo in about 30 minutes, more than one device call; N GPUs of one host
take it in one. The zoo's jobs (one network at one input size, all its precisions) go to the GPUs
longest first, each onto the GPU with the least expected time so far (JOB_SECONDS). Each GPU runs
its jobs one after another, each as its own bench/zoo_bench.py with CUDA_VISIBLE_DEVICES naming
that GPU alone, so cnnrun and PyTorch both see only it, and both sides of a row still run on the
same GPU one after the other. bench/zoo_merge.py then joins the jobs' zoo_results.json into the
table one long run would print (it refuses GPUs of different models or drivers), and a note says
how many GPUs ran at once: their runs shared the host's CPUs, which only the host-bound ways
(PyTorch's eager ones) could feel.

  bench/zoo_parallel.py --gpus N -- ZOO_BENCH_PY_ARGS...   (zoo_bench.sh passes its own)

--nets, --sizes, --work, --logs, --out and --budget among the zoo_bench.py arguments are read
here and set per job; the rest go to every job as they are. Writes OUT/zoo_table.md and a
zoo_results.json of all the jobs' rows (bench/zoo_merge.py reads it like any run's), and as each
job ends OUT/zoo_jobs.tgz anew: every finished job's zoo_results.json and table as TAG.json and
TAG.md; exit 1 if a job failed or was skipped (over BUDGET), 2 if the merge refused.
"""
import argparse
import heapq
import json
import os
import shutil
import subprocess
import sys
import tarfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zoo_merge import MergeError, merge  # noqa: E402
from zoo_table import DEFAULT_NETS, NETS  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

# Expected seconds of a job (all four precisions, PyTorch's ways included) on an H100, measured in
# Session 26 (docs/performance.md); only their order matters: it decides which GPU a job goes to.
JOB_SECONDS = {
    ("thesis", "native"): 20, ("fashion", "native"): 20, ("lenet5", "native"): 20,
    ("resnet18", "small"): 50, ("vgg11_bn", "small"): 60, ("squeezenet1_1", "small"): 40,
    ("googlenet", "small"): 70, ("mobilenet_v2", "small"): 100, ("efficientnet_b0", "small"): 120,
    ("mobilenet_v3_small", "small"): 100,
    ("resnet18", "large"): 110, ("vgg11_bn", "large"): 300, ("squeezenet1_1", "large"): 100,
    ("googlenet", "large"): 200, ("mobilenet_v2", "large"): 200, ("efficientnet_b0", "large"): 250,
    ("mobilenet_v3_small", "large"): 150,
}


def jobs_of(nets, sizes):
    """(network, size or None for a network at its own input) in the zoo's order."""
    tv = {k: t for k, _, _, t in NETS}
    out = []
    for k in nets:
        out += [(k, s) for s in sizes] if tv[k] else [(k, None)]
    return out


def expected(job):
    k, s = job
    cls = "native" if s is None else "small" if s <= 64 else "large"
    return JOB_SECONDS.get((k, cls), 100)


def assign(jobs, gpus):
    """{gpu index: [jobs]}: longest first onto the least loaded GPU (ties: the lower index)."""
    heap = [(0, g) for g in range(gpus)]
    plan = {g: [] for g in range(gpus)}
    for job in sorted(jobs, key=lambda j: -expected(j)):
        load_s, g = heapq.heappop(heap)
        plan[g].append(job)
        heapq.heappush(heap, (load_s + expected(job), g))
    return plan


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", type=int, required=True, help="how many GPUs (the first N visible ones)")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("rest", nargs=argparse.REMAINDER, help="-- then bench/zoo_bench.py's arguments")
    a = ap.parse_args()
    rest = a.rest[1:] if a.rest[:1] == ["--"] else a.rest
    zp = argparse.ArgumentParser(add_help=False)
    for opt, default in (("--nets", ""), ("--sizes", "32 224"), ("--work", "/tmp/zoo_bench"), ("--logs", ""),
                         ("--out", ""), ("--budget", "480")):
        zp.add_argument(opt, default=default)
    z, passed = zp.parse_known_args(rest)
    if a.gpus < 1:
        ap.error(f"--gpus must be at least 1, found {a.gpus}")
    keys = [k for k, *_ in NETS]
    nets = z.nets.replace(",", " ").split() or [k for k, *_ in DEFAULT_NETS]
    for k in nets:
        if k not in keys:
            ap.error(f"--nets: unknown network '{k}' (known: {' '.join(keys)})")
    sizes = [int(s) for s in z.sizes.replace(",", " ").split()]
    visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if visible and len(visible) < a.gpus:
        ap.error(f"--gpus {a.gpus}, but CUDA_VISIBLE_DEVICES names {len(visible)}: {','.join(visible)}")
    ids = visible[:a.gpus] if visible else [str(g) for g in range(a.gpus)]
    budget = float(z.budget)
    logs = z.logs or os.path.join(z.work, "logs")
    plan = assign(jobs_of(nets, sizes), a.gpus)
    start = time.time()
    done = {}  # job -> (rc, zoo_results.json or None)
    lock = threading.Lock()

    def say(msg):
        with lock:
            print(f"[{time.time() - start:6.1f} s] {msg}", flush=True)

    def run_gpu(g):
        for k, s in plan[g]:
            tag = f"{k}_{s}" if s is not None else k
            out = os.path.join(logs, f"gpu{g}", tag)  # the job's table, results and output, with its logs
            left = budget - (time.time() - start)
            if left <= 0:
                with lock:
                    done[(k, s)] = ("skipped: over the time budget", None)
                continue
            cmd = [a.python, os.path.join(HERE, "zoo_bench.py")] + passed + [
                "--nets", k, "--sizes", str(s) if s is not None else z.sizes, "--work", os.path.join(z.work, f"gpu{g}"),
                "--logs", os.path.join(logs, f"gpu{g}"), "--out", out, "--budget", f"{left:.0f}"]
            os.makedirs(out, exist_ok=True)
            env = dict(os.environ, CUDA_VISIBLE_DEVICES=ids[g], PYTHONUNBUFFERED="1")
            with open(os.path.join(out, "zoo_bench.log"), "w") as log:
                rc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
            res = os.path.join(out, "zoo_results.json")
            with lock:
                done[(k, s)] = (rc, res if os.path.exists(res) else None)
                if z.out and os.path.exists(res):
                    # Each finished job's rows in OUT at once, so that a run cut short (a device
                    # call's limit) still hands back the jobs it finished: one archive, rewritten
                    # whole as each job ends (the device tool hands back at most 8 files).
                    jobs_dir = os.path.join(logs, "jobs")
                    os.makedirs(jobs_dir, exist_ok=True)
                    for name, ext in (("zoo_results.json", "json"), ("zoo_table.md", "md")):
                        if os.path.exists(os.path.join(out, name)):
                            shutil.copyfile(os.path.join(out, name), os.path.join(jobs_dir, f"{tag}.{ext}"))
                    os.makedirs(z.out, exist_ok=True)
                    part = os.path.join(z.out, ".zoo_jobs.tgz.part")
                    with tarfile.open(part, "w:gz") as tar:
                        for f in sorted(os.listdir(jobs_dir)):
                            tar.add(os.path.join(jobs_dir, f), arcname=f)
                    os.replace(part, os.path.join(z.out, "zoo_jobs.tgz"))
            say(f"GPU {ids[g]}: {tag} rc {rc} ({os.path.relpath(os.path.join(out, 'zoo_bench.log'))})")

    say("plan: " + "; ".join(f"GPU {ids[g]}: " + ", ".join(f"{k} {s or 'native'}" for k, s in plan[g])
                             for g in plan))
    threads = [threading.Thread(target=run_gpu, args=(g,)) for g in plan if plan[g]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    failed = [f"{k} {s or 'native'}: {'rc ' + str(rc) if isinstance(rc, int) else rc}"
              for (k, s), (rc, _) in sorted(done.items(), key=lambda i: (keys.index(i[0][0]), i[0][1] or 0))
              if rc != 0]
    paths = [p for _, p in done.values() if p]
    if not paths:
        print("zoo_parallel: no job left results" + (": " + "; ".join(failed) if failed else ""), file=sys.stderr)
        return 1
    try:
        merged = merge(paths, sizes)
    except MergeError as e:
        print(f"zoo_parallel: {e}", file=sys.stderr)
        return 2
    if "--dry" in passed:
        note = (f"- Ran as {a.gpus} processes at once on the CPU (bench/zoo_parallel.py, dry run), a job (a network "
                f"at one input) each at a time. Whole run {time.time() - start:.0f} s.")
    else:
        note = (f"- Ran on {a.gpus} GPU{'s' if a.gpus > 1 else ''} of one host at once (GPUs {', '.join(ids)}; "
                "bench/zoo_parallel.py), each job (a network at one input) on one GPU, cnnrun and PyTorch one "
                f"after the other; the GPUs' runs shared the host's CPUs. Whole run {time.time() - start:.0f} s.")
    if failed:
        note += "\n- Jobs that failed or were skipped: " + "; ".join(failed) + "."
    text = merged.text.rstrip("\n") + "\n" + note
    print("\n" + text)
    if z.out:
        os.makedirs(z.out, exist_ok=True)
        with open(os.path.join(z.out, "zoo_table.md"), "w") as f:
            f.write(text + "\n")
        with open(os.path.join(z.out, "zoo_results.json"), "w") as f:
            json.dump({"header": merged.header, "args": dict(merged.runs[0].get("args", {}), nets=" ".join(nets),
                                                              sizes=" ".join(map(str, sizes)), gpus=ids),
                       "results": [r for run in merged.runs for r in run["results"]]}, f, indent=1, default=str)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
