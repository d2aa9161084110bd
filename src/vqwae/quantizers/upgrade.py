"""How quantizers saved by older versions of vqwae are read: their configs (``upgrade_quantizer_config``) and their
state dicts (``upgrade_state_dict``, which ``load_state_dict`` applies by itself). Each rule names the layout that
needs it; the current one passes through. A saved model loads into today's classes and gives identical outputs.

Format 3 (issue #56) split VQ-WAE in two: a saved "wasserstein" quantizer that used any of the paper's forms (a
solver other than semidiscrete, the gradient-trained codebook, the N(0, 1) start, the KL's mean, global_batch)
becomes a ``PaperWassersteinQuantizer`` ("paper-wasserstein"), the others a ``WassersteinQuantizer``; the options
removed then are dropped (pi_floor, which changes pi, only at 0).
"""
from __future__ import annotations

import dataclasses

# What a format-1 saved config (written before format versions, 2026-11-23) leaves out, with the value that run
# was trained with: options added later whose new default differs from the behaviour before them.
_FORMAT_1_IMPLICIT = {"wasserstein": {"codebook_update": "gradient", "pi_floor": 0.0}}
#: A VQ-WAE config of format 1 or 2 without ``pull`` was saved before the option existed (2026-11-27; every later file
#: names it): it trained at the full pull, where today's default (None) follows the latents per code.
PULL_BEFORE_THE_OPTION = 1.0


def implicit_options(kind: str, version: int) -> dict:
    """The options a quantizer config of format ``version`` leaves out, with the values its run trained with (the one
    rule for a quantizer's model_config.json and a run's config.json)."""
    implicit = dict(_FORMAT_1_IMPLICIT.get(kind, {})) if version == 1 else {}
    if kind == "wasserstein" and version < 3:
        implicit["pull"] = PULL_BEFORE_THE_OPTION
    return implicit


def upgrade_quantizer_config(kind: str, values: dict, version: int) -> tuple[str, dict]:
    """A saved quantizer config (``model_config.json``'s, or a level's of a residual stack) of format ``version``:
    the registry name and the options today's class takes."""
    from vqwae.quantizers.wasserstein_options import PRODUCT_FORMS, PaperWassersteinConfig, WassersteinConfig

    values = {**implicit_options(kind, version), **values}
    if kind != "wasserstein" or version >= 3:
        return kind, values
    if values.get("pi_floor", 0.0):
        raise ValueError(f"this model was trained with pi_floor={values['pi_floor']}, an option vqwae removed "
                         "(issue #56): load it with vqwae 0.1 at commit c3f1090")
    paper = any(values.get(k, v) != v for k, v in PRODUCT_FORMS.items())
    kind, cls = ("paper-wasserstein", PaperWassersteinConfig) if paper else ("wasserstein", WassersteinConfig)
    fields = {f.name for f in dataclasses.fields(cls)}
    return kind, {k: v for k, v in values.items() if k in fields}


# State-dict keys of layout 1 (before the solvers were modules) -> layout 2, for each solver; keys of another
# solver's state, which layout 1 kept on every quantizer, are dropped.
_LAYOUT_1 = {
    "semidiscrete": {"code_potential": "solver.potential", "potential_scale": "solver.scale"},
    "sinkhorn": {"code_potential": "solver.potential", "potential_scale": None},
    "exact": {"code_potential": None, "potential_scale": None},
    "dual": {"code_potential": None, "potential_scale": None, "potential.": "solver.phi."},
}
# Layout 2 -> 3: the transport codebook's EMAs moved into its module (``transport``).
_LAYOUT_2_TRANSPORT = {"transport_mass": "mass", "transport_sum": "sum", "transport_steps": "steps",
                       "nearest_mass": "nearest_mass", "nearest_error": "nearest_error", "nearest_of": "nearest_of"}


def upgrade_state_dict(state_dict: dict, prefix: str, quantizer) -> None:
    """Bring, in place, the state dict of an older VQ-WAE quantizer (``quantizer``: the one loading it) to today's
    layout; a current one passes through. Renames layout 1's solver entries and layout 2's transport EMAs; fills what
    an older model lacks with the value it had in effect (a data-drawn codebook's count, an EMA's zero); drops the
    state of removed options (pull_target's gradient EMAs) and, for the paper's quantizer, the transport codebook's."""
    import torch  # here, not at the top: a training config reads this module's format rules without torch

    solver = getattr(quantizer.config, "solver", "semidiscrete")
    for old, new in _LAYOUT_1[solver].items():
        for key in [k for k in state_dict if k.startswith(prefix + old)]:
            if old.endswith(".") or key == prefix + old:
                value = state_dict.pop(key)
                if new is not None:
                    state_dict[prefix + new + key[len(prefix + old):]] = value
    state_dict.pop(prefix + "pull_grads", None)
    transport = getattr(quantizer, "transport", None)
    for old, new in _LAYOUT_2_TRANSPORT.items():
        if prefix + old in state_dict:
            value = state_dict.pop(prefix + old)
            if transport is not None:
                state_dict[prefix + "transport." + new] = value
    if transport is not None and prefix + "embedding" in state_dict:  # EMAs an older model did not keep: their start
        for name, value in transport.state_dict().items():
            state_dict.setdefault(prefix + "transport." + name, torch.zeros_like(value) if name != "nearest_of"
                                  else torch.full_like(value, -1))
    drawn, done = prefix + "codes_drawn", prefix + "codebook_initialized"
    if prefix + "embedding" in state_dict and done not in state_dict:  # a codebook never drawn from the data:
        # WassersteinQuantizer keeps it as trained; the paper's, with codebook_init="normal", never reads them
        state_dict[done] = torch.tensor(transport is not None)
    if drawn not in state_dict and done in state_dict:
        state_dict[drawn] = torch.tensor(quantizer.num_codes if bool(state_dict[done]) else 0)
