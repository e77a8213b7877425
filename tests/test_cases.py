"""Shared named equivalence cases (tracr style): one dict per case."""


def _case(
    construction,
    h,
    num_layers,
    d,
    *,
    causal=True,
    looped=False,
    residual=False,
    path="structured",
    shared=False,
):
  name = (
      f"{construction}_{path}_H{h}_L{num_layers}_d{d}"
      f"{'' if causal else '_bidir'}{'_looped' if looped else ''}"
      f"{'_res' if residual else ''}{'_shared' if shared else ''}"
  )
  return dict(
      testcase_name=name,
      construction=construction,
      num_heads=h,
      num_layers=num_layers,
      width=d,
      causal=causal,
      looped=looped,
      residual=residual,
      path=path,
      shared=shared,
  )


GRID = [(h, l) for h in (1, 2, 3) for l in (1, 2, 3)]

CASES = (
    # Sparse tree-routing UT, structured (gather) path, every (H, L).
    [_case("sparse", h, l, 3 if h < 3 else 2) for h, l in GRID]
    # The same through the dense {0,1} matrices.
    + [_case("sparse", h, l, 2, path="dense") for h, l in GRID if h**l <= 9]
    # Gaussian per-layer UT at m = N, every (H, L).
    + [_case("random", h, l, 2, path="dense") for h, l in GRID]
    # Bidirectional, looped and residual variants.
    + [
        _case("sparse", 2, 2, 3, causal=False),
        _case("sparse", 2, 3, 2, looped=True),
        _case("sparse", 2, 2, 3, looped=True, residual=True),
        _case("sparse", 1, 3, 3, looped=True, residual=True, causal=False),
        _case("sparse", 2, 2, 2, looped=True, residual=True, path="dense"),
        _case("random", 2, 2, 3, causal=False, path="dense"),
        _case("random", 2, 2, 2, residual=True, path="dense"),
        _case("random", 3, 2, 2, residual=True, path="dense"),
        _case("random", 2, 2, 3, shared=True, path="dense"),
        _case(
            "random",
            2,
            2,
            2,
            looped=True,
            residual=True,
            shared=True,
            path="dense",
        ),
    ]
)
