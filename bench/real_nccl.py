#!/usr/bin/env python3
"""Real NCCL (PyTorch's) over one GPU, two ranks that NCCL believes are on two hosts.

Each rank gets its own NCCL_HOSTID, so NCCL routes every byte between them through the network
plugin named by NCCL_NET (C4, or NCCL's own Socket). Run by bench/real-nccl.sh; needs torch with
CUDA and NCCL, nothing else (no network access).

  real_nccl.py run --net C4|Socket --out FILE [--min 1K --max 256M --factor 4]
      starts the two ranks, waits; rank 0 writes one JSON line per (op, size) to FILE
  real_nccl.py worker ...            (one rank; started by `run`)
  real_nccl.py compare C4.jsonl Socket.jsonl
      busbw of both transports side by side and their ratio; exit 1 on a wrong result
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import time

OPS = ("all_reduce", "all_gather", "reduce_scatter", "sendrecv")


def parse_size(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * units[s[-1].upper()] if s[-1].upper() in units else int(s)


def sizes(lo, hi, factor):
    s = lo
    while s <= hi:
        yield s
        s *= factor


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args):
    port = free_port()
    procs = []
    for rank in range(2):
        env = dict(os.environ)
        env.update({
            "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": "0",
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
            # Two "hosts": NCCL uses neither P2P nor SHM between them, only the network.
            "NCCL_HOSTID": "c4-real-nccl-host-%d" % rank,
            "NCCL_NET": args.net,
            "C4_RANK": str(rank),
        })
        cmd = [sys.executable, os.path.abspath(__file__), "worker", "--out", args.out,
               "--min", args.min, "--max", args.max, "--factor", str(args.factor)]
        procs.append(subprocess.Popen(cmd, env=env))
    rc = 0
    deadline = time.time() + args.timeout
    for p in procs:
        try:
            p.wait(timeout=max(1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            print("real_nccl: a rank did not finish in %d s" % args.timeout, file=sys.stderr)
        rc = rc or p.returncode
    return rc


def worker(args):
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(0)  # both ranks on the one GPU
    dev = torch.device("cuda", 0)
    try:  # device_id (torch >= 2.3) lets NCCL set up the communicator eagerly
        dist.init_process_group("nccl", init_method="env://", rank=rank, world_size=world,
                                device_id=dev)
    except TypeError:
        dist.init_process_group("nccl", init_method="env://", rank=rank, world_size=world)
    out = open(args.out, "w") if rank == 0 else None
    peer = (rank + 1) % world
    bad = 0
    for size in sizes(parse_size(args.min), parse_size(args.max), args.factor):
        n = max(1, size // 4)  # float32 elements; small integers stay exact in sums
        iters = 20 if size <= (1 << 20) else 5
        for op in OPS:
            if op == "all_reduce":
                buf = torch.full((n,), float(rank + 1), device=dev)

                def once():
                    buf.fill_(float(rank + 1))
                    dist.all_reduce(buf)

                def ok():
                    return bool(torch.all(buf == float(world * (world + 1) // 2)))
                nbytes, busbw_factor = n * 4, 2 * (world - 1) / world
            elif op == "all_gather":
                chunk = max(1, n // world)
                src = torch.full((chunk,), float(rank + 1), device=dev)
                dst = torch.empty(chunk * world, device=dev)

                def once():
                    dist.all_gather_into_tensor(dst, src)

                def ok():
                    want = torch.arange(1, world + 1, device=dev, dtype=torch.float32)
                    return bool(torch.all(dst.view(world, chunk) == want.view(world, 1)))
                nbytes, busbw_factor = chunk * world * 4, (world - 1) / world
            elif op == "reduce_scatter":
                chunk = max(1, n // world)
                src = torch.full((chunk * world,), float(rank + 1), device=dev)
                dst = torch.empty(chunk, device=dev)

                def once():
                    dist.reduce_scatter_tensor(dst, src)

                def ok():
                    return bool(torch.all(dst == float(world * (world + 1) // 2)))
                nbytes, busbw_factor = chunk * world * 4, (world - 1) / world
            else:  # sendrecv: each rank sends to the next and receives from the previous one
                src = torch.full((n,), float(rank + 7), device=dev)
                dst = torch.empty(n, device=dev)
                prev = (rank - 1) % world

                def once():
                    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, src, peer),
                                                   dist.P2POp(dist.irecv, dst, prev)])
                    for r in reqs:
                        r.wait()

                def ok():
                    return bool(torch.all(dst == float(prev + 7)))
                nbytes, busbw_factor = n * 4, 1.0
            once()  # warm-up (connections are set up lazily)
            torch.cuda.synchronize()
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                once()
            torch.cuda.synchronize()
            us = (time.perf_counter() - t0) / iters * 1e6
            good = ok()
            t = torch.tensor([us, 0.0 if good else 1.0], device=dev)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            us, wrong = float(t[0]), int(t[1])
            bad += wrong
            if out:
                algbw = nbytes / (us * 1e-6) / 1e9
                out.write(json.dumps({"net": os.environ["NCCL_NET"], "op": op, "size": nbytes,
                                      "timeUs": round(us, 2), "algbwGBs": round(algbw, 4),
                                      "busbwGBs": round(algbw * busbw_factor, 4),
                                      "ok": wrong == 0}) + "\n")
                out.flush()
    dist.destroy_process_group()
    return 1 if bad else 0


def compare(args):
    def load(path):
        rows = {}
        with open(path) as f:
            for line in f:
                if line.strip():
                    r = json.loads(line)
                    rows[(r["op"], r["size"])] = r
        return rows
    c4, sock = load(args.c4), load(args.socket)
    print("| op | size (B) | C4 busbw (GB/s) | Socket busbw (GB/s) | C4 / Socket | C4 time (us) |"
          " Socket time (us) | results |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    wrong = 0
    for key in sorted(c4, key=lambda k: (OPS.index(k[0]), k[1])):
        a, b = c4[key], sock.get(key)
        ratio = "%.2f" % (a["busbwGBs"] / b["busbwGBs"]) if b and b["busbwGBs"] > 0 else "n/a"
        ok = a["ok"] and (b is None or b["ok"])
        wrong += 0 if ok else 1
        print("| %s | %d | %.3f | %s | %s | %.1f | %s | %s |" % (
            key[0], key[1], a["busbwGBs"], "%.3f" % b["busbwGBs"] if b else "n/a", ratio,
            a["timeUs"], "%.1f" % b["timeUs"] if b else "n/a", "ok" if ok else "WRONG"))
    return 1 if wrong else 0


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("run", "worker"):
        p = sub.add_parser(name)
        p.add_argument("--net", default=os.environ.get("NCCL_NET", "C4"))
        p.add_argument("--out", required=True)
        p.add_argument("--min", default="1K")
        p.add_argument("--max", default="256M")
        p.add_argument("--factor", type=int, default=4)
        p.add_argument("--timeout", type=int, default=1800)
    c = sub.add_parser("compare")
    c.add_argument("c4")
    c.add_argument("socket")
    a = ap.parse_args(argv)
    return {"run": run, "worker": worker, "compare": compare}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
