"""`zbpscale sizes [SWEEP] [--params N]`: model shapes and their counts, torch-free.

    zbpscale sizes                        # the presets
    zbpscale sizes sweeps/ladder.py       # a sweep's sizes: presets and shapes of its own, as its runs train them
    zbpscale sizes --params 760M          # shapes near 760M non-embedding parameters, to write a rung of your own
"""

from __future__ import annotations

import math

from zbpscale.errors import ConfigError
from zbpscale.jobs.sweep import load_sweep
from zbpscale.run.config import ASPECT, n_params, parse_count, shapes_near, size_table


def add_arguments(p) -> None:
    p.add_argument("target", nargs="?", help="a sweep file: list its sizes (default: the presets)")
    p.add_argument("--params", metavar="N", help="propose shapes of about N non-embedding parameters, e.g. 760M")


def run(args) -> int:
    if args.params is not None and args.target:
        raise ConfigError("--params proposes shapes for any sweep; a sweep file lists its own sizes",
                          hint=f"give one: zbpscale sizes {args.target}, or zbpscale sizes --params {args.params}")
    if args.params is not None:
        target = parse_count(args.params)
        near = shapes_near(target)
        if not near:
            (closest,) = shapes_near(target, count=1, within=math.inf)
            print(f"no shape within 10% of {target:,.0f} non-embedding parameters by the rule (head dim 64, "
                  f"d_model a multiple of 64, d_model / n_layer in {ASPECT[0]}..{ASPECT[1]}); the nearest it makes: "
                  f"{n_params(closest, embeddings=False):,} (n_layer={closest.n_layer}, d_model={closest.d_model})")
            return 1
        print(size_table({f"#{i}": s for i, s in enumerate(near, 1)}))
        print(f"rule: head dim 64, d_model a multiple of 64, d_model / n_layer in {ASPECT[0]}..{ASPECT[1]} (the "
              "presets' span), d_ff automatic; nearest to the target first. In a sweep file:")
        best = near[0]
        print(f"  Size(name=..., model=ModelConfig(n_layer={best.n_layer}, n_head={best.n_head}, "
              f"d_model={best.d_model}), global_batch=..., lr=...)")
        return 0
    if args.target:
        sweep = load_sweep(args.target)
        shapes = {s.name: s.shape() for s in sorted(sweep.sizes, key=lambda s: s.params_non_embedding)}
        notes = {s.name: s.model_file or ("its own" if s.model is not None else "preset") for s in sweep.sizes}
        print(size_table(shapes, notes))
        return 0
    print(size_table())
    return 0
