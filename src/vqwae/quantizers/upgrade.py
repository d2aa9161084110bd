"""How quantizers saved by older versions of vqwae are read: their configs (format versions) and their state dicts
(renamed or added buffers). Each rule names the version that needs it; the current format passes through."""
from __future__ import annotations

import torch


# What a format-1 saved config (written before format versions, 2026-11-23) leaves out, with the value that run
# was trained with: options added later whose new default differs from the behaviour before them.
_FORMAT_1_IMPLICIT = {"wasserstein": {"codebook_update": "gradient", "pi_floor": 0.0}}


def upgrade_quantizer_config(kind: str, values: dict, version: int) -> dict:
    """A saved quantizer config (or flat training config) of format ``version`` as the current format reads it."""
    if version == 1:
        return {**_FORMAT_1_IMPLICIT.get(kind, {}), **values}
    return dict(values)


# State-dict keys of layout 1 (before the solvers were modules) -> layout 2, for each solver; keys of another
# solver's state, which layout 1 kept on every quantizer, are dropped.
_LAYOUT_1 = {
    "semidiscrete": {"code_potential": "solver.potential", "potential_scale": "solver.scale"},
    "sinkhorn": {"code_potential": "solver.potential", "potential_scale": None},
    "exact": {"code_potential": None, "potential_scale": None},
    "dual": {"code_potential": None, "potential_scale": None, "potential.": "solver.phi."},
}


def upgrade_wasserstein_state_dict(state_dict: dict, prefix: str, config) -> None:
    """Bring, in place, an older WassersteinQuantizer state dict (``config``: its WassersteinConfig) up to date (no-op for a current one): rename layout 1's
    solver entries to layout 2's, and give a data-drawn codebook saved before ``codes_drawn`` existed its count
    (K once ``codebook_initialized`` was set, else 0)."""
    if config.codebook_update == "transport" and prefix + "transport_mass" in state_dict:
        state_dict.setdefault(prefix + "transport_steps", torch.zeros((), dtype=torch.long))  # saved before split_dead
    drawn, done = prefix + "codes_drawn", prefix + "codebook_initialized"
    if config.codebook_init == "data" and drawn not in state_dict and done in state_dict:
        state_dict[drawn] = torch.tensor(config.num_codes if bool(state_dict[done]) else 0)
    for old, new in _LAYOUT_1[config.solver].items():
        for key in [k for k in state_dict if k.startswith(prefix + old)]:
            if old.endswith(".") or key == prefix + old:
                value = state_dict.pop(key)
                if new is not None:
                    state_dict[prefix + new + key[len(prefix + old):]] = value
