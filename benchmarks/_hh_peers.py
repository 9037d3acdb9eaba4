"""Run pure-ldp 1.2.0's heavy-hitter protocols on one data set (helper of heavy_hitters.py).

This file runs in a separate virtual environment that has pure-ldp, never in ldpkit's:
``heavy_hitters.py`` starts it as ``<venv>/bin/python benchmarks/_hh_peers.py ...``.

Input: a text file with one user's string per line, already padded to ``length``
characters with the end symbol (which is in the alphabet), so that every protocol sees
fixed-length strings over one alphabet. Output (stdout): one JSON object per protocol
with the strings found for each k, their estimated fractions and the wall times.

Configuration (the authors' own heavy-hitter experiments in pure-ldp's
``simulations/paper_experiments.py``): the count-mean sketch oracle (CMS, k hash rows of
m buckets), fragments of 2 characters. pure-ldp's OLH server enumerates the whole domain
and its Hadamard oracles need a domain-sized matrix, so for strings of 16 characters the
sketch oracles are the only ones that run.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from typing import Any

import numpy as np
from pure_ldp.frequency_oracles.apple_cms import CMSClient, CMSServer
from pure_ldp.heavy_hitters.apple_sfp import SFPClient, SFPServer
from pure_ldp.heavy_hitters.prefix_extending import PEMClient, PEMServer
from pure_ldp.heavy_hitters.treehistogram import TreeHistClient, TreeHistServer


def oracle(epsilon: float, rows: int, buckets: int) -> tuple[Any, Any]:
    server = CMSServer(epsilon, rows, buckets)
    client = CMSClient(epsilon, server.get_hash_funcs(), buckets)
    return client, server


def build(name: str, args: argparse.Namespace, alphabet: list[str]) -> tuple[Any, Any]:
    fo_client, fo_server = oracle(args.epsilon, args.cms_rows, args.cms_buckets)
    identity = lambda x: x  # noqa: E731 (pure-ldp takes a callable)
    common = {
        "epsilon": args.epsilon,
        "max_string_length": args.length,
        "fragment_length": args.fragment,
        "index_mapper": identity,
    }
    if name == "PEM":
        client = PEMClient(start_length=0, alphabet=alphabet, fo_client=fo_client, **common)
        server = PEMServer(start_length=0, alphabet=alphabet, fo_server=fo_server, **common)
    elif name == "SFP":
        client = SFPClient(alphabet=set(alphabet), fo_client=fo_client, **common)
        server = SFPServer(alphabet=set(alphabet), fo_server=fo_server, **common)
    elif name == "TreeHist":
        client = TreeHistClient(alphabet=alphabet, fo_client=fo_client, **common)
        server = TreeHistServer(alphabet=alphabet, fo_server=fo_server, **common)
    else:
        raise SystemExit(f"unknown protocol {name}")
    return client, server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("data")
    parser.add_argument("--protocols", default="PEM,SFP,TreeHist")
    parser.add_argument("--epsilon", type=float, required=True)
    parser.add_argument("--ks", default="10,20")
    parser.add_argument("--length", type=int, default=16)
    parser.add_argument("--fragment", type=int, default=2)
    parser.add_argument("--alphabet", default="abcdefghijklmnopqrstuvwxyz.")
    parser.add_argument("--cms-rows", type=int, default=32)
    parser.add_argument("--cms-buckets", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with open(args.data) as fh:
        data = fh.read().split("\n")
    data = [d for d in data if d]
    alphabet = list(args.alphabet)
    ks = [int(k) for k in args.ks.split(",")]
    for name in args.protocols.split(","):
        random.seed(args.seed)
        np.random.seed(args.seed)
        client, server = build(name, args, alphabet)
        start, cpu = time.perf_counter(), time.process_time()
        reports = [client.privatise(word) for word in data]
        perturb_s = time.perf_counter() - start
        for report in reports:
            server.aggregate(report)
        aggregate_s = time.perf_counter() - start - perturb_s
        upstream_cpu = time.process_time() - cpu
        found: dict[str, Any] = {}
        decode_s: dict[str, float] = {}
        decode_cpu: dict[str, float] = {}
        for k in ks:
            start, cpu = time.perf_counter(), time.process_time()
            strings, counts = server.find_heavy_hitters(k=k)
            decode_s[str(k)] = time.perf_counter() - start
            decode_cpu[str(k)] = time.process_time() - cpu
            pairs = sorted(zip(strings, counts, strict=True), key=lambda sc: -float(sc[1]))[:k]
            found[str(k)] = [[s, float(c) / len(data)] for s, c in pairs]
        out = {
            "protocol": name,
            "n": len(data),
            "perturb_s": perturb_s,
            "aggregate_s": aggregate_s,
            "decode_s": decode_s,
            "upstream_cpu_s": upstream_cpu,
            "decode_cpu_s": decode_cpu,
            "found": found,
        }
        print(json.dumps(out), flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
