"""ut's gpt2 forward against Hugging Face's GPT2LMHeadModel, the model Zhong &
Andreas trained (needs the optional `bench` extra: torch and transformers)."""

import importlib.util

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from ut.training import models
from ut.training.tasks import dyck

HAVE_HF = all(
    importlib.util.find_spec(m) is not None for m in ("torch", "transformers")
)
LAYERS = 2
# Ours -> HF's state_dict names, per block (HF's Conv1D stores (in, out), as ours).
BLOCK = {
    ("ln1", "scale"): "ln_1.weight",
    ("ln1", "bias"): "ln_1.bias",
    ("attn", "qkv", "kernel"): "attn.c_attn.weight",
    ("attn", "qkv", "bias"): "attn.c_attn.bias",
    ("attn", "proj", "kernel"): "attn.c_proj.weight",
    ("attn", "proj", "bias"): "attn.c_proj.bias",
    ("ln2", "scale"): "ln_2.weight",
    ("ln2", "bias"): "ln_2.bias",
    ("mlp", "fc", "kernel"): "mlp.c_fc.weight",
    ("mlp", "fc", "bias"): "mlp.c_fc.bias",
    ("mlp", "proj", "kernel"): "mlp.c_proj.weight",
    ("mlp", "proj", "bias"): "mlp.c_proj.bias",
}


def _get(tree, path):
  for key in path:
    tree = tree[key]
  return tree


@absltest.skipUnless(HAVE_HF, "needs torch and transformers (pip install .[bench])")
class HuggingFaceGPT2Test(absltest.TestCase):

  def test_logits_equal_hf_gpt2_in_their_right_padded_layout(self):
    import torch  # pylint: disable=g-import-not-at-top
    import transformers  # pylint: disable=g-import-not-at-top

    spec = models.ModelSpec(
        kind="gpt2_random",
        variant="res_ln_mlp",
        vocab_size=4,
        max_len=61,
        num_classes=4,  # Their head scores all 4 tokens.
        num_heads=4,
        num_layers=LAYERS,
        width=16,
        head_width=4,
        mlp_width=64,
        left_pad=dyck.PAD,
    )
    params = models.init(jax.random.PRNGKey(0), spec)
    rng = np.random.default_rng(0)  # Move every leaf off its init.
    params = jax.tree.map(
        lambda a: np.asarray(a + 0.3 * rng.normal(size=a.shape), np.float32),
        params,
    )
    hf = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(
            vocab_size=4,
            n_embd=16,
            n_layer=LAYERS,
            n_head=4,
            n_positions=61,
            tie_word_embeddings=False,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
        )
    ).eval()
    state = hf.state_dict()
    put = lambda name, a: state[name].copy_(torch.tensor(np.asarray(a)))
    with torch.no_grad():
      put("transformer.wte.weight", params["embed"]["token"])
      put("transformer.wpe.weight", params["embed"]["position"])
      for layer in range(LAYERS):
        for path, name in BLOCK.items():
          put(f"transformer.h.{layer}.{name}", _get(params["blocks"], path)[layer])
      put("transformer.ln_f.weight", params["ln_f"]["scale"])
      put("transformer.ln_f.bias", params["ln_f"]["bias"])
      put("lm_head.weight", params["unembed"].T)
    texts = ["(()", "()()(())", "((((", ")(" * 20, "(" * 30 + ")" * 30]
    # Their rows: the string and '?' from position 0, padded on the right.
    rows = [[{"(": 1, ")": 2}[c] for c in t] + [dyck.QUERY] for t in texts]
    right = np.array([r + [dyck.PAD] * (61 - len(r)) for r in rows])
    with torch.no_grad():
      theirs = hf(torch.tensor(right)).logits.numpy()
    ours = np.asarray(
        models.apply(
            params,
            spec,
            jnp.asarray(dyck.encode(texts, 60)),
            jax.lax.Precision.HIGHEST,
        )
    )
    for b, row in enumerate(rows):
      np.testing.assert_allclose(
          ours[b, -len(row) :], theirs[b, : len(row)], rtol=1e-5, atol=1e-5
      )


if __name__ == "__main__":
  absltest.main()
