"""A k-hop table's rows and the paper's numbers beside them, as the plots and
the sweep's finished rows read them."""

import json
import math

ROWS = [
    dict(
        task="khop",
        kind=kind,
        variant=variant,
        data=json.dumps(dict(k=k)),
        lr=0.01,
        seeds=2,
        accuracy_mean=acc,
        accuracy_std=std,
        runs=f"{kind}{k}",
    )
    for kind, variant, k, acc, std in [
        ("sparse", "res_ln", 1, 1.0, 0.0),
        ("random", "res_ln", 1, 0.9, 0.05),
        ("sparse", "attn", 2, 0.35, math.nan),
        ("compiled_sparse", "attn", 2, 0.99, 0.01),
    ]
]
PAPER = {
    ("random", "res_ln"): "85.7-96.1",
    (2, "sparse", "attn"): "about 30-40",
    ("sparse", "res_ln"): "100",
}
